#!/usr/bin/env python3
"""Sparsity before/after TeSA propagation per layer of MobileNetV2 (SparTA Fig. 14).

For each ratio (50/70/90%), prunes that share of the output channels of every pointwise
(1x1, group 1) conv by L1 norm — a pruned channel is removed whole: its weights, and its
BatchNormalization's bias and running mean, are 0, so the channel's output is exactly 0 —
compiles the model with `tessera compile --sparsity auto`, parses the report's TeSA table and
writes per-conv weight sparsity before/after propagation as a table (Markdown) and a PNG.
It also runs the compiled model and checks its outputs against ONNX Runtime on the same
pruned .onnx (propagation must not change them).

  .venv/bin/python bench/e2e/sparsity_propagation.py --tessera build/bin/tessera \
      --out-dir out/sparsity [--ratios 0.5 0.7 0.9]
"""
import argparse
import importlib.util
import os
import re
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROW = re.compile(r"^\s+(\S+)\s+(weight|activation)\s+(\S+)\s+(\d+)\s+([0-9.]+)%\s+([0-9.]+)%\s+\d+$",
                                  re.MULTILINE)


def load_builder():
    spec = importlib.util.spec_from_file_location("make_cnn_models",
                                                                                                os.path.join(HERE, "make_cnn_models.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def prune_channels(model, ratio):
    """Zeroes the `ratio` lowest-L1 output channels of each pointwise conv and its BN."""
    inits = {t.name: t for t in model.graph.initializer}
    consumers = {}
    for node in model.graph.node:
        for i in node.input:
            consumers.setdefault(i, []).append(node)
    pruned_convs = []
    for node in model.graph.node:
        if node.op_type != "Conv":
            continue
        attrs = {a.name: helper_value(a) for a in node.attribute}
        w = numpy_helper.to_array(inits[node.input[1]]).copy()
        if list(attrs.get("kernel_shape", [])) != [1, 1] or attrs.get("group", 1) != 1:
            continue
        count = int(round(ratio * w.shape[0]))
        drop = np.argsort(np.abs(w).reshape(w.shape[0], -1).sum(axis=1), kind="stable")[:count]
        w[drop] = 0.0
        inits[node.input[1]].CopyFrom(numpy_helper.from_array(w, node.input[1]))
        bns = [n for n in consumers.get(node.output[0], []) if n.op_type == "BatchNormalization"]
        for bn in bns:
            for idx in (2, 3):  # bias, running mean: BN(0) = 0 on a pruned channel
                v = numpy_helper.to_array(inits[bn.input[idx]]).copy()
                v[drop] = 0.0
                inits[bn.input[idx]].CopyFrom(numpy_helper.from_array(v, bn.input[idx]))
        pruned_convs.append(node.name)
    return pruned_convs


def helper_value(attr):
    return onnx.helper.get_attribute_value(attr)


def conv_rows(report):
    """Per conv/gemm op: (op, weight elements, before %, after %) of its largest weight."""
    best = {}
    order = []
    for tensor, kind, op, numel, before, after in ROW.findall(report):
        if kind != "weight":
            continue
        numel = int(numel)
        if op not in best:
            order.append(op)
        if op not in best or numel > best[op][0]:
            best[op] = (numel, float(before), float(after))
    # Graph order, as the report's op table lists the ops (weights come first in the tensor table).
    op_order = re.findall(r"^  (\S+)\s+(?:Conv|Gemm|MatMul)\s", report, re.MULTILINE)
    order.sort(key=lambda op: op_order.index(op) if op in op_order else len(op_order))
    return [(op,) + best[op] for op in order]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tessera", default=os.path.join(HERE, "..", "..", "build", "bin", "tessera"))
    ap.add_argument("--out-dir", default=os.path.join(HERE, "..", "..", "out", "sparsity"))
    ap.add_argument("--ratios", type=float, nargs="+", default=[0.5, 0.7, 0.9])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    builder = load_builder()
    results = {}
    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal([1, 3, 224, 224]).astype(np.float32)
    x_path = os.path.join(args.out_dir, "input.npy")
    np.save(x_path, x)
    for ratio in args.ratios:
        model = builder.mobilenetv2(np.random.default_rng(args.seed))
        prune_channels(model, ratio)
        tag = f"mobilenetv2_pruned{int(round(ratio * 100))}"
        onnx_path = os.path.join(args.out_dir, tag + ".onnx")
        tess_path = os.path.join(args.out_dir, tag + ".tess")
        onnx.save(model, onnx_path)
        report = subprocess.run([args.tessera, "compile", onnx_path, "-o", tess_path, "--sparsity", "auto"],
                                                        capture_output=True, text=True, check=True).stdout
        with open(os.path.join(args.out_dir, tag + "_report.txt"), "w") as f:
            f.write(report)
        rows = conv_rows(report)
        total = sum(r[1] for r in rows)
        before = sum(r[1] * r[2] for r in rows) / total
        after = sum(r[1] * r[3] for r in rows) / total
        out_dir = os.path.join(args.out_dir, tag + "_out")
        os.makedirs(out_dir, exist_ok=True)
        subprocess.run([args.tessera, "run", tess_path, "--input", f"input={x_path}", "--output-dir", out_dir,
                                        "--iterations", "1", "--warmup", "0"], capture_output=True, check=True)
        got = np.load(os.path.join(out_dir, "logits.npy"))
        import onnxruntime as ort
        want = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
        err = float(np.max(np.abs(got - want)) / (1e-6 + np.max(np.abs(want))))
        results[ratio] = (rows, before, after, err)
        print(f"{int(ratio * 100)}% channel pruning: weights {before:.1f}% -> {after:.1f}% pruned after "
                    f"propagation; max rel. difference vs ONNX Runtime {err:.2e}")

    lines = ["| layer | op | " + " | ".join(f"{int(r * 100)}% before | {int(r * 100)}% after" for r in args.ratios) + " |",
                      "|---|---|" + "---|---|" * len(args.ratios)]
    first = results[args.ratios[0]][0]
    for i, row in enumerate(first):
        cells = []
        for r in args.ratios:
            rr = results[r][0][i]
            cells.append(f"{rr[2]:.1f}% | {rr[3]:.1f}%")
        lines.append(f"| {i} | {row[0]} | " + " | ".join(cells) + " |")
    lines.append("| all | (weighted by elements) | " +
                              " | ".join(f"{results[r][1]:.1f}% | {results[r][2]:.1f}%" for r in args.ratios) + " |")
    table = "\n".join(lines)
    with open(os.path.join(args.out_dir, "sparsity_propagation.md"), "w") as f:
        f.write(table + "\n")
    print(table)

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(12, 4.5))
    for r, color in zip(args.ratios, ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple"]):
        rows = results[r][0]
        ax.plot(range(len(rows)), [row[2] for row in rows], "--", color=color, alpha=0.6,
                        label=f"{int(r * 100)}% before")
        ax.plot(range(len(rows)), [row[3] for row in rows], "-", color=color,
                        label=f"{int(r * 100)}% after propagation")
    ax.set_xlabel("layer (conv / gemm, in graph order)")
    ax.set_ylabel("weight sparsity (%)")
    ax.set_title("MobileNetV2, pointwise-conv channel pruning: TeSA propagation (cf. SparTA Fig. 14)")
    ax.set_ylim(0, 101)
    ax.legend(ncol=3, fontsize=8)
    fig.tight_layout()
    png = os.path.join(args.out_dir, "sparsity_propagation.png")
    fig.savefig(png, dpi=120)
    print("wrote", png)
    return 0 if all(res[3] < 1e-3 for res in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
