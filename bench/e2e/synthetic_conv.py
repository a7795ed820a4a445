#!/usr/bin/env python3
"""ASPEN's synthetic network (ASPEN §4.4, Fig. 10): identical 3x3 convolutions,
pad 1, stride 1, batch 1, ReLU between layers, random weights. Compiled once,
then run by `tessera run` with the dataflow executor and with the
operator-with-barriers baseline (`--executor barrier`) at each thread count, in
the same run. Prints the median latency of each, their ratio, and per executor
the speedup S over its own 1-thread run with the Karp-Flatt experimentally
determined serial fraction e = (1/S - 1/p) / (1 - 1/p) and parallel fraction
p_e = 1 - e (ASPEN §4.2). Writes the numbers as JSON and CSV for
plot_scaling.py.

  .venv/bin/python bench/e2e/synthetic_conv.py [--threads 1 2 4 8 16] \\
      [--layers 32] [--channels 128] [--size 64] [--tiles N] [--iterations 10]

The paper's configuration is the default (32 layers, 128 -> 128 channels,
64 x 64, 38.7 GFLOP per run): with the scalar reference kernels one run takes
tens of seconds on one thread, so shrink it with --layers/--channels/--size
for a quick look. A 1-thread run is always added: the speedups need it.
"""
import argparse
import csv
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXECUTORS = ("dataflow", "barrier")


def make_model(path, layers, channels, size, seed):
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    x = "input"
    scale = (2.0 / (channels * 9)) ** 0.5  # He initialisation keeps activations bounded
    for i in range(layers):
        w = rng.standard_normal([channels, channels, 3, 3]).astype(np.float32) * scale
        b = (rng.standard_normal([channels]) * 0.01).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"conv{i}.w"), numpy_helper.from_array(b, f"conv{i}.b")]
        nodes.append(helper.make_node("Conv", [x, f"conv{i}.w", f"conv{i}.b"], [f"conv{i}"],
                                      name=f"conv{i}", kernel_shape=[3, 3], strides=[1, 1],
                                      pads=[1, 1, 1, 1]))
        x = f"conv{i}"
        if i + 1 < layers:
            nodes.append(helper.make_node("Relu", [x], [f"relu{i}"], name=f"relu{i}"))
            x = f"relu{i}"
    nodes.append(helper.make_node("Identity", [x], ["output"], name="output"))
    graph = helper.make_graph(
        nodes, "synthetic_conv",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, channels, size, size])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, channels, size, size])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)


def machine():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        info = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
        name = info.get("Model name", platform.processor()).strip()
        return f"{name}, {os.cpu_count()} cpus ({len(os.sched_getaffinity(0))} usable)"
    except (OSError, subprocess.CalledProcessError):
        return f"{platform.machine()}, {os.cpu_count()} cpus"


def karp_flatt(speedup, p):
    """Experimentally determined serial fraction (Karp & Flatt 1990); None at p = 1."""
    if p <= 1 or speedup <= 0:
        return None
    return (1.0 / speedup - 1.0 / p) / (1.0 - 1.0 / p)


def run_once(args, tess, executor, threads):
    cmd = [args.tessera, "run", tess, "--json", "--executor", executor, "--threads", str(threads),
           "--iterations", str(args.iterations), "--warmup", str(args.warmup), "--seed", "1"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    report = json.loads(out)
    if report.get("executor") != executor or report.get("threads") != threads:
        sys.exit(f"error: tessera run reported {report.get('executor')}/{report.get('threads')}, "
                 f"asked for {executor}/{threads}")
    return report["latency_ms"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "bin", "tessera"))
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--channels", type=int, default=128)
    ap.add_argument("--size", type=int, default=64, help="input height = width")
    ap.add_argument("--tiles", type=int, default=0,
                    help="tiles per op (0: the compiler's rule; ASPEN used 128)")
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1,
                    help="alternate the two executors this many times per thread count; "
                         "the median of the medians is kept (noisy machines)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output", default=None,
                    help="results file stem (default: synthetic_conv_<layers>x<channels>x<size> "
                         "in a temporary directory); writes STEM.json and STEM.csv")
    args = ap.parse_args()
    if min(args.threads) < 1 or min(args.layers, args.channels, args.size, args.iterations) < 1:
        sys.exit("error: threads, layers, channels, size and iterations must be positive")
    if not os.access(args.tessera, os.X_OK):
        sys.exit(f"error: no tessera binary at {args.tessera} (build it, or pass --tessera)")
    threads = sorted(set(args.threads) | {1})

    work = tempfile.mkdtemp(prefix="tessera_synthetic_")
    onnx_path = os.path.join(work, "synthetic_conv.onnx")
    tess = os.path.join(work, "synthetic_conv.tess")
    make_model(onnx_path, args.layers, args.channels, args.size, args.seed)
    compile_cmd = [args.tessera, "compile", onnx_path, "-o", tess, "--threads", str(max(threads)), "-q"]
    if args.tiles > 0:
        compile_cmd += ["--tiles", str(args.tiles)]
    subprocess.run(compile_cmd, check=True)
    inspect = subprocess.run([args.tessera, "inspect", tess, "--json"], capture_output=True,
                             text=True, check=True).stdout
    try:
        summary = json.loads(inspect)
        nodes = summary.get("nodes")
        kernels = ", ".join(sorted({op.get("kernel", "?") for op in summary.get("ops", [])}))
    except json.JSONDecodeError:
        nodes, kernels = None, "unknown"

    flops = args.layers * 2.0 * args.channels * args.channels * 9 * args.size * args.size
    config = {"layers": args.layers, "channels": args.channels, "size": args.size,
              "kernel": 3, "pad": 1, "stride": 1, "batch": 1, "tiles": args.tiles or "compiler",
              "tile_nodes": nodes, "compiled_for_threads": max(threads),
              "iterations": args.iterations, "warmup": args.warmup, "repeats": args.repeats,
              "gflop_per_run": flops / 1e9, "machine": machine(),
              "kernels": kernels}
    print(f"synthetic conv net: {args.layers} layers, 3x3, {args.channels}->{args.channels} "
          f"channels, {args.size}x{args.size}, pad 1, stride 1, batch 1, ReLU between layers; "
          f"{flops / 1e9:.3f} GFLOP per run")
    print(f"compiled once for {max(threads)} threads, tiles per op: {config['tiles']}, "
          f"tile nodes: {nodes}; {args.iterations} iterations + {args.warmup} warm-up per run, "
          f"{args.repeats} repeat(s)")
    print(f"machine: {config['machine']}; kernels: {kernels}")

    medians = {e: {} for e in EXECUTORS}
    for t in threads:
        samples = {e: [] for e in EXECUTORS}
        for _ in range(args.repeats):
            for e in EXECUTORS:  # alternated, so drift on a shared machine hits both
                samples[e].append(run_once(args, tess, e, t)["median"])
        for e in EXECUTORS:
            medians[e][t] = statistics.median(samples[e])

    rows = []
    for e in EXECUTORS:
        for t in threads:
            ms = medians[e][t]
            speedup = medians[e][1] / ms
            serial = karp_flatt(speedup, t)
            rows.append({"executor": e, "threads": t, "median_ms": ms,
                         "runs_per_s": 1e3 / ms, "gflops": flops / 1e9 / (ms / 1e3),
                         "speedup": speedup, "karp_flatt_e": serial,
                         "p_e": None if serial is None else 1.0 - serial})

    def fmt(v, spec):
        return "-" if v is None else format(v, spec)

    print(f"\n{'threads':>7} {'dataflow ms':>12} {'barrier ms':>11} {'barrier/dataflow':>17}")
    for t in threads:
        d, b = medians["dataflow"][t], medians["barrier"][t]
        print(f"{t:>7} {d:>12.3f} {b:>11.3f} {b / d:>17.3f}")
    print(f"\n{'executor':>9} {'threads':>7} {'GFLOP/s':>8} {'speedup':>8} {'e (K-F)':>8} {'p_e':>6}")
    for r in rows:
        print(f"{r['executor']:>9} {r['threads']:>7} {r['gflops']:>8.3f} {r['speedup']:>8.3f} "
              f"{fmt(r['karp_flatt_e'], '>8.3f'):>8} {fmt(r['p_e'], '>6.3f'):>6}")

    stem = args.output or os.path.join(
        work, f"synthetic_conv_{args.layers}x{args.channels}x{args.size}")
    with open(stem + ".json", "w") as f:
        json.dump({"config": config, "results": rows}, f, indent=1)
    with open(stem + ".csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        writer.writeheader()
        writer.writerows(rows)
    print(f"\nwrote {stem}.json and {stem}.csv (plot: bench/e2e/plot_scaling.py {stem}.json)")


if __name__ == "__main__":
    main()
