"""What the command-line tests share: running a command, their arguments, the demo model, one
clean `error:` line, and the final report."""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run(argv, check=True, timeout=300):
  return subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=check,
                        timeout=timeout, stdin=subprocess.DEVNULL)


def cli_args():
  """--tessera PATH --work-dir DIR (created)."""
  ap = argparse.ArgumentParser()
  ap.add_argument("--tessera", required=True)
  ap.add_argument("--work-dir", required=True)
  args = ap.parse_args()
  os.makedirs(args.work_dir, exist_ok=True)
  return args


def demo_model(work_dir):
  """The demo CNN (scripts/make_demo_model.py) and an input for it: (onnx path, npy path)."""
  onnx_path = os.path.join(work_dir, "demo.onnx")
  input_path = os.path.join(work_dir, "demo_in.npy")
  run([sys.executable, os.path.join(HERE, "..", "..", "scripts", "make_demo_model.py"),
       "--output", onnx_path, "--input-npy", input_path])
  return onnx_path, input_path


def clean_error(proc):
  """The error line, or None when the failure was not one clean `error:` line."""
  lines = [l for l in proc.stderr.splitlines() if l.strip()]
  if proc.returncode == 0 or len(lines) != 1 or not lines[0].startswith("error:"):
    return None
  return lines[0]


def finish(failures, summary=None) -> int:
  """Prints each failure and a summary line; the exit status."""
  for f in failures:
    print("FAIL", f)
  print(summary or ("passed" if not failures else f"{len(failures)} failed"))
  return 1 if failures else 0
