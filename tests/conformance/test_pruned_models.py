#!/usr/bin/env python3
"""Pruned models (issue 6, "What must hold"), reduced in size for CI: compiled with
`tessera compile --sparsity auto`, run, and compared with ONNX Runtime on the same pruned .onnx.

Models (built with onnx.helper from a fixed seed; pruned by bench/e2e/prune_models.py):
  resnet_u80, resnet_u90  bottleneck CNN (64x64 input, widths 32-64, BatchNorm, residual Adds,
                          a Gemm head), 80% / 90% unstructured per layer;
  mobilenet_u70           MobileNetV2-style inverted residuals (Relu6, depthwise convs),
                          70% unstructured on the full and pointwise convs and the Gemm head
                          (depthwise convs are not pruned);
  bert_b95                2-layer BERT encoder (hidden 128, 2 heads, FFN 512, seq 32),
                          weight MatMuls pruned in 32x32 blocks at 95%.
Checks, per model:
  * every output at 1 and 2 threads: max |tessera - ORT| <= 1e-4 * (1 + max |ORT|)
    (run_conformance.py's tolerance; ORT with graph optimisations off);
  * bert_b95 compiled with --no-sparse-kernels (the Tessera-dense baseline of
    compare_sparse.py) runs no sparse kernel, says so, and matches ORT too;
  * the kernels in the compile report: every pruned weight MatMul of bert_b95 runs
    cpu.matmul_sparse (a silently dense BERT fails); every pruned Gemm/MatMul elsewhere runs
    cpu.gemm_sparse / cpu.matmul_sparse or the report says why not; once a cpu.conv_sparse is
    registered (kernels/registry.cpp), every pruned conv runs it or the report says why not.
    The kernel chosen for each pruned weight is printed, per model, either way.
Prints `N passed, M failed`; exits 1 if M > 0.

    test_pruned_models.py --tessera build/bin/tessera --work-dir DIR [--only SUB]
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import time

import numpy as np
import onnx
from onnx import numpy_helper

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "bench", "e2e"))
import gen_models as gm  # noqa: E402
import gen_transformer_models as gt  # noqa: E402
import prune_models  # noqa: E402
from compare_sparse import parse_report  # noqa: E402  (the report parser the bench uses)
from run_conformance import max_abs_error, run_process, tolerance  # noqa: E402

SEED = 20261121
THREADS = (1, 2)
SPARSE_MATMUL = {"MatMul": "cpu.matmul_sparse", "Gemm": "cpu.gemm_sparse",
                 "Conv": "cpu.conv_sparse"}


# ---------------------------------------------------------------- models


def bottleneck(b, x, cin, mid, cout, stride):
  """ResNet-50's block: 1x1 reduce, 3x3 (stride), 1x1 expand, projection shortcut, Add, Relu."""
  y = b.node("Relu", [gm.conv_bn(b, x, cin, mid, 1)])
  y = b.node("Relu", [gm.conv_bn(b, y, mid, mid, 3, stride=stride)])
  y = gm.conv_bn(b, y, mid, cout, 1)
  shortcut = gm.conv_bn(b, x, cin, cout, 1, stride=stride) if (stride != 1 or cin != cout) else x
  return b.node("Relu", [b.node("Add", [y, shortcut])])


def head(b, x, channels, classes, name):
  flat = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
  w = b.weight([classes, channels], fan_in=channels)  # [N, K]: transB as torchvision's fc
  bias = b.const((0.1 * b.rng.standard_normal(classes)).astype(np.float32), "fc_bias")
  return b.node("Gemm", [flat, w, bias], transB=1, out_names=[name])


def small_resnet(rng):
  b = gm.GraphBuilder(rng)
  x = b.input([1, 3, 64, 64], name="image")
  x = b.node("Relu", [gm.conv_bn(b, x, 3, 32, 3, stride=2)])  # 32x32
  x = bottleneck(b, x, 32, 32, 64, 1)  # 3x3 32->32 on 32x32: Winograd-sized
  x = bottleneck(b, x, 64, 32, 64, 1)  # identity shortcut
  x = bottleneck(b, x, 64, 48, 64, 2)  # 16x16
  return b.model([head(b, x, 64, 10, "logits")], 17, "small_resnet"), b.input_values


def inverted_residual(b, x, cin, expand, cout, stride):
  hidden = cin * expand
  y = gm.relu6(b, gm.conv_bn(b, x, cin, hidden, 1))
  y = gm.relu6(b, gm.conv_bn(b, y, hidden, hidden, 3, stride=stride, group=hidden))
  y = gm.conv_bn(b, y, hidden, cout, 1)
  return b.node("Add", [x, y]) if stride == 1 and cin == cout else y


def small_mobilenet(rng):
  b = gm.GraphBuilder(rng)
  x = b.input([1, 3, 64, 64], name="image")
  x = gm.relu6(b, gm.conv_bn(b, x, 3, 32, 3, stride=2))  # 32x32
  x = inverted_residual(b, x, 32, 2, 32, 1)
  x = inverted_residual(b, x, 32, 3, 48, 2)  # 16x16
  x = inverted_residual(b, x, 48, 2, 48, 1)
  x = gm.relu6(b, gm.conv_bn(b, x, 48, 128, 1))
  return b.model([head(b, x, 128, 10, "logits")], 13, "small_mobilenet"), b.input_values


def small_bert(rng):
  case = gt.bert_encoder(rng, 17, batch=1, seq=32, hidden=128, heads=2, layers=2, vocab=64)
  return case.model, case.inputs


# name: (builder, prune_model arguments)
CASES = {
    "resnet_u80": (small_resnet, dict(mode="unstructured", ratio=0.8)),
    "resnet_u90": (small_resnet, dict(mode="unstructured", ratio=0.9)),
    "mobilenet_u70": (small_mobilenet, dict(mode="unstructured", ratio=0.7)),
    "bert_b95": (small_bert, dict(mode="block", ratio=0.95, block=32)),
}


# ---------------------------------------------------------------- the report

def check_pruning(name, weight, before, after, to_kn, prune_args):
  """prune_model kept the originals it kept, and pruned the right ones: the smallest |w|
  (unstructured), or whole BxB blocks of the [K, N] view (block)."""
  kept = after != 0
  if not np.array_equal(after[kept], before[kept]):
    return [f"{name}: {weight.name}: kept weights changed value"]
  if prune_args["mode"] == "unstructured":
    dropped = np.abs(before[~kept])
    if dropped.size and kept.any() and dropped.max() > np.abs(before[kept]).min():
      return [f"{name}: {weight.name}: a pruned |w| {dropped.max()} exceeds a kept one"]
    return []
  block = prune_args["block"]
  zero = np.asarray(to_kn(~kept))
  for i in range(0, zero.shape[0], block):
    for j in range(0, zero.shape[1], block):
      tile = zero[i:i + block, j:j + block]
      if tile.any() and not tile.all():
        return [f"{name}: {weight.name}: block ({i}, {j}) is partly pruned"]
  return []


def conv_sparse_registered() -> bool:
  """Whether kernels/registry.cpp lists cpu.conv_sparse: the test turns strict when it lands."""
  with open(os.path.join(ROOT, "kernels", "registry.cpp")) as f:
    return '"cpu.conv_sparse"' in f.read()


def check_kernels(name, pruned, ops, consumers, conv_sparse, problems):
  """Kernel per pruned weight; failures appended to `problems`. Returns {kernel: count}."""
  counts = collections.Counter()
  for weight in pruned:
    # The op keeps its node's name through fusions (a BatchNorm folded into a Conv renames the
    # weight, not the op); the sparsity table's consumer column is the fallback.
    op_name = weight.node if weight.node in ops else consumers.get(weight.name)
    if op_name is None or op_name not in ops:
      # Every pruned weight must be accounted for: one the report cannot place could hide a
      # silently dense op.
      problems.append(f"{name}: pruned weight {weight.name!r} ({weight.op_type}) has no row in "
                      f"the report's sparsity table or op table (consumer {op_name!r})")
      continue
    op_type, kernel, note = ops[op_name]
    counts[kernel] += 1
    sparse = SPARSE_MATMUL.get(op_type)
    if name.startswith("bert") and op_type == "MatMul":
      if kernel != sparse:
        problems.append(f"{name}: {op_name} (weight {weight.name}, density "
                        f"{weight.density:.3f}) runs {kernel}, expected {sparse}; {note}")
    elif sparse and (op_type != "Conv" or conv_sparse) and kernel != sparse \
            and f"not {sparse}:" not in note:
      problems.append(f"{name}: {op_name} runs {kernel} and the report does not say why "
                      f"{sparse} did not apply (no silent fallbacks); note: {note!r}")
  return counts


# ---------------------------------------------------------------- one case


def run_case(tessera, work, name, builder, prune_args, conv_sparse):
  problems = []
  model, inputs = builder(np.random.default_rng([SEED, len(name)] + [ord(c) for c in name]))
  original = {t.name: numpy_helper.to_array(t).copy() for t in model.graph.initializer}
  uses = prune_models.prunable_weights(model)
  model, pruned = prune_models.prune_model(model, **prune_args)
  if not pruned:
    return [f"{name}: prune_model pruned nothing"], ""
  after = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
  for t_name, value in original.items():
    if t_name not in uses and not np.array_equal(after[t_name], value):
      problems.append(f"{name}: {t_name} is no Conv/Gemm/MatMul weight but was changed")
  for w in pruned:
    problems += check_pruning(name, w, original[w.name], after[w.name], uses[w.name].to_kn,
                              prune_args)
  expected_type = {"bert_b95": "MatMul"}.get(name, "Conv")
  if not any(p.op_type == expected_type for p in pruned):
    problems.append(f"{name}: no {expected_type} weight was pruned")
  densities = [p.density for p in pruned]
  target = 1.0 - prune_args["ratio"]
  if max(abs(d - target) for d in densities) > 0.02:
    problems.append(f"{name}: weight densities {densities} not all near {target}")
  case = gm.Case(name, model, inputs)
  reference = gm.finalize(case)
  case_dir = os.path.join(work, name)
  os.makedirs(case_dir, exist_ok=True)
  onnx_path = os.path.join(case_dir, "model.onnx")
  onnx.save(model, onnx_path)
  input_args = []
  for input_name, value in inputs.items():
    path = os.path.join(case_dir, f"input.{gm.safe_file_name(input_name)}.npy")
    np.save(path, value)
    input_args += ["--input", f"{input_name}={path}"]

  tess = os.path.join(case_dir, "model.tess")
  compile_cmd = [tessera, "compile", onnx_path, "-o", tess, "--sparsity", "auto"]
  proc = run_process(compile_cmd)
  if proc.returncode != 0:
    return problems + [f"{name}: compile failed: {proc.stderr.strip()[:500]}\n      repro: "
                       f"{' '.join(compile_cmd)}"], ""
  ops, consumers = parse_report(proc.stdout)
  counts = check_kernels(name, pruned, ops, consumers, conv_sparse, problems)
  by_type = collections.defaultdict(collections.Counter)
  for w in pruned:
    op = ops.get(w.node, ops.get(consumers.get(w.name, ""), ("?", "?", "")))
    by_type[w.op_type][op[1]] += 1
  summary = "; ".join(f"{t}: " + ", ".join(f"{k} x{n}" for k, n in sorted(c.items()))
                      for t, c in sorted(by_type.items()))
  if sum(counts.values()) != len(pruned):
    problems.append(f"{name}: {len(pruned)} pruned weights, {sum(counts.values())} in report")

  runs = [(tess, threads) for threads in THREADS]
  if name.startswith("bert"):
    # The dense A/B build compare_sparse.py times: --no-sparse-kernels must keep every weight
    # MatMul off the sparse kernel, say so in the report, and give the same outputs.
    dense_tess = os.path.join(case_dir, "model.dense.tess")
    proc = run_process(compile_cmd[:4] + [dense_tess, "--sparsity", "auto", "--no-sparse-kernels"])
    if proc.returncode != 0:
      problems.append(f"{name}: compile --no-sparse-kernels failed: {proc.stderr.strip()[:300]}")
    else:
      dense_ops, _ = parse_report(proc.stdout)
      for w in pruned:
        op_type, kernel, note = dense_ops.get(w.node, ("?", "?", ""))
        if kernel == SPARSE_MATMUL.get(op_type) or \
                f"not {SPARSE_MATMUL.get(op_type)}: disabled by a compile option" not in note:
          problems.append(f"{name} --no-sparse-kernels: {w.node} runs {kernel}; note {note!r}")
      runs.append((dense_tess, 2))
  for tess_path, threads in runs:
    tag = os.path.splitext(os.path.basename(tess_path))[0]
    out_dir = os.path.join(case_dir, f"out.{tag}.threads-{threads}")
    os.makedirs(out_dir, exist_ok=True)
    run_cmd = [tessera, "run", tess_path, *input_args, "--output-dir", out_dir, "--threads",
               str(threads), "--iterations", "1", "--warmup", "0"]
    proc = run_process(run_cmd)
    if proc.returncode != 0:
      problems.append(f"{name} {tag} threads={threads}: run failed: {proc.stderr.strip()[:500]}")
      continue
    for out_name, ref in reference.items():
      try:
        got = np.load(os.path.join(out_dir, gm.safe_file_name(out_name) + ".npy"))
      except (OSError, ValueError) as e:
        problems.append(f"{name} {tag} threads={threads}: output {out_name!r} missing: {e}")
        continue
      if got.shape != ref.shape:
        problems.append(f"{name} {tag} threads={threads} {out_name!r}: shape {got.shape} != "
                        f"{ref.shape}")
        continue
      err, tol = max_abs_error(got, ref), tolerance(ref)
      if not err <= tol:
        problems.append(f"{name} {tag} threads={threads} {out_name!r}: max abs error {err:.3g} > "
                        f"tolerance {tol:.3g}\n      repro: {' '.join(compile_cmd)} && "
                        f"{' '.join(run_cmd)}")
  return problems, summary


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  ap.add_argument("--tessera", required=True)
  ap.add_argument("--work-dir", required=True)
  ap.add_argument("--only", default="", help="only cases whose name contains this")
  args = ap.parse_args()
  os.makedirs(args.work_dir, exist_ok=True)
  tessera = os.path.abspath(args.tessera)
  conv_sparse = conv_sparse_registered()
  print(f"cpu.conv_sparse registered: {conv_sparse} "
        f"({'pruned convs must use it or say why not' if conv_sparse else 'convs run dense'})")
  started = time.monotonic()
  passed, failed = 0, 0
  for name, (builder, prune_args) in CASES.items():
    if args.only not in name:
      continue
    try:
      problems, summary = run_case(tessera, args.work_dir, name, builder, prune_args, conv_sparse)
    except Exception as e:  # a broken case is a failure, not a skip
      problems, summary = [f"{name}: {type(e).__name__}: {e}"], ""
    if problems:
      failed += 1
      print(f"FAIL {name}")
      for p in problems:
        print(f"    {p}")
    else:
      passed += 1
      print(f"ok   {name}  kernels of the pruned weights: {summary}")
  print(f"pruned models took {time.monotonic() - started:.1f} s")
  print(f"{passed} passed, {failed} failed")
  return 1 if failed or not passed else 0


if __name__ == "__main__":
  sys.exit(main())
