#!/usr/bin/env python3
"""End-to-end latency of Tessera vs ONNX Runtime on the same .onnx file, in one
run, at each thread count. Prints a table with the ratio (Tessera / ORT: below
1 means Tessera is faster).

  .venv/bin/python bench/e2e/compare_ort.py [--model M.onnx] [--threads 1 2] [--iterations 50]

Without --model it benchmarks the demo CNN (scripts/make_demo_model.py).
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np
import onnxruntime as ort

import scratch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def ort_median_ms(model, feeds, threads, iterations, warmup):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    for _ in range(warmup):
        sess.run(None, feeds)
    times = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "bin", "tessera"))
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--iterations", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()
    work = scratch.work_dir("tessera_bench_")
    model = args.model
    if model is None:
        model = os.path.join(work, "small_cnn.onnx")
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make_demo_model.py"),
                        "--output", model, "--input-npy", os.path.join(work, "unused.npy")],
                       check=True, stdout=subprocess.DEVNULL)
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds, input_args = {}, []
    for i in sess.get_inputs():
        x = rng.standard_normal(i.shape).astype(np.float32)
        feeds[i.name] = x
        path = os.path.join(work, f"in{len(input_args)}.npy")
        np.save(path, x)
        input_args += ["--input", f"{i.name}={path}"]

    print(f"model {os.path.basename(model)}; machine {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cpus; ONNX Runtime {ort.__version__} (all graph optimisations on)")
    print(f"{'threads':>7} {'tessera ms':>11} {'ort ms':>9} {'ratio':>7}")
    for t in args.threads:
        tess = os.path.join(work, f"model_t{t}.tess")
        subprocess.run([args.tessera, "compile", model, "-o", tess, "--threads", str(t), "-q"], check=True)
        out = subprocess.run([args.tessera, "run", tess, *input_args, "--threads", str(t),
                              "--iterations", str(args.iterations), "--warmup", str(args.warmup), "--json"],
                             check=True, capture_output=True, text=True).stdout
        tessera_ms = json.loads(out)["latency_ms"]["median"]
        ort_ms = ort_median_ms(model, feeds, t, args.iterations, args.warmup)
        print(f"{t:>7} {tessera_ms:>11.3f} {ort_ms:>9.3f} {tessera_ms / ort_ms:>7.2f}")


if __name__ == "__main__":
    main()
