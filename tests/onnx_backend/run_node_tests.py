#!/usr/bin/env python3
"""The ONNX backend node test suite against Tessera.

The cases are the ones the `onnx` wheel itself defines (onnx.backend.test.case.node: each is
a model.onnx with inputs and expected outputs; the wheel's generators build them in memory, so
nothing is downloaded or stored). A case is *applicable* when Tessera's importer claims its
opset and every op in it: `tessera compile` answering "... (op 'X', opset N) is not supported
by Tessera" or "opset N is not supported (Tessera supports A to B)" means Tessera does not claim
it, and the case is counted as not applicable (listed with -v, counted per reason). So are cases
outside the default ONNX domain and cases whose inputs are not float32 (Tessera's activations are
float32; the importer says so in one clean line, which is what is matched here).
Every applicable case is compiled and run (`tessera run --input ... --output-dir ...`) and each
output compared with the expected one at the case's tolerance (ONNX's defaults: rtol 1e-3,
atol 1e-7, as onnx.backend.test.runner uses).

A case that fails is a bug unless it is listed in known_unsupported.txt with the reason (an
attribute or input form Tessera rejects on purpose, with a clean error), by name or by a regex
on its error line for a limitation many cases share. A listed case that passes, or a regex that
matches nothing, is reported too, so the list never goes stale.

Prints one line per failure, a per-op summary, and finally
  `N passed, M failed, K listed as unsupported, of A applicable cases (T cases in the suite)`
and exits 1 if M > 0 or a listed case no longer fails.

    run_node_tests.py --tessera build/bin/tessera --work-dir /tmp/node [--only SUBSTR] [-v]
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import onnx

sys.dont_write_bytecode = True  # no __pycache__ in the source tree

PROCESS_TIMEOUT_S = 120
UNSUPPORTED_OP = re.compile(r"\(op '([^']+)', opset \d+\) is not supported by Tessera")
UNSUPPORTED_OPSET = re.compile(r"opset (\d+) is not supported \(Tessera supports")
OTHER_DOMAIN = re.compile(r"the model imports no opset of the default ONNX domain")
# Tessera's activations are float32 (DESIGN.md); other element types are not claimed.
UNSUPPORTED_DTYPE = re.compile(
    r"has type (\w+); Tessera needs float32|reads the (int64) input '[^']*' as data")
HERE = os.path.dirname(os.path.abspath(__file__))


class KnownUnsupported:
  """Lines `test_name  reason` name one case; lines `/regex/  reason` name every case whose
  error line matches the regex (one limitation shared by many cases). # starts a comment."""

  def __init__(self, path: str):
    self.names: dict[str, str] = {}
    self.patterns: list[tuple[re.Pattern, str]] = []
    with open(path) as f:
      for line in f:
        line = line.split("#", 1)[0].strip()
        if not line:
          continue
        if line.startswith("/"):
          end = line.index("/", 1)
          self.patterns.append((re.compile(line[1:end]), line[end + 1:].strip()))
        else:
          name, _, reason = line.partition(" ")
          self.names[name] = reason.strip()
    self.used_patterns: set[str] = set()

  def reason(self, name: str, error: str) -> str | None:
    if name in self.names:
      return self.names[name]
    for pattern, reason in self.patterns:
      if pattern.search(error):
        self.used_patterns.add(pattern.pattern)
        return reason
    return None

  def unused_patterns(self) -> list[str]:
    return [p.pattern for p, _ in self.patterns if p.pattern not in self.used_patterns]


def collect_cases():
  # Imported here: the node case modules generate their data at import time.
  import warnings
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # the generators divide by zero on purpose, etc.
    from onnx.backend.test.case import node as node_cases
    return node_cases.collect_testcases()


def ops_of(model: onnx.ModelProto) -> list[str]:
  return sorted({n.op_type for n in model.graph.node})


def is_plain_tensor_model(model: onnx.ModelProto) -> bool:
  """Tessera's run command takes and returns tensors only (no sequences, maps, optionals)."""
  for value in list(model.graph.input) + list(model.graph.output):
    if not value.type.HasField("tensor_type"):
      return False
  return True


def run(argv: list[str]) -> subprocess.CompletedProcess:
  return subprocess.run(argv, capture_output=True, text=True, timeout=PROCESS_TIMEOUT_S)


def first_error_line(proc: subprocess.CompletedProcess) -> str:
  text = (proc.stderr or "") + (proc.stdout or "")
  for line in text.splitlines():
    if line.strip():
      return line.strip()
  return f"exit code {proc.returncode} and no message"


def compare(actual: np.ndarray, expected: np.ndarray, rtol: float, atol: float) -> str | None:
  if actual.shape != expected.shape:
    return f"shape {actual.shape}, expected {expected.shape}"
  if actual.dtype != expected.dtype:
    return f"dtype {actual.dtype}, expected {expected.dtype}"
  if expected.dtype.kind in "fc":
    a, e = actual.astype(np.float64), expected.astype(np.float64)
    bad = ~np.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)
    if bad.any():
      i = int(np.flatnonzero(bad)[0])
      return (f"{int(bad.sum())} of {bad.size} elements differ (first at flat index {i}: "
              f"{a.flat[i]!r} vs {e.flat[i]!r}, rtol {rtol}, atol {atol})")
    return None
  if not np.array_equal(actual, expected):
    return "values differ"
  return None


def run_case(case, tessera: str, work_dir: str) -> tuple[str, str]:
  """('pass' | 'fail' | 'not_applicable', detail)."""
  model = case.model
  if not is_plain_tensor_model(model):
    return "not_applicable", "non-tensor inputs or outputs"
  case_dir = os.path.join(work_dir, case.name)
  shutil.rmtree(case_dir, ignore_errors=True)
  os.makedirs(case_dir)
  onnx_path = os.path.join(case_dir, "model.onnx")
  tess_path = os.path.join(case_dir, "model.tess")
  with open(onnx_path, "wb") as f:
    f.write(model.SerializeToString())

  # Inputs declared with symbolic or unknown dims get the case's own shapes (`--shape`), as a
  # user compiling for one input size would; every data set of a case has the same shapes.
  shape_flags = []
  if case.data_sets:
    for value, data in zip(model.graph.input, case.data_sets[0][0]):
      dims = value.type.tensor_type.shape.dim
      static = value.type.tensor_type.HasField("shape") and all(
          d.HasField("dim_value") and d.dim_value > 0 for d in dims)
      shape = np.asarray(data).shape
      if not static and len(shape) > 0 and all(n > 0 for n in shape):
        shape_flags += ["--shape", f"{value.name}={','.join(map(str, shape))}"]
  proc = run([tessera, "compile", onnx_path, "-o", tess_path, "-q"] + shape_flags)
  if proc.returncode != 0:
    message = first_error_line(proc)
    unsupported = UNSUPPORTED_OP.search(message)
    if unsupported:
      return "not_applicable", f"op {unsupported.group(1)} not supported"
    opset = UNSUPPORTED_OPSET.search(message)
    if opset:
      return "not_applicable", f"opset {opset.group(1)} not supported"
    if OTHER_DOMAIN.search(message):
      return "not_applicable", "no default-domain opset (ai.onnx.ml / training domains)"
    dtype = UNSUPPORTED_DTYPE.search(message)
    if dtype:
      return "not_applicable", f"{dtype.group(1)} activations"
    return "fail", "compile: " + message

  rtol = getattr(case, "rtol", None) or 1e-3
  atol = getattr(case, "atol", None) or 1e-7
  for set_index, (inputs, outputs) in enumerate(case.data_sets):
    out_dir = os.path.join(case_dir, f"out_{set_index}")
    os.makedirs(out_dir)
    argv = [tessera, "run", tess_path, "--iterations", "1", "--warmup", "0", "--output-dir",
            out_dir]
    # Inputs the model declares but the case leaves out are optional inputs it omits.
    for value, data in zip(model.graph.input, inputs):
      path = os.path.join(case_dir, f"in_{set_index}_{len(argv)}.npy")
      np.save(path, np.asarray(data))
      argv += ["--input", f"{value.name}={path}"]
    proc = run(argv)
    if proc.returncode != 0:
      return "fail", "run: " + first_error_line(proc)
    for value, expected in zip(model.graph.output, outputs):
      path = os.path.join(out_dir, value.name + ".npy")
      if not os.path.exists(path):
        return "fail", f"output {value.name!r} was not written"
      why = compare(np.load(path), np.asarray(expected), rtol, atol)
      if why:
        return "fail", f"output {value.name!r}: {why}"
  shutil.rmtree(case_dir, ignore_errors=True)
  return "pass", ""


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  ap.add_argument("--tessera", required=True)
  ap.add_argument("--work-dir", required=True)
  ap.add_argument("--known-unsupported", default=os.path.join(HERE, "known_unsupported.txt"))
  ap.add_argument("--only", default=None, help="run the cases whose name contains this")
  ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
  ap.add_argument("-v", "--verbose", action="store_true")
  args = ap.parse_args()

  known = KnownUnsupported(args.known_unsupported)
  cases = [c for c in collect_cases() if not args.only or args.only in c.name]
  os.makedirs(args.work_dir, exist_ok=True)

  with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
    results = list(pool.map(lambda c: run_case(c, args.tessera, args.work_dir), cases))

  passed = failed = listed = 0
  stale = []
  per_op = collections.defaultdict(lambda: [0, 0])  # op -> [passed, applicable]
  not_applicable = collections.Counter()
  for case, (status, detail) in zip(cases, results):
    if status == "not_applicable":
      not_applicable[detail] += 1
      if args.verbose:
        print(f"n/a   {case.name}: {detail}")
      continue
    ops = ops_of(case.model)
    for op in ops:
      per_op[op][1] += 1
    if status == "pass":
      passed += 1
      for op in ops:
        per_op[op][0] += 1
      if case.name in known.names:
        stale.append(case.name)
      elif args.verbose:
        print(f"pass  {case.name}")
    elif known.reason(case.name, detail):
      listed += 1
      if args.verbose:
        print(f"known {case.name}: {known.reason(case.name, detail)} ({detail})")
    else:
      failed += 1
      print(f"FAIL  {case.name} [{' '.join(ops)}]: {detail}")

  print("per op (passed/applicable):",
        ", ".join(f"{op} {p}/{a}" for op, (p, a) in sorted(per_op.items())))
  if args.verbose:
    for detail, count in not_applicable.most_common():
      print(f"not applicable: {count} x {detail}")
  if not args.only:  # with --only, a pattern may simply have no case in the selection
    stale += [f"/{p}/ (matches no failing case)" for p in known.unused_patterns()]
  for name in stale:
    print(f"STALE {name} passes but is listed in {os.path.basename(args.known_unsupported)}")
  applicable = passed + failed + listed
  print(f"{passed} passed, {failed} failed, {listed} listed as unsupported, "
        f"of {applicable} applicable cases ({len(cases)} cases in the suite)")
  return 1 if failed or stale else 0


if __name__ == "__main__":
  sys.exit(main())
