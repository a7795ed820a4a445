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

Tessera compiles for fixed shapes: operands that fix a shape or a kernel constant (Reshape's
shape, Slice's starts, Resize's scales, Clip's bounds, ...) must be constants, and training-only
outputs (LayerNormalization's Mean and InvStdDev, Dropout's mask, MaxPool's Indices) are
refused. Many backend cases pass such operands as model inputs or ask for those outputs, so as
given they test nothing of the op. Such a case is *adapted*, as a user's exported model would
have it: each operand the compiler names as needing a constant becomes an initializer holding
the case's value (only where every data set gives the same value; so does an empty int64
operand, which no --shape can describe), and the training outputs the
compiler names are dropped from the graph outputs (the others are still compared). The summary
counts the cases that passed after adaptation; the unadapted refusal stays a clean one-line
error (tests/cli checks those).

Where ONNX's own reference outputs and ONNX Runtime's differ, Tessera follows ONNX Runtime
(users compare against it): the cases listed in ort_reference.txt, with the reason, are checked
against ONNX Runtime's outputs on the same model and inputs instead, and reported stale if
ONNX Runtime agrees with the reference after all.

A case that fails is a bug unless it is listed in known_unsupported.txt with the reason (an
attribute or input form Tessera rejects on purpose, with a clean error), by name or by a regex
on its error line for a limitation many cases share. A listed case that passes, or a regex that
matches nothing, is reported too, so the list never goes stale.

Prints one line per failure, a per-op summary, and finally
  `N passed (D of them adapted), M failed, K listed as unsupported, of A applicable cases
  (T cases in the suite)`
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
import onnx.numpy_helper

sys.dont_write_bytecode = True  # no __pycache__ in the source tree

PROCESS_TIMEOUT_S = 120
UNSUPPORTED_OP = re.compile(r"\(op '([^']+)', opset \d+\) is not supported by Tessera")
UNSUPPORTED_OPSET = re.compile(r"opset (\d+) is not supported \(Tessera supports")
OTHER_DOMAIN = re.compile(r"the model imports no opset of the default ONNX domain")
# Tessera's activations are float32 (DESIGN.md); other element types are not claimed.
UNSUPPORTED_DTYPE = re.compile(
    r"has type (\w+); Tessera needs float32|reads the (int64) input '[^']*' as data|"
    r"reads '[^']*', an (int64) input viewed with another shape|computes on (int64) values at run "
    r"time")
# What adapt() answers: an operand the compiler needs as a constant, a training-only output.
CONSTANT_OPERAND = re.compile(r"input '([^']+)'\)? must be an? (?:\w+ )?constant")
# An empty int64 input (the axes of a reduction over its default axes) has no --shape value.
EMPTY_OPERAND = re.compile(r"input '([^']+)' has an unknown dimension")
TRAINING_OUTPUTS = re.compile(r"node '([^']+)' \(op '[^']+', opset \d+\): (?:only the first "
                              r"output \(Y\) is supported|the (?:Indices|mask) output is not)")
MAX_ADAPTATIONS = 8
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


def shape_flags_of(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> list[str]:
  """Inputs declared with symbolic or unknown dims get the case's own shapes (`--shape`), as a
  user compiling for one input size would; every data set of a case has the same shapes."""
  flags = []
  for value in model.graph.input:
    if value.name not in inputs:
      continue
    dims = value.type.tensor_type.shape.dim
    static = value.type.tensor_type.HasField("shape") and all(
        d.HasField("dim_value") and d.dim_value > 0 for d in dims)
    shape = inputs[value.name].shape
    if not static and len(shape) > 0 and all(n > 0 for n in shape):
      flags += ["--shape", f"{value.name}={','.join(map(str, shape))}"]
  return flags


def adapt(model: onnx.ModelProto, data_sets: list[dict[str, np.ndarray]],
          message: str) -> tuple[onnx.ModelProto, str] | None:
  """The model with the refusal in `message` taken away (see the module's docstring), and
  what was changed; None where it names nothing adapt() can change."""
  constant = CONSTANT_OPERAND.search(message)
  empty = EMPTY_OPERAND.search(message)
  if empty and data_sets and data_sets[0].get(empty.group(1), np.zeros(1)).dtype == np.int64:
    constant = empty
  if constant:
    name = constant.group(1)
    names = [v.name for v in model.graph.input]
    if name not in names or not data_sets or name not in data_sets[0]:
      return None
    value = data_sets[0][name]
    if any(not np.array_equal(d.get(name), value) for d in data_sets[1:]):
      return None  # the data sets differ in it: no one constant stands for the case
    adapted = onnx.ModelProto()
    adapted.CopyFrom(model)
    del adapted.graph.input[names.index(name)]
    adapted.graph.initializer.append(onnx.numpy_helper.from_array(value, name))
    return adapted, f"input {name!r} as an initializer"
  training = TRAINING_OUTPUTS.search(message)
  if training:
    # The compiler calls an unnamed node "<op>_<its index in the graph>".
    nodes = model.graph.node
    node = next((n for i, n in enumerate(nodes)
                 if (n.name or f"{n.op_type}_{i}") == training.group(1)), None)
    extra = set(node.output[1:]) if node is not None else set()
    kept = [o for o in model.graph.output if o.name not in extra]
    if not kept or len(kept) == len(model.graph.output):
      return None
    adapted = onnx.ModelProto()
    adapted.CopyFrom(model)
    del adapted.graph.output[:]
    adapted.graph.output.extend(kept)
    return adapted, f"training outputs of {training.group(1)!r} dropped"
  return None


def read_ort_reference(path: str) -> dict[str, str]:
  """Lines `test_name  reason`; # starts a comment."""
  cases = {}
  with open(path) as f:
    for line in f:
      line = line.split("#", 1)[0].strip()
      if line:
        name, _, reason = line.partition(" ")
        cases[name] = reason.strip()
  return cases


def ort_outputs(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  import onnxruntime as ort  # only the few cases in ort_reference.txt need it
  options = ort.SessionOptions()
  options.intra_op_num_threads = 1
  session = ort.InferenceSession(model.SerializeToString(), options,
                                 providers=["CPUExecutionProvider"])
  names = [o.name for o in session.get_outputs()]
  feed = {v.name: inputs[v.name] for v in model.graph.input if v.name in inputs}
  return dict(zip(names, session.run(names, feed)))


def run_case(case, tessera: str, work_dir: str, ort_reference: bool = False) -> tuple[str, str]:
  """('pass' | 'fail' | 'not_applicable', detail); a pass after adaptation is ('pass', what
  was adapted)."""
  model = case.model
  if not is_plain_tensor_model(model):
    return "not_applicable", "non-tensor inputs or outputs"
  case_dir = os.path.join(work_dir, case.name)
  shutil.rmtree(case_dir, ignore_errors=True)
  os.makedirs(case_dir)
  onnx_path = os.path.join(case_dir, "model.onnx")
  tess_path = os.path.join(case_dir, "model.tess")
  # Inputs that the case leaves out are optional inputs the model omits; outputs by name.
  data_sets = [({v.name: np.asarray(d) for v, d in zip(model.graph.input, inputs)},
                {v.name: np.asarray(d) for v, d in zip(model.graph.output, outputs)})
               for inputs, outputs in case.data_sets]
  adaptations = []
  while True:
    with open(onnx_path, "wb") as f:
      f.write(model.SerializeToString())
    flags = shape_flags_of(model, data_sets[0][0]) if data_sets else []
    proc = run([tessera, "compile", onnx_path, "-o", tess_path, "-q"] + flags)
    if proc.returncode == 0 or len(adaptations) == MAX_ADAPTATIONS:
      break
    adapted = adapt(model, [inputs for inputs, _ in data_sets], first_error_line(proc))
    if adapted is None:
      break
    model, what = adapted
    adaptations.append(what)
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
      return "not_applicable", f"{next(g for g in dtype.groups() if g)} activations"
    return "fail", "compile: " + message

  rtol = getattr(case, "rtol", None) or 1e-3
  atol = getattr(case, "atol", None) or 1e-7
  adapted = f" (adapted: {'; '.join(adaptations)})" if adaptations else ""
  for set_index, (inputs, outputs) in enumerate(data_sets):
    if ort_reference:
      onnx_expected = outputs
      outputs = ort_outputs(model, inputs)
      if all(compare(outputs[name], e, rtol, atol) is None for name, e in onnx_expected.items()
             if name in outputs):
        return "fail", "STALE: ONNX Runtime agrees with ONNX's reference outputs"
    out_dir = os.path.join(case_dir, f"out_{set_index}")
    os.makedirs(out_dir)
    argv = [tessera, "run", tess_path, "--iterations", "1", "--warmup", "0", "--output-dir",
            out_dir]
    for value in model.graph.input:
      if value.name in inputs:
        path = os.path.join(case_dir, f"in_{set_index}_{len(argv)}.npy")
        np.save(path, inputs[value.name])
        argv += ["--input", f"{value.name}={path}"]
    proc = run(argv)
    if proc.returncode != 0:
      return "fail", "run: " + first_error_line(proc) + adapted
    for value in model.graph.output:
      path = os.path.join(out_dir, value.name + ".npy")
      if not os.path.exists(path):
        return "fail", f"output {value.name!r} was not written" + adapted
      why = compare(np.load(path), outputs[value.name], rtol, atol)
      if why:
        return "fail", f"output {value.name!r}: {why}" + adapted
  shutil.rmtree(case_dir, ignore_errors=True)
  return "pass", adapted.strip()


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  ap.add_argument("--tessera", required=True)
  ap.add_argument("--work-dir", required=True)
  ap.add_argument("--known-unsupported", default=os.path.join(HERE, "known_unsupported.txt"))
  ap.add_argument("--ort-reference", default=os.path.join(HERE, "ort_reference.txt"))
  ap.add_argument("--only", default=None, help="run the cases whose name contains this")
  ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
  ap.add_argument("-v", "--verbose", action="store_true")
  args = ap.parse_args()

  known = KnownUnsupported(args.known_unsupported)
  ort_reference = read_ort_reference(args.ort_reference)
  cases = [c for c in collect_cases() if not args.only or args.only in c.name]
  os.makedirs(args.work_dir, exist_ok=True)

  with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
    results = list(
        pool.map(
            lambda c: run_case(c, args.tessera, args.work_dir, c.name in ort_reference), cases))

  passed = failed = listed = adapted = 0
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
      adapted += bool(detail)
      for op in ops:
        per_op[op][0] += 1
      if case.name in known.names:
        stale.append(case.name)
      elif args.verbose:
        against = " against ONNX Runtime" if case.name in ort_reference else ""
        print(f"pass  {case.name}{against} {detail}".rstrip())
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
  print(f"{passed} passed ({adapted} of them adapted), {failed} failed, {listed} listed as unsupported, "
        f"of {applicable} applicable cases ({len(cases)} cases in the suite)")
  return 1 if failed or stale else 0


if __name__ == "__main__":
  sys.exit(main())
