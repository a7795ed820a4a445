#!/usr/bin/env python3
"""`tessera compile --tune`: it measures every candidate tile count, keeps the fastest, saves a
model compiled with it, and that model computes what the untuned one does.

Checks: the report lists one timing per candidate (the compiler's rule and threads x
{1,2,3,4,6,8}) and marks exactly the fastest one as chosen; `inspect --json` of the saved file
shows that tile count; its outputs equal (within 1e-4 relative) those of the same model
compiled without --tune; `--tune --tiles N` is refused with one clean error line; a model
whose input is int64 token ids (embedding Gather, as BERT and GPT-2) tunes too, its timing runs
fed index inputs, not float ones.

    test_tune.py --tessera PATH --work-dir DIR
"""
import json
import os
import re
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.dont_write_bytecode = True
from cli_common import clean_error, cli_args, demo_model, finish, run  # noqa: E402


def token_model(path):
  """input_ids [1, 16] int64 -> Gather(embeddings [50, 32]) -> MatMul [32, 24] -> Relu."""
  rng = np.random.default_rng(3)
  inits = [numpy_helper.from_array(rng.standard_normal((50, 32)).astype(np.float32), "emb"),
           numpy_helper.from_array(rng.standard_normal((32, 24)).astype(np.float32), "w")]
  nodes = [helper.make_node("Gather", ["emb", "input_ids"], ["x"], name="embed", axis=0),
           helper.make_node("MatMul", ["x", "w"], ["y"], name="proj"),
           helper.make_node("Relu", ["y"], ["out"], name="relu")]
  graph = helper.make_graph(
      nodes, "tokens", [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, 16])],
      [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 16, 24])], inits)
  onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def main() -> int:
  args = cli_args()
  onnx_path, input_path = demo_model(args.work_dir)
  failures = []
  threads = 2
  tuned = os.path.join(args.work_dir, "tuned.tess")
  report = run([args.tessera, "compile", onnx_path, "-o", tuned, "--tune", "--tune-iterations",
                "3", "--threads", threads]).stdout
  rows = re.findall(r"^\s+tiles (\S+)\s+([0-9.]+)(  <- chosen)?$", report, re.MULTILINE)
  expected = ["rule"] + [str(threads * f) for f in (1, 2, 3, 4, 6, 8)]
  if [r[0] for r in rows] != expected:
    failures.append(f"candidates {[r[0] for r in rows]}, expected {expected}")
  chosen = [r for r in rows if r[2]]
  if len(chosen) != 1:
    failures.append(f"{len(chosen)} candidates marked chosen, expected 1")
  elif rows and float(chosen[0][1]) != min(float(r[1]) for r in rows):
    failures.append(f"chosen {chosen[0]} is not the fastest of {rows}")
  if len(chosen) == 1:
    info = json.loads(run([args.tessera, "inspect", tuned, "--json"]).stdout)
    want = 0 if chosen[0][0] == "rule" else int(chosen[0][0])
    if info["tiles_option"] != want:
      failures.append(f"saved tiles_option {info['tiles_option']}, chosen {want}")

  plain = os.path.join(args.work_dir, "plain.tess")
  run([args.tessera, "compile", onnx_path, "-o", plain, "-q"])
  outputs = {}
  for name, path in (("plain", plain), ("tuned", tuned)):
    out_dir = os.path.join(args.work_dir, "out_" + name)
    os.makedirs(out_dir, exist_ok=True)
    info = json.loads(run([args.tessera, "inspect", path, "--json"]).stdout)
    run([args.tessera, "run", path, "--input", f"{info['inputs'][0]['name']}={input_path}",
         "--output-dir", out_dir, "--iterations", "1", "--warmup", "0"])
    outputs[name] = {f: np.load(os.path.join(out_dir, f)) for f in sorted(os.listdir(out_dir))}
  if outputs["plain"].keys() != outputs["tuned"].keys() or not outputs["plain"]:
    failures.append(f"outputs differ in names: {outputs['plain'].keys()} {outputs['tuned'].keys()}")
  for f, ref in outputs["plain"].items():
    got = outputs["tuned"].get(f)
    if got is None or got.shape != ref.shape or \
        np.max(np.abs(got - ref)) > 1e-4 * (1 + np.max(np.abs(ref))):
      failures.append(f"output {f} differs between tuned and untuned models")

  tokens = os.path.join(args.work_dir, "tokens.onnx")
  token_model(tokens)
  token_tune = run([args.tessera, "compile", tokens, "-o", os.path.join(args.work_dir,
                    "tokens.tess"), "--tune", "--tune-iterations", "1", "--threads", threads],
                   check=False)
  if token_tune.returncode != 0 or "<- chosen" not in token_tune.stdout:
    failures.append(f"--tune on int64 token ids: exit {token_tune.returncode}, "
                    f"stderr {token_tune.stderr!r}")

  both = run([args.tessera, "compile", onnx_path, "-o", plain, "--tune", "--tiles", "3"],
             check=False)
  if clean_error(both) is None:
    failures.append(f"--tune --tiles: exit {both.returncode}, stderr {both.stderr!r}")
  return finish(failures)


if __name__ == "__main__":
  sys.exit(main())
