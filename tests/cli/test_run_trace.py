#!/usr/bin/env python3
"""`tessera run --trace FILE`: the last timed run's tile kernels as a Chrome trace.

Checks, on both executors: the file is JSON with one complete ("X") event per tile node of the
model (`inspect --json` counts them), each node once, named after an operator of the model, on a
CPU the machine has, with times inside the run; the run prints a busy-per-CPU summary line. A
path that cannot be written gives one clean "error:" line.

    test_run_trace.py --tessera PATH --work-dir DIR
"""
import argparse
import json
import os
import subprocess
import sys

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))


def run(argv, check=True):
  return subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=check,
                        timeout=300)


def main() -> int:
  ap = argparse.ArgumentParser()
  ap.add_argument("--tessera", required=True)
  ap.add_argument("--work-dir", required=True)
  args = ap.parse_args()
  os.makedirs(args.work_dir, exist_ok=True)
  onnx_path = os.path.join(args.work_dir, "demo.onnx")
  run([sys.executable, os.path.join(HERE, "..", "..", "scripts", "make_demo_model.py"),
       "--output", onnx_path, "--input-npy", os.path.join(args.work_dir, "demo_in.npy")])
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
  lines = bad.stderr.strip().splitlines()
  if bad.returncode == 0 or len(lines) != 1 or not lines[0].startswith("error:"):
    failures.append(f"unwritable trace path: exit {bad.returncode}, stderr {bad.stderr!r}")
  for f in failures:
    print("FAIL", f)
  print(f"{'passed' if not failures else f'{len(failures)} failed'}")
  return 1 if failures else 0


if __name__ == "__main__":
  sys.exit(main())
