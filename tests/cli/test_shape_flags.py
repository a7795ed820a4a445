#!/usr/bin/env python3
"""`tessera compile --batch N --shape NAME=DIMS`: symbolic and unknown input dims fixed on the
command line, checked end to end against ONNX Runtime.

A model with a symbolic batch `N`, a symbolic `seq` and an input whose dim 0 is unknown:
  * without values, compile fails with one `error:` line naming the input and the dim;
  * `--batch 3 --shape seq=5` compiles; `inspect --json` shows the input shapes, and the run
    matches ONNX Runtime on the same inputs;
  * `--shape x=2,4,6 --shape z=2,1,6` (whole shapes by input name) does too;
  * a conflicting shape, an unknown name and a malformed value are refused in one clean line;
    `--batch 0` by the argument parser.

    test_shape_flags.py --tessera PATH --work-dir DIR
"""
import json
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

sys.dont_write_bytecode = True
import cli_common  # noqa: E402
from cli_common import clean_error, cli_args, finish  # noqa: E402


def run(argv):
  return cli_common.run(argv, check=False)


def main() -> int:
  args = cli_args()
  rng = np.random.default_rng(7)
  w = rng.standard_normal((6, 6)).astype(np.float32)
  graph = helper.make_graph(
      [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "z"], ["s"]),
       helper.make_node("Relu", ["s"], ["y"])],
      "symbolic", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "seq", 6]),
                   helper.make_tensor_value_info("z", TensorProto.FLOAT, [None, 1, 6])],
      [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "seq", 6])],
      [onnx.numpy_helper.from_array(w, "w")])
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
  onnx_path = os.path.join(args.work_dir, "symbolic.onnx")
  onnx.save(model, onnx_path)
  tess_path = os.path.join(args.work_dir, "symbolic.tess")
  failures = []

  proc = run([args.tessera, "compile", onnx_path, "-o", tess_path, "-q"])
  line = clean_error(proc)
  if not line or "input 'x' has symbolic dimension 'N' at axis 0" not in line:
    failures.append(f"no values: expected a clean error naming x and N, got {proc.stderr!r}")

  for flags, x_shape, z_shape in [
      (["--batch", "3", "--shape", "seq=5"], [3, 5, 6], [3, 1, 6]),
      (["--shape", "x=2,4,6", "--shape", "z=2,1,6"], [2, 4, 6], [2, 1, 6])]:
    proc = run([args.tessera, "compile", onnx_path, "-o", tess_path, "-q"] + flags)
    if proc.returncode != 0:
      failures.append(f"{flags}: compile failed: {proc.stderr.strip()}")
      continue
    info = json.loads(run([args.tessera, "inspect", tess_path, "--json"]).stdout)
    shapes = {t["name"]: t["shape"] for t in info["inputs"]}
    if shapes != {"x": x_shape, "z": z_shape}:
      failures.append(f"{flags}: inspect shows inputs {shapes}")
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32),
             "z": rng.standard_normal(z_shape).astype(np.float32)}
    argv = [args.tessera, "run", tess_path, "--iterations", "1", "--warmup", "0",
            "--output-dir", args.work_dir]
    for name, value in feeds.items():
      path = os.path.join(args.work_dir, f"{name}.in.npy")
      np.save(path, value)
      argv += ["--input", f"{name}={path}"]
    proc = run(argv)
    if proc.returncode != 0:
      failures.append(f"{flags}: run failed: {proc.stderr.strip()}")
      continue
    expected = ort.InferenceSession(model.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    actual = np.load(os.path.join(args.work_dir, "y.npy"))
    if actual.shape != expected.shape or not np.allclose(actual, expected, rtol=1e-4, atol=1e-4):
      failures.append(f"{flags}: output differs from ONNX Runtime")

  for flags, needle in [
      (["--shape", "x=2,4,7", "--shape", "z=2,1,6"], "disagrees with the model"),
      (["--batch", "1", "--shape", "sequence=5"], "no input or symbolic dim named 'sequence'"),
      (["--shape", "seq=five"], "expected NAME=DIMS"),
      (["--shape", "seq=0"], "dims must be positive"),
      (["--shape", "seq=5"], "input 'x' has symbolic dimension 'N' at axis 0")]:
    proc = run([args.tessera, "compile", onnx_path, "-o", tess_path, "-q"] + flags)
    line = clean_error(proc)
    if not line or needle not in line:
      failures.append(f"{flags}: expected one clean error line with {needle!r}, got "
                      f"{proc.stderr!r}")

  # Range checks are the command-line parser's (its own message format, as for --tiles 0).
  proc = run([args.tessera, "compile", onnx_path, "-o", tess_path, "-q", "--batch", "0"])
  if proc.returncode == 0 or "--batch" not in proc.stderr:
    failures.append(f"--batch 0: expected a refusal naming --batch, got {proc.stderr!r}")

  return finish(failures, f"{len(failures)} failure(s)")


if __name__ == "__main__":
  sys.exit(main())
