#!/usr/bin/env python3
"""ASPEN Fig. 10(a) reproduced: throughput vs tiles per layer on the synthetic network.

The network is synthetic_conv.py's (ASPEN §4.4: identical 3x3 convs, pad 1, stride 1,
batch 1, ReLU between). It is compiled once per tile count (`tessera compile --tiles K`) and
each .tess run by `tessera run` at every --threads value with each executor (the dataflow one
and the operator-with-barriers baseline, on the same tile graph); throughput = 1000 / median
latency (inferences per second). With --repeats R the runs are repeated R times, interleaved,
and each cell keeps the median of its R medians (a shared machine drifts). Writes a table
(stdout and CSV) and a PNG of throughput vs tiles, one curve per thread count and executor.
`tessera compile --tune` searches the same axis per model.

  .venv/bin/python bench/e2e/tiles_sweep.py [--threads 1 2] [--tiles 1 2 4 8 16 32 64]
      [--executors dataflow barrier] [--layers 32] [--channels 128] [--size 64]
      [--iterations 5] [--repeats 1] [--out-dir out/tiles_sweep]
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import synthetic_conv  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "bin", "tessera"))
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--tiles", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--channels", type=int, default=128)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--executors", nargs="+", choices=synthetic_conv.EXECUTORS,
                    default=list(synthetic_conv.EXECUTORS))
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "out", "tiles_sweep"))
    args = ap.parse_args()

    os.makedirs(args.out_dir, exist_ok=True)
    onnx_path = os.path.join(args.out_dir, "synthetic.onnx")
    synthetic_conv.make_model(onnx_path, args.layers, args.channels, args.size, seed=0)
    samples = {}  # (tiles, threads, executor) -> medians
    for tiles in args.tiles:
        tess = os.path.join(args.out_dir, f"synthetic_t{tiles}.tess")
        subprocess.run([args.tessera, "compile", onnx_path, "-o", tess, "--tiles", str(tiles),
                        "-q"], check=True)
    for repeat in range(args.repeats):
        for tiles in args.tiles:
            tess = os.path.join(args.out_dir, f"synthetic_t{tiles}.tess")
            for threads in args.threads:
                for executor in args.executors:
                    out = subprocess.run(
                        [args.tessera, "run", tess, "--json", "--threads", str(threads),
                         "--executor", executor, "--iterations", str(args.iterations),
                         "--warmup", str(args.warmup), "--seed", "1"],
                        check=True, capture_output=True, text=True).stdout
                    median = json.loads(out)["latency_ms"]["median"]
                    samples.setdefault((tiles, threads, executor), []).append(median)
                    print(f"repeat {repeat + 1}  tiles {tiles:4d}  threads {threads:3d}  "
                          f"{executor:8s}  median {median:10.2f} ms", flush=True)
    rows = []  # (tiles, threads, executor, median ms, inferences/s)
    for (tiles, threads, executor), medians in samples.items():
        median = statistics.median(medians)
        rows.append((tiles, threads, executor, median, 1000.0 / median))

    columns = [(t, e) for t in args.threads for e in args.executors]
    print(f"\ninferences/s (median of {args.repeats} repeat(s) of {args.iterations} runs each)")
    print(f"{'tiles':>6} " + " ".join(f"{f'{t} thr {e}':>18}" for t, e in columns) +
          "".join(f"{f'{t} thr barrier/df':>20}" for t in args.threads
                  if set(synthetic_conv.EXECUTORS) <= set(args.executors)))
    for tiles in args.tiles:
        cell = {(r[1], r[2]): r for r in rows if r[0] == tiles}
        line = f"{tiles:>6} " + " ".join(f"{cell[c][4]:>18.3f}" for c in columns)
        if set(synthetic_conv.EXECUTORS) <= set(args.executors):
            line += "".join(f"{cell[(t, 'barrier')][3] / cell[(t, 'dataflow')][3]:>20.3f}"
                            for t in args.threads)
        print(line)
    csv_path = os.path.join(args.out_dir, "tiles_sweep.csv")
    with open(csv_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["tiles", "threads", "executor", "median_ms", "inferences_per_s"])
        w.writerows(sorted(rows))
    print(f"wrote {csv_path}")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    for t in args.threads:
        for e in args.executors:
            pts = sorted((r[0], r[4]) for r in rows if r[1] == t and r[2] == e)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                    linestyle="-" if e == "dataflow" else "--", label=f"{t} thread(s), {e}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tiles per layer")
    ax.set_ylabel("inferences / s")
    ax.set_title(f"Synthetic {args.layers}-layer conv net ({args.channels} ch, "
                 f"{args.size}x{args.size}): throughput vs tiles")
    ax.grid(True, alpha=0.3)
    ax.legend()
    png = os.path.join(args.out_dir, "tiles_sweep.png")
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    print(f"wrote {png}")


if __name__ == "__main__":
    main()
