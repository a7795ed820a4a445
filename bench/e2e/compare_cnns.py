#!/usr/bin/env python3
"""End-to-end latency of ResNet-50 and MobileNetV2 (batch 1, 3x224x224, random
weights) in Tessera vs ONNX Runtime on the same .onnx file, in one run, at each
thread count; checks Tessera's output against ORT's on the same input and
summarises which kernels `tessera compile` chose.

  .venv/bin/python bench/e2e/compare_cnns.py --tessera build/bin/tessera \
      [--models-dir DIR] [--threads 1 2] [--iterations 20] [--warmup 3] [--rounds 1]

The models come from make_cnn_models.py (written into --models-dir, a temporary
directory by default, unless they are already there). Ratio = Tessera / ORT
median latency: below 1 means Tessera is faster. With --rounds R > 1 the two
runtimes are timed alternately R times and each keeps its best median, which
damps noise on a shared machine.
"""
import argparse
import collections
import json
import os
import subprocess
import sys

import numpy as np
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_ort import ROOT, ort_median_ms  # noqa: E402
import scratch  # noqa: E402

MODELS = ["resnet50", "mobilenetv2"]


def machine_name():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return "unknown cpu"


def parse_compile_report(text):
    """Rows of the `tessera compile` op table as (op, type, kernel, tiles, note)."""
    rows, in_table = [], False
    for line in text.splitlines():
        fields = line.split()
        if fields[:4] == ["op", "type", "kernel", "tiles"]:
            in_table = True
            continue
        if not in_table:
            continue
        if not line.startswith("  ") or fields[:1] == ["note:"] or len(fields) < 4 or not fields[3].isdigit():
            in_table = False
            continue
        rows.append((fields[0], fields[1], fields[2], int(fields[3]), " ".join(fields[4:])))
    return rows


def summarise_kernels(rows):
    by_kernel = collections.OrderedDict()
    for _, op_type, kernel, _, _ in rows:
        by_kernel.setdefault(kernel, collections.Counter())[op_type] += 1
    parts = []
    for kernel, types in sorted(by_kernel.items(), key=lambda kv: -sum(kv[1].values())):
        detail = ", ".join(f"{t} {n}" for t, n in types.most_common())
        parts.append(f"{kernel} {sum(types.values())} ({detail})")
    folded = sum("folded in" in r[4] for r in rows)
    fused = sum("fused in" in r[4] for r in rows)
    return f"{len(rows)} ops: " + "; ".join(parts) + f"; BN folded {folded}, activations fused {fused}"


def tessera_median_ms(tessera, tess, input_args, threads, iterations, warmup):
    out = subprocess.run([tessera, "run", tess, *input_args, "--threads", str(threads),
                          "--iterations", str(iterations), "--warmup", str(warmup), "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["latency_ms"]["median"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "bin", "tessera"))
    ap.add_argument("--models-dir", help="where the .onnx files are (or get written); default: a temp dir")
    ap.add_argument("--models", nargs="+", choices=MODELS, default=MODELS)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=1, help="alternate the two runtimes this many times")
    ap.add_argument("--seed", type=int, default=0, help="seed of the weights and the input")
    ap.add_argument("--compile-args", default="",
                    help="extra `tessera compile` arguments, e.g. \"--layout nchw --no-residual-fusion\" for A/B runs")
    args = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # keep the header ahead of the progress lines on stderr

    work = scratch.work_dir("tessera_cnns_")
    models_dir = args.models_dir or work
    missing = [m for m in args.models if not os.path.exists(os.path.join(models_dir, m + ".onnx"))]
    if missing:
        subprocess.run([sys.executable, os.path.join(ROOT, "bench", "e2e", "make_cnn_models.py"), models_dir,
                        "--seed", str(args.seed), "--models", *missing], check=True)

    print(f"machine: {machine_name()}, {os.cpu_count()} logical cpus; ONNX Runtime {ort.__version__} "
          f"(CPU EP, ORT_ENABLE_ALL, inter_op 1); tessera {args.tessera}")
    print(f"batch 1, input 1x3x224x224 float32, seed {args.seed}; median of {args.iterations} runs after "
          f"{args.warmup} warm-up, best of {args.rounds} round(s); ratio = tessera / ort")
    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal([1, 3, 224, 224]).astype(np.float32)
    x_path = os.path.join(work, "input.npy")
    np.save(x_path, x)
    input_args = ["--input", f"input={x_path}"]

    results, kernel_summaries, failures = [], collections.OrderedDict(), 0
    for name in args.models:
        model = os.path.join(models_dir, name + ".onnx")
        feeds = {"input": x}
        ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        tol = 1e-4 * (1.0 + float(np.max(np.abs(ref))))
        for t in args.threads:
            tess = os.path.join(work, f"{name}_t{t}.tess")
            report = subprocess.run([args.tessera, "compile", model, "-o", tess, "--threads", str(t),
                                     *args.compile_args.split()],
                                    check=True, capture_output=True, text=True).stdout
            rows = parse_compile_report(report)
            tiles = sum(r[3] for r in rows)
            kernel_summaries.setdefault(summarise_kernels(rows), []).append(f"{name} t{t}: {tiles} tiles")

            out_dir = os.path.join(work, f"out_{name}_t{t}")
            subprocess.run([args.tessera, "run", tess, *input_args, "--threads", str(t), "--iterations", "1",
                            "--warmup", "0", "--output-dir", out_dir], check=True, capture_output=True)
            got = np.load(os.path.join(out_dir, "logits.npy"))
            err = float(np.max(np.abs(got.astype(np.float64) - ref))) if got.shape == ref.shape else float("inf")
            ok = err <= tol
            failures += not ok

            tessera_ms, ort_ms = float("inf"), float("inf")
            for _ in range(args.rounds):
                tessera_ms = min(tessera_ms, tessera_median_ms(args.tessera, tess, input_args, t,
                                                               args.iterations, args.warmup))
                ort_ms = min(ort_ms, ort_median_ms(model, feeds, t, args.iterations, args.warmup))
            results.append((name, t, tessera_ms, ort_ms, err, tol, ok))
            print(f"  done {name} t{t}", file=sys.stderr, flush=True)

    print(f"{'model':<12} {'threads':>7} {'tessera ms':>11} {'ort ms':>9} {'ratio':>7} {'max |err|':>10} "
          f"{'tol':>9} check")
    for name, t, tessera_ms, ort_ms, err, tol, ok in results:
        print(f"{name:<12} {t:>7} {tessera_ms:>11.2f} {ort_ms:>9.2f} {tessera_ms / ort_ms:>7.2f} {err:>10.2e} "
              f"{tol:>9.2e} {'ok' if ok else 'FAIL'}")
    print("kernels chosen by tessera compile:")
    for summary, where in kernel_summaries.items():
        print(f"  [{', '.join(where)}] {summary}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
