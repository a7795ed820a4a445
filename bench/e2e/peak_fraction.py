#!/usr/bin/env python3
"""What fraction of the machine's FP32 FMA peak ONNX Runtime (and Tessera) reach on a model, and
what a latency target relative to ORT would demand of the hardware.

For each model and thread count, alternately for --rounds rounds: the single-core AVX-512
FMA-loop peak (bench_sgemm's header, a register-only loop of independent FMAs), ORT's median
latency (all graph optimisations on) and, with --tessera, Tessera's on the same .onnx. Each keeps
its best round. The model's multiply-add work is counted from the ONNX graph with the shapes of one ORT
run: MatMul, Gemm and Conv (2 FLOP per multiply-add; elementwise ops, softmax and
normalisation are not counted, so the fractions are lower bounds of the FMA units' use).

  .venv/bin/python bench/e2e/peak_fraction.py --models out/transformers/bert_l12_s128_n1_op17.onnx \\
      [--threads 1 2] [--rounds 3] [--iterations 10] [--target 0.85] [--tessera build/bin/tessera]

Columns: GFLOP of the model; ORT's GFLOP/s and its fraction of `threads` x the measured
single-core peak; "needs": the fraction of peak a runtime must sustain over the whole model to
run at --target x ORT's latency (over 100% means the target is beyond the hardware).
"""
import argparse
import os
import re
import subprocess
import sys

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from compare_cnns import tessera_median_ms  # noqa: E402
from compare_ort import ort_median_ms  # noqa: E402
import scratch  # noqa: E402


def model_flops(path, feeds):
    """2 x the multiply-adds of every MatMul, Gemm and Conv, from the shapes of one ORT run
    (every operand and result of those ops made a graph output, optimisations off so the
    names stay): exact whatever the exporter left symbolic."""
    import onnxruntime as ort
    model = onnx.load(path)
    weights = {i.name: list(i.dims) for i in model.graph.initializer}
    nodes = [n for n in model.graph.node if n.op_type in ("MatMul", "Gemm", "Conv")]
    have = {o.name for o in model.graph.output}
    wanted = []
    for n in nodes:
        for name in (n.input[0], n.input[1], n.output[0]):
            if name not in weights and name not in have and name not in wanted:
                wanted.append(name)
    for name in wanted:
        model.graph.output.append(onnx.ValueInfoProto(name=name))
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    shapes = dict(weights)
    shapes.update({k: list(v.shape) for k, v in zip(names, sess.run(names, feeds))})
    shapes.update({k: list(v.shape) for k, v in feeds.items()})
    flops = 0
    for n in nodes:
        out = shapes[n.output[0]]
        if n.op_type == "MatMul":
            flops += 2 * int(np.prod(out)) * shapes[n.input[0]][-1]
        elif n.op_type == "Gemm":
            trans_a = any(x.name == "transA" and x.i for x in n.attribute)
            flops += 2 * int(np.prod(out)) * shapes[n.input[0]][0 if trans_a else 1]
        else:
            flops += 2 * int(np.prod(out)) * int(np.prod(shapes[n.input[1]][1:]))
    return flops


def measured_peak(bench_sgemm):
    out = subprocess.run([bench_sgemm, "--benchmark_filter=^$"], check=True, capture_output=True,
                         text=True).stdout
    match = re.search(r"measured AVX-512 FMA-loop peak: ([0-9.]+) GFLOP/s", out)
    if not match:
        raise SystemExit("bench_sgemm printed no measured AVX-512 peak (no AVX-512 on this CPU?)")
    return float(match.group(1))


def random_feeds(model_path, seed):
    import onnxruntime as ort
    sess = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        if i.type == "tensor(int64)":
            feeds[i.name] = rng.integers(0, 100, size=shape, dtype=np.int64)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", required=True)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--target", type=float, default=0.85, help="latency target as a fraction of ORT's")
    ap.add_argument("--bench-sgemm", default=os.path.join(ROOT, "build", "bin", "bench_sgemm"))
    ap.add_argument("--tessera", help="also time this tessera binary on the same .onnx")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)
    work = scratch.work_dir("tessera_peak_")

    print(f"{'model':<32} {'thr':>3} {'GFLOP':>7} {'peak GF/s':>10} {'ORT ms':>8} {'ORT GF/s':>9} "
          f"{'ORT %pk':>8} {'needs':>7}" + (f" {'tessera ms':>11} {'tess %pk':>9}" if args.tessera else ""))
    for path in args.models:
        name = os.path.basename(path)
        feeds = random_feeds(path, args.seed)
        gflop = model_flops(path, feeds) * 1e-9
        input_args = []
        if args.tessera:
            tess = os.path.join(work, name + ".tess")
            for k, v in feeds.items():
                npy = os.path.join(work, f"{name}_{k}.npy")
                np.save(npy, v)
                input_args += ["--input", f"{k}={npy}"]
        for t in args.threads:
            peak = ort_ms = tess_ms = None
            if args.tessera:
                subprocess.run([args.tessera, "compile", path, "-o", tess, "--threads", str(t), "-q"],
                               check=True)
            for _ in range(args.rounds):
                p = measured_peak(args.bench_sgemm) * t
                peak = p if peak is None else max(peak, p)
                o = ort_median_ms(path, feeds, t, args.iterations, args.warmup)
                ort_ms = o if ort_ms is None else min(ort_ms, o)
                if args.tessera:
                    x = tessera_median_ms(args.tessera, tess, input_args, t, args.iterations, args.warmup)
                    tess_ms = x if tess_ms is None else min(tess_ms, x)
            ort_rate = gflop / (ort_ms * 1e-3)
            needs = gflop / (args.target * ort_ms * 1e-3) / peak
            line = (f"{name:<32} {t:>3} {gflop:>7.2f} {peak:>10.1f} {ort_ms:>8.2f} {ort_rate:>9.1f} "
                    f"{100 * ort_rate / peak:>7.1f}% {100 * needs:>6.1f}%")
            if args.tessera:
                line += f" {tess_ms:>11.2f} {100 * gflop / (tess_ms * 1e-3) / peak:>8.1f}%"
            print(line)
    print(f"peak: best of the rounds' FMA-loop measurements x threads; 'needs' = the share of that peak "
          f"a runtime must sustain to run at {args.target} x ORT's best median")


if __name__ == "__main__":
    main()
