#!/usr/bin/env python3
"""The compile report names the sparse kernels for pruned weights, and only for them.

Compiles tests/conformance's net_sparse_mlp (weights pruned to 90%, unstructured and in
32x32 blocks) with `tessera compile` and checks that every Gemm/MatMul row of the report
names cpu.gemm_sparse / cpu.matmul_sparse; then the same model with its weights dense
must name the dense cpu.gemm / cpu.matmul. (Numerical agreement with ONNX Runtime is the
conformance test's job: the model is one of its cases.)

    check_sparse_report.py --tessera build/bin/tessera --work-dir DIR
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "conformance"))
import gen_models  # noqa: E402


def kernels_in_report(tessera: str, model: onnx.ModelProto, path: str) -> dict[str, str]:
  """{op type: set of kernels} from the report's op rows."""
  onnx.save(model, path)
  proc = subprocess.run([tessera, "compile", path, "-o", path + ".tess"], capture_output=True,
                        text=True, timeout=120)
  if proc.returncode != 0:
    raise SystemExit(f"compile failed: {proc.stderr}")
  found: dict[str, set[str]] = {}
  for line in proc.stdout.splitlines():
    fields = line.split()
    if len(fields) >= 3 and fields[1] in ("Gemm", "MatMul"):
      found.setdefault(fields[1], set()).add(fields[2])
  print(proc.stdout)
  return found


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__)
  ap.add_argument("--tessera", required=True)
  ap.add_argument("--work-dir", required=True)
  args = ap.parse_args()
  os.makedirs(args.work_dir, exist_ok=True)
  failures = []

  model, _ = gen_models.net_sparse_mlp(np.random.default_rng(7), 2)
  found = kernels_in_report(args.tessera, model, os.path.join(args.work_dir, "sparse_mlp.onnx"))
  if found.get("Gemm") != {"cpu.gemm_sparse"}:
    failures.append(f"pruned Gemms ran on {found.get('Gemm')}, expected cpu.gemm_sparse")
  if found.get("MatMul") != {"cpu.matmul_sparse"}:
    failures.append(f"pruned MatMul ran on {found.get('MatMul')}, expected cpu.matmul_sparse")

  # The same graph with every weight made dense (zeros replaced by small values).
  rng = np.random.default_rng(8)
  for init in model.graph.initializer:
    w = numpy_helper.to_array(init)
    if w.ndim == 2:
      dense = np.where(w == 0, rng.uniform(0.01, 0.02, w.shape), w).astype(np.float32)
      init.CopyFrom(numpy_helper.from_array(dense, init.name))
  found = kernels_in_report(args.tessera, model, os.path.join(args.work_dir, "dense_mlp.onnx"))
  if found.get("Gemm") != {"cpu.gemm"} or found.get("MatMul") != {"cpu.matmul"}:
    failures.append(f"dense weights ran on {found}, expected cpu.gemm and cpu.matmul")

  for f in failures:
    print(f"FAIL {f}")
  print("ok" if not failures else f"{len(failures)} failures")
  return 1 if failures else 0


if __name__ == "__main__":
  sys.exit(main())
