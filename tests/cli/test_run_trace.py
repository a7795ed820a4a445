#!/usr/bin/env python3
"""`tessera run --trace FILE`: the last timed run's tile kernels as a Chrome trace.

Checks, on both executors: the file is JSON with one complete ("X") event per tile node of the
model (`inspect --json` counts them), each node once, named after an operator of the model, on a
CPU the machine has, with times inside the run; the run prints a busy-per-CPU summary line. A
path that cannot be written gives one clean "error:" line.

    test_run_trace.py --tessera PATH --work-dir DIR
"""
import json
import os
import sys

sys.dont_write_bytecode = True
from cli_common import clean_error, cli_args, demo_model, finish, run  # noqa: E402


def main() -> int:
  args = cli_args()
  onnx_path, _ = demo_model(args.work_dir)
  tess = os.path.join(args.work_dir, "demo.tess")
  run([args.tessera, "compile", onnx_path, "-o", tess, "-q", "--threads", "2"])
  info = json.loads(run([args.tessera, "inspect", tess, "--json"]).stdout)
  op_names = {op["name"] for op in info["ops"]}
  failures = []
  for executor in ("dataflow", "barrier"):
    trace = os.path.join(args.work_dir, f"trace_{executor}.json")
    out = run([args.tessera, "run", tess, "--threads", "2", "--iterations", "2", "--warmup", "1",
               "--executor", executor, "--trace", trace]).stdout
    if f"trace: {info['nodes']} tiles over" not in out or "busy in tile kernels: cpu" not in out:
      failures.append(f"{executor}: no trace summary line in {out!r}")
    with open(trace) as f:
      events = json.load(f)["traceEvents"]
    nodes = sorted(e["args"]["node"] for e in events)
    if nodes != list(range(info["nodes"])):
      failures.append(f"{executor}: trace nodes {nodes[:10]}..., expected 0..{info['nodes'] - 1}")
    for e in events:
      if e["ph"] != "X" or e["name"] not in op_names or not 0 <= e["tid"] < os.cpu_count() \
          or e["ts"] < 0 or e["dur"] < 0:
        failures.append(f"{executor}: bad event {e}")
        break
  bad = run([args.tessera, "run", tess, "--iterations", "1", "--trace",
             os.path.join(args.work_dir, "no_such_dir", "t.json")], check=False)
  if clean_error(bad) is None:
    failures.append(f"unwritable trace path: exit {bad.returncode}, stderr {bad.stderr!r}")
  return finish(failures)


if __name__ == "__main__":
  sys.exit(main())
