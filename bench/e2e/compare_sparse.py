#!/usr/bin/env python3
"""Issue 6, bench item 3: pruned models end to end, in one run at each thread count:
ONNX Runtime (all graph optimisations on), Tessera-dense and Tessera-sparse, all three on the
same pruned .onnx.

Cases (pruned by prune_models.py from out/torch_models/*.onnx, exported first if missing;
random torchvision / Hugging Face weights, so pruning by magnitude is pruning noise: these
measure speed and agreement, not accuracy):
  resnet50_u80, resnet50_u90  every Conv and the fc Gemm, 80% / 90% unstructured per layer;
  mobilenetv2_u70             the full 3x3 stem conv, every pointwise (1x1) conv and the
                              classifier Gemm, 70% unstructured per layer; the depthwise convs
                              are not pruned;
  bert_b95                    BERT-base (12 layers, seq 128, batch 1): the 72 weight MatMuls
                              (Q, K, V, attention output, FFN in/out), 95% in 32x32 blocks;
                              embeddings and LayerNorms not pruned.
Tessera-sparse: `tessera compile --sparsity auto`; Tessera-dense: the same plus
`--no-sparse-kernels` (every pruned weight runs the dense kernels). Both are compiled for the
thread count they run at.

  .venv-bench/bin/python bench/e2e/compare_sparse.py [--cases resnet50_u90 bert_b95] \\
      [--threads 1 2] [--iterations 10] [--warmup 2] [--rounds 1] [--json FILE] \\
      [--models-dir out/torch_models] [--pruned-dir out/pruned]

With --int8, a fourth column set: Tessera-sparse with every pruned weight annotated 8-bit
(`--sparsity FILE.json`, "bits": 8: SparTA's bit rounding, cpu.*_int8[_blocks] kernels), its
speedup over ORT and its max |x - ort| / max |ort| (int8 is not bit-equal to float32; its
per-element bound is gemm_int8.hpp's int8_error_bound()).

Columns: median ms of each; sparse/ort (below 1: Tessera-sparse is faster), speedup over ORT
(ort/sparse; the issue's target is >= 3x), sparse/dense, and max |x - ort| / max |ort| of both
Tessera builds. Then, per case, the kernel each pruned weight's op got (counted, from the
compile report). Each peer runs in its own process (compare_peers.py's machinery).
"""
import argparse
import collections
import json
import os
import platform
import re
import subprocess
import sys

import numpy as np

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import compare_peers  # noqa: E402
import prune_models  # noqa: E402
import scratch  # noqa: E402

# name: (torch_models name, prune_model arguments)
CASES = {
    "resnet50_u80": ("resnet50", dict(mode="unstructured", ratio=0.8)),
    "resnet50_u90": ("resnet50", dict(mode="unstructured", ratio=0.9)),
    "mobilenetv2_u70": ("mobilenetv2", dict(mode="unstructured", ratio=0.7)),
    "bert_b95": ("bert", dict(mode="block", ratio=0.95, block=32)),
}
VARIANTS = {"dense": ["--sparsity", "auto", "--no-sparse-kernels"],
            "sparse": ["--sparsity", "auto"]}

OP_ROW = re.compile(r"^  (\S+)\s+(\S+)\s+(\S+)\s+(\d+)(?:  (.*))?$")
WEIGHT_ROW = re.compile(r"^  (\S+)\s+weight\s+(\S+)\s+\d+\s+[0-9.]+%\s+[0-9.]+%\s+\d+$")


def parse_report(text):
    """({op name: (type, kernel, note)}, {weight name: consumer op}) from `tessera compile`'s
    report: its op table and, with --sparsity, its TeSA table."""
    ops, consumers = {}, {}
    section = None
    for line in text.splitlines():
        if line.startswith("  op ") and "kernel" in line:
            section = "ops"
        elif line.startswith("  tensor ") and "before" in line:
            section = "sparsity"
        elif section == "ops":
            m = OP_ROW.match(line)
            if m and not line.startswith("  layout:"):
                ops[m.group(1)] = (m.group(2), m.group(3), m.group(5) or "")
            else:
                section = None
        elif section == "sparsity":
            m = WEIGHT_ROW.match(line)
            if m:
                consumers[m.group(1)] = m.group(2)
    return ops, consumers


def kernels_of_weights(report, weights):
    """{op type: Counter(kernel)} over the ops that read the pruned weights {name: node}."""
    ops, consumers = parse_report(report)
    counts = collections.defaultdict(collections.Counter)
    for name, node in weights.items():
        row = ops.get(node) or ops.get(consumers.get(name, ""))
        if row:
            counts[row[0]][row[1]] += 1
        else:
            counts["?"]["not in report"] += 1
    return counts


def format_kernels(counts):
    return "; ".join(f"{t}: " + ", ".join(f"{k} x{n}" for k, n in c.most_common())
                     for t, c in sorted(counts.items()))


def source_model(name, models_dir, seq):
    key = f"bert_l12_s{seq}_n1" if name == "bert" else f"{name}_n1"  # torch_models.model_key
    path = os.path.join(models_dir, key + ".onnx")
    if os.path.exists(path):
        return path
    import export_torch_models  # needs torch (.venv-bench); only when the export is missing

    path, _ = export_torch_models.export(name, 1, seq, 12, 18, "dynamo", models_dir)
    return path


def random_inputs(onnx_path, work, seed=0):
    """One .npy per graph input: N(0, 1) images, token ids in [0, 1000)."""
    import onnx

    model = onnx.load(onnx_path, load_external_data=False)
    rng = np.random.default_rng(seed)
    weights = {t.name for t in model.graph.initializer}
    inputs = {}
    for value in model.graph.input:
        if value.name in weights:
            continue
        t = value.type.tensor_type
        shape = [d.dim_value for d in t.shape.dim]
        if any(d <= 0 for d in shape):
            raise SystemExit(f"error: {onnx_path}: input {value.name} has a symbolic shape {shape}")
        if t.elem_type == onnx.TensorProto.INT64:
            array = rng.integers(0, 1000, shape).astype(np.int64)
        else:
            array = rng.standard_normal(shape).astype(np.float32)
        inputs[value.name] = os.path.join(work, f"{value.name}.npy")
        np.save(inputs[value.name], array)
    return inputs


def compile_variant(tessera, onnx_path, tess, threads, flags):
    """Compiles once; returns the report (the run reuses the .tess)."""
    cmd = [tessera, "compile", onnx_path, "-o", tess, "--threads", str(threads), *flags]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or ["compile failed"]
        raise RuntimeError(next((x for x in lines if x.startswith("error")), lines[0])[:200])
    return proc.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "bin", "tessera"))
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1,
                    help="time the three alternately this many times; each keeps its best median")
    ap.add_argument("--models-dir", default=os.path.join(ROOT, "out", "torch_models"))
    ap.add_argument("--pruned-dir", default=os.path.join(ROOT, "out", "pruned"))
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--int8", action="store_true",
                    help="also Tessera-sparse with the pruned weights annotated 8-bit")
    args = ap.parse_args()
    variants = dict(VARIANTS)
    tessera = os.path.abspath(args.tessera)
    if not os.access(tessera, os.X_OK):
        raise SystemExit(f"error: {tessera} is not an executable (build first)")
    import onnx
    import onnxruntime

    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus; "
          f"ONNX Runtime {onnxruntime.__version__} (ORT_ENABLE_ALL); batch 1, seq {args.seq}; "
          f"median of {args.iterations} after {args.warmup} warm-up, best of {args.rounds} "
          f"alternating round(s)")
    print(f"{'case':<16} {'thr':>3} {'ort ms':>9} {'dense ms':>9} {'sparse ms':>9} "
          f"{'sparse/ort':>10} {'x vs ort':>8} {'sp/dense':>8} {'diff dense':>10} "
          f"{'diff sparse':>11}" + (f" {'int8 ms':>9} {'x vs ort':>8} {'diff int8':>9}"
                                     if args.int8 else ""), flush=True)
    results, summaries = [], {}
    for case in args.cases:
        source_name, prune_args = CASES[case]
        src = source_model(source_name, args.models_dir, args.seq)
        pruned_path = os.path.join(args.pruned_dir, f"{case}.onnx")
        pruned_path, _ = prune_models.prune_file(src, pruned_path, quiet=True, **prune_args)
        weights = {name: use.node for name, use in prune_models.prunable_weights(
            onnx.load(pruned_path, load_external_data=False)).items()}
        work = scratch.work_dir(f"tessera_sparse_{case}_")
        spec = {"model": source_name, "onnx": pruned_path,
                "inputs": random_inputs(pruned_path, work), "iterations": args.iterations,
                "warmup": args.warmup}
        spec_path = os.path.join(work, "spec.json")
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        if args.int8:
            bits = os.path.join(work, "bits8.json")
            with open(bits, "w") as f:
                json.dump([{"tensor": name, "bits": 8} for name in weights], f)
            variants["int8"] = ["--sparsity", bits]
        for t in args.threads:
            row = {"case": case, "threads": t, "pruned_onnx": pruned_path, **prune_args}
            outs, runners = {}, {}
            for variant, flags in variants.items():
                vwork = os.path.join(work, variant)
                os.makedirs(vwork, exist_ok=True)
                try:
                    report = compile_variant(tessera, pruned_path,
                                             os.path.join(vwork, f"tessera_t{t}.tess"), t, flags)
                except RuntimeError as e:
                    row[variant + "_error"] = str(e)
                    print(f"  {case} t{t} {variant}: {e}", file=sys.stderr)
                    continue
                kernels = kernels_of_weights(report, weights)
                row[variant + "_kernels"] = {k: dict(c) for k, c in kernels.items()}
                if variant in ("sparse", "int8"):
                    summaries[case if variant == "sparse" else case + " int8"] = format_kernels(kernels)
                # compare_peers.run_tessera runs the .tess compiled above (it compiles only when
                # the file is missing).
                ns = argparse.Namespace(tessera=tessera, compile_args="",
                                        iterations=args.iterations, warmup=args.warmup)
                runners[variant] = (lambda ns=ns, vwork=vwork: compare_peers.run_tessera(
                    ns, spec, t, vwork))
            runners["ort"] = lambda: compare_peers.run_peer(spec_path, "ort", t, work)
            for _ in range(args.rounds):
                for peer in ("ort", *variants):
                    if peer not in runners or row.get(peer + "_error"):
                        continue
                    ms, out, err = runners[peer]()
                    if err:
                        row[peer + "_error"] = err
                        print(f"  {case} t{t} {peer}: {err}", file=sys.stderr)
                        continue
                    row[peer + "_ms"] = ms if row.get(peer + "_ms") is None else \
                        min(row[peer + "_ms"], ms)
                    outs[peer] = out
            for variant in variants:
                if outs.get(variant) is not None and outs.get("ort") is not None:
                    row[variant + "_rel_diff_vs_ort"] = compare_peers.relative_difference(
                        outs[variant], outs["ort"])
            ort_ms, dense_ms, sparse_ms = (row.get(k + "_ms") for k in ("ort", "dense", "sparse"))
            if ort_ms and sparse_ms:
                row["sparse_over_ort"] = sparse_ms / ort_ms
                row["speedup_over_ort"] = ort_ms / sparse_ms
            if dense_ms and sparse_ms:
                row["sparse_over_dense"] = sparse_ms / dense_ms
            results.append(row)

            def cell(value, fmt, width):
                return f"{value:>{width}{fmt}}" if value is not None else f"{'-':>{width}}"

            print(f"{case:<16} {t:>3} {cell(ort_ms, '.2f', 9)} {cell(dense_ms, '.2f', 9)} "
                  f"{cell(sparse_ms, '.2f', 9)} {cell(row.get('sparse_over_ort'), '.2f', 10)} "
                  f"{cell(row.get('speedup_over_ort'), '.2f', 8)} "
                  f"{cell(row.get('sparse_over_dense'), '.2f', 8)} "
                  f"{cell(row.get('dense_rel_diff_vs_ort'), '.1e', 10)} "
                  f"{cell(row.get('sparse_rel_diff_vs_ort'), '.1e', 11)}" +
                  (f" {cell(row.get('int8_ms'), '.2f', 9)} "
                   f"{cell(ort_ms / row['int8_ms'] if ort_ms and row.get('int8_ms') else None, '.2f', 8)} "
                   f"{cell(row.get('int8_rel_diff_vs_ort'), '.1e', 9)}" if args.int8 else ""),
                  flush=True)
    print("kernels of the pruned weights' ops in Tessera-sparse (from the compile report):")
    for case, summary in summaries.items():
        print(f"  {case:<16} {summary}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results, "kernels": summaries}, f, indent=1)


if __name__ == "__main__":
    main()
