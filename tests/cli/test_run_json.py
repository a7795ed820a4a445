#!/usr/bin/env python3
"""`tessera run --json` stays one JSON object when an output holds NaN or infinities (JSON has
neither): their summary statistics are null, finite ones numbers.

    test_run_json.py --tessera PATH --work-dir DIR
"""
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

sys.dont_write_bytecode = True
from cli_common import cli_args, finish, run  # noqa: E402


def main() -> int:
  args = cli_args()
  # y = Log(x): NaN below 0, -inf at 0; z = Relu(x) stays finite.
  graph = helper.make_graph(
      [helper.make_node("Log", ["x"], ["y"]), helper.make_node("Relu", ["x"], ["z"])], "log",
      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4]),
       helper.make_tensor_value_info("z", TensorProto.FLOAT, [4])])
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
  onnx_path = os.path.join(args.work_dir, "log.onnx")
  onnx.save(model, onnx_path)
  x_path = os.path.join(args.work_dir, "x.npy")
  np.save(x_path, np.array([-1.0, 0.0, 1.0, 2.0], np.float32))
  tess = os.path.join(args.work_dir, "log.tess")
  run([args.tessera, "compile", onnx_path, "-o", tess, "-q"])
  out = run([args.tessera, "run", tess, "--input", f"x={x_path}", "--iterations", "1",
             "--json"]).stdout
  failures = []
  try:
    outputs = {o["name"]: o for o in json.loads(out)["outputs"]}
  except (json.JSONDecodeError, KeyError) as e:
    return finish([f"--json output is not one JSON object with outputs ({e}): {out!r}"])
  if [outputs["y"][k] for k in ("min", "max", "mean")] != [None, None, None]:
    failures.append(f"NaN/inf statistics should be null: {outputs['y']}")
  if [outputs["z"][k] for k in ("min", "max", "mean")] != [0, 2, 0.75]:
    failures.append(f"finite statistics changed: {outputs['z']}")
  return finish(failures)


if __name__ == "__main__":
  sys.exit(main())
