#!/usr/bin/env python3
"""A pruned CNN end to end: `tessera compile --sparsity auto` picks cpu.conv_sparse for its
pruned convs (and the dense kernels for its dense one, the report saying why not sparse), and
the compiled model's output matches ONNX Runtime's.

The model: Conv 3x3 pad 1 (85% pruned, an empty output channel) -> Relu -> Conv 1x1 stride 2
(90% pruned) -> Relu = r2 -> Conv 1x1 (90% pruned) -> Relu -> Conv 3x3 pad 1 (90% pruned) + r2
(a residual Add) -> Relu -> Conv 3x3 dense. The residual conv writes its output over r2, whose
other reader runs before it (the report says so): the output then checks that in-place sum.

    check_conv_sparse_e2e.py --tessera build/bin/tessera --work-dir DIR
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


def prune(w: np.ndarray, ratio: float) -> np.ndarray:
  cut = np.sort(np.abs(w).ravel())[int(ratio * w.size) - 1]
  return np.where(np.abs(w) > cut, w, 0.0).astype(np.float32)


def make_model(rng: np.random.Generator) -> onnx.ModelProto:
  def weight(shape):
    return (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)

  w1 = prune(weight([32, 17, 3, 3]), 0.85)
  w1[5] = 0.0  # an output channel with no nonzero
  inits = {
      "w1": w1, "b1": rng.standard_normal(32).astype(np.float32),
      "w2": prune(weight([24, 32, 1, 1]), 0.9), "b2": rng.standard_normal(24).astype(np.float32),
      "w2b": prune(weight([24, 24, 1, 1]), 0.9), "b2b": rng.standard_normal(24).astype(np.float32),
      "w3": prune(weight([24, 24, 3, 3]), 0.9), "b3": rng.standard_normal(24).astype(np.float32),
      "w4": weight([8, 24, 3, 3]), "b4": rng.standard_normal(8).astype(np.float32),
  }
  nodes = [
      helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", kernel_shape=[3, 3],
                       pads=[1, 1, 1, 1]),
      helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
      helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", kernel_shape=[1, 1],
                       strides=[2, 2]),
      helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
      helper.make_node("Conv", ["r2", "w2b", "b2b"], ["c2b"], name="conv2b", kernel_shape=[1, 1]),
      helper.make_node("Relu", ["c2b"], ["r2b"], name="relu2b"),
      helper.make_node("Conv", ["r2b", "w3", "b3"], ["c3"], name="conv3", kernel_shape=[3, 3],
                       pads=[1, 1, 1, 1]),
      helper.make_node("Add", ["c3", "r2"], ["s3"], name="residual"),
      helper.make_node("Relu", ["s3"], ["r3"], name="relu3"),
      helper.make_node("Conv", ["r3", "w4", "b4"], ["y"], name="conv4_dense", kernel_shape=[3, 3],
                       pads=[1, 1, 1, 1]),
  ]
  graph = helper.make_graph(
      nodes, "sparse_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 17, 23, 19])],
      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 12, 10])],
      [numpy_helper.from_array(v, k) for k, v in inits.items()])
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
  model.ir_version = 8
  onnx.checker.check_model(model)
  return model


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__)
  ap.add_argument("--tessera", required=True)
  ap.add_argument("--work-dir", required=True)
  args = ap.parse_args()
  os.makedirs(args.work_dir, exist_ok=True)
  rng = np.random.default_rng(11)
  model = make_model(rng)
  path = os.path.join(args.work_dir, "sparse_cnn.onnx")
  onnx.save(model, path)
  failures = []

  proc = subprocess.run([args.tessera, "compile", path, "-o", path + ".tess", "--sparsity", "auto"],
                        capture_output=True, text=True, timeout=120)
  print(proc.stdout)
  if proc.returncode != 0:
    print(proc.stderr)
    return 1
  kernels = {}
  for line in proc.stdout.splitlines():
    fields = line.split()
    if len(fields) >= 3 and fields[1] == "Conv":
      kernels[fields[0]] = fields[2]
  for name in ("conv1", "conv2", "conv2b", "conv3"):
    if kernels.get(name) != "cpu.conv_sparse":
      failures.append(f"{name} ran on {kernels.get(name)}, expected cpu.conv_sparse")
  if kernels.get("conv4_dense") in (None, "cpu.conv_sparse", "reference"):
    failures.append(f"the dense conv ran on {kernels.get('conv4_dense')}")
  if not any(line.split()[:1] == ["conv3"] and "written over its residual input" in line
             for line in proc.stdout.splitlines()):
    failures.append("conv3 is not written over its residual r2")
  if "cpu.conv_sparse: weight density 100.0%" not in proc.stdout:
    failures.append("the report does not say why the dense conv is not sparse")

  x = rng.standard_normal([1, 17, 23, 19]).astype(np.float32)
  x_path = os.path.join(args.work_dir, "x.npy")
  np.save(x_path, x)
  out_dir = os.path.join(args.work_dir, "out")
  run = subprocess.run([args.tessera, "run", path + ".tess", "--input", f"x={x_path}",
                        "--output-dir", out_dir, "--iterations", "1", "--warmup", "0"],
                       capture_output=True, text=True, timeout=120)
  if run.returncode != 0:
    print(run.stderr)
    return 1
  got = np.load(os.path.join(out_dir, "y.npy"))
  want = ort.InferenceSession(model.SerializeToString(),
                              providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
  if got.shape != want.shape or not np.allclose(got, want, rtol=1e-4, atol=1e-4):
    failures.append(f"output differs from ONNX Runtime: max |diff| "
                    f"{np.max(np.abs(got - want)) if got.shape == want.shape else got.shape}")

  for f in failures:
    print(f"FAIL {f}")
  print("ok" if not failures else f"{len(failures)} failures")
  return 1 if failures else 0


if __name__ == "__main__":
  sys.exit(main())
