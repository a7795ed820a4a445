#!/usr/bin/env python3
"""Draws threads vs throughput (model runs per second) for the dataflow and the
barrier executor from the JSON or CSV that synthetic_conv.py writes, with the
ideal linear scaling of each from its 1-thread point, and writes a PNG.

  .venv/bin/python bench/e2e/plot_scaling.py RESULTS.json [-o scaling.png]

Needs matplotlib in the project's .venv (scripts/setup.sh does not install it
yet): .venv/bin/pip install matplotlib
"""
import argparse
import csv
import json
import os
import sys


def load(path):
    if path.endswith(".csv"):
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        for r in rows:
            r["threads"] = int(r["threads"])
            r["runs_per_s"] = float(r["runs_per_s"])
        return {}, rows
    with open(path) as f:
        data = json.load(f)
    return data.get("config", {}), data["results"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", help="STEM.json or STEM.csv from synthetic_conv.py")
    ap.add_argument("-o", "--output", help="PNG to write (default: next to the results)")
    args = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("error: matplotlib is not installed in this Python "
                 f"({sys.executable}); install it with '{sys.executable} -m pip install "
                 "matplotlib' (scripts/setup.sh does not add it yet)")
    config, rows = load(args.results)
    output = args.output or os.path.splitext(args.results)[0] + "_scaling.png"
    fig, ax = plt.subplots(figsize=(6, 4))
    for executor, style in (("dataflow", "o-"), ("barrier", "s-")):
        points = sorted((r["threads"], r["runs_per_s"]) for r in rows if r["executor"] == executor)
        if not points:
            continue
        threads = [p[0] for p in points]
        line, = ax.plot(threads, [p[1] for p in points], style, label=executor)
        base = dict(points).get(1)
        if base:
            ax.plot(threads, [base * t for t in threads], ":", color=line.get_color(),
                    label=f"{executor}, linear from 1 thread")
    ax.set_xlabel("threads")
    ax.set_ylabel("runs per second")
    if config:
        ax.set_title(f"synthetic conv: {config.get('layers')} layers, {config.get('channels')} ch, "
                     f"{config.get('size')}x{config.get('size')}", fontsize=10)
        fig.text(0.01, 0.01, str(config.get("machine", "")), fontsize=7)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(output, dpi=120)
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
