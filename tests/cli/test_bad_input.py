#!/usr/bin/env python3
"""Bad input to the `tessera` command line: it must fail cleanly, never crash.

A clean failure: exit code in 1..127 (not a signal, not a timeout), stderr is exactly one
line starting with "error:", and no sanitizer report. Cases:
  (a) a valid .tess truncated at every length below 256 and at ~100 random longer lengths;
  (b) 1,000 copies of a valid .tess with one random byte flipped, through `run` and `inspect`
      (each may succeed, or fail cleanly);
  (c) an ONNX model with an unsupported op: the error names the node, the op type and opset;
  (d) `run` with a missing / wrong input name, a wrong shape, a float64 .npy, a missing
      .npy file, a garbage .npy: the error names the input;
  (e) a non-existent path, an empty file, a random-bytes file to compile, run and inspect;
  (f) ONNX external data: a model whose weights live in a side file compiles to the same
      .tess as the inline model; a truncated or missing data file, or a location outside the
      model's folder, fails cleanly naming the tensor.
Prints `N passed, M failed`; exits 1 if M > 0. Works with any build of the binary,
including ASan+UBSan ones: sanitizer reports are made fatal and detected.

    test_bad_input.py --tessera PATH --work-dir DIR [--seed S] [--flips 1000]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import shlex
import subprocess
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

DEFAULT_SEED = 7031
TIMEOUT_S = 20
SANITIZER_MARKERS = ("Sanitizer", "runtime error", "ERROR: AddressSanitizer", "LeakSanitizer")

ENV = dict(os.environ)
# allocator_may_return_null: an absurd allocation is a clean "out of memory" error, as in release builds.
ENV["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=0:exitcode=99:allocator_may_return_null=1"
ENV["UBSAN_OPTIONS"] = "halt_on_error=1:print_stacktrace=1:exitcode=98"


def cmd_str(argv) -> str:
  return " ".join(shlex.quote(str(a)) for a in argv)


def invoke(argv) -> subprocess.CompletedProcess:
  try:
    return subprocess.run([str(a) for a in argv], capture_output=True, timeout=TIMEOUT_S,
                          env=ENV, stdin=subprocess.DEVNULL)
  except subprocess.TimeoutExpired:
    return subprocess.CompletedProcess(argv, returncode=None, stdout=b"",
                                       stderr=f"<timed out after {TIMEOUT_S} s>".encode())


def crash_problem(proc) -> str | None:
  """Why the process did not end in a controlled way, or None."""
  stderr = proc.stderr.decode("utf-8", "replace")
  if proc.returncode is None:
    return f"hang: no exit within {TIMEOUT_S} s"
  if proc.returncode < 0 or proc.returncode >= 128:
    return f"killed by a signal / crashed: exit code {proc.returncode}"
  for marker in SANITIZER_MARKERS:
    if marker in stderr:
      return f"sanitizer report ({marker!r}), exit {proc.returncode}"
  return None


def clean_failure_problem(proc, must_contain=()) -> str | None:
  """None when the process failed cleanly with one 'error:' line containing must_contain."""
  crash = crash_problem(proc)
  if crash:
    return crash
  if proc.returncode == 0:
    return "exit 0, expected a failure"
  stderr = proc.stderr.decode("utf-8", "replace")
  # Lines end at '\n' only (str.splitlines would also split at \x0c, \x1c, ...).
  lines = stderr.split("\n")
  if lines and lines[-1] == "":
    lines.pop()
  if len(lines) != 1 or not lines[0].startswith("error: "):
    return f"stderr must be exactly one line starting with 'error: ', got {len(lines)} lines"
  # Bytes from a hostile file echoed raw would reach the user's terminal.
  if any(ord(ch) < 32 and ch != "\t" or ch == "\x7f" for ch in lines[0]):
    return "the error line contains raw control characters (echoed from the file unescaped?)"
  missing = [s for s in must_contain if s not in lines[0]]
  if missing:
    return f"error line does not name {missing}"
  return None


def brief(proc) -> str:
  stderr = proc.stderr.decode("utf-8", "replace").rstrip("\n")
  if len(stderr) > 500:
    stderr = stderr[:250] + " ... " + stderr[-250:]
  return f"exit={proc.returncode} stderr={stderr!r}"


class Results:
  def __init__(self):
    self.passed = 0
    self.failures: list[str] = []

  def check(self, label: str, argv, problem: str | None, proc) -> None:
    if problem is None:
      self.passed += 1
    else:
      self.failures.append(f"{label}: {problem}\n    command: {cmd_str(argv)}\n    {brief(proc)}")


# ------------------------------------------------------------------ models


def save_model(path, nodes, inputs, outputs, inits, opset):
  graph = helper.make_graph(nodes, "bad_input", inputs, outputs, inits)
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                            ir_version=8)
  onnx.checker.check_model(model)
  onnx.save(model, path)


def valid_model(path, rng):
  """conv-relu-maxpool-gemm-softmax: a .tess with weights, several ops and tiles."""
  f = TensorProto.FLOAT
  inits = [
      numpy_helper.from_array((0.3 * rng.standard_normal((4, 2, 3, 3))).astype(np.float32), "w"),
      numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b"),
      numpy_helper.from_array((0.3 * rng.standard_normal((36, 5))).astype(np.float32), "fc"),
      numpy_helper.from_array(np.array([1, -1], np.int64), "shape"),
  ]
  nodes = [
      helper.make_node("Conv", ["image", "w", "b"], ["c"], name="conv", kernel_shape=[3, 3],
                       pads=[1, 1, 1, 1]),
      helper.make_node("Relu", ["c"], ["r"], name="relu"),
      helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
      helper.make_node("Reshape", ["p", "shape"], ["flat"], name="reshape"),
      helper.make_node("MatMul", ["flat", "fc"], ["logits"], name="fc"),
      helper.make_node("Softmax", ["logits"], ["prob"], name="softmax", axis=-1),
  ]
  save_model(path, nodes, [helper.make_tensor_value_info("image", f, [1, 2, 6, 6])],
             [helper.make_tensor_value_info("prob", f, [1, 5])], inits, 13)


def two_input_model(path):
  f = TensorProto.FLOAT
  nodes = [helper.make_node("Add", ["lhs_input", "rhs_input"], ["sum"], name="add")]
  save_model(path, nodes, [helper.make_tensor_value_info("lhs_input", f, [2, 3]),
                           helper.make_tensor_value_info("rhs_input", f, [2, 3])],
             [helper.make_tensor_value_info("sum", f, [2, 3])], [], 13)


def unsupported_op_model(path, op, node_name, opset):
  f = TensorProto.FLOAT
  nodes = [helper.make_node("Relu", ["x"], ["r"], name="fine_relu"),
           helper.make_node(op, ["r"], ["y"], name=node_name)]
  save_model(path, nodes, [helper.make_tensor_value_info("x", f, [1, 4])],
             [helper.make_tensor_value_info("y", f, [1, 4])], [], opset)


# ------------------------------------------------------------------ cases


def external_data_cases(tessera, valid_onnx, valid_tess, work, results):
  """(f): the valid model re-saved with its weights in a side file (as torch.onnx.export
  writes large models)."""
  d = os.path.join(work, "external")
  os.makedirs(d, exist_ok=True)
  model = onnx.load(valid_onnx)
  path = os.path.join(d, "model.onnx")
  onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                  location="weights.bin", size_threshold=0)
  out = os.path.join(d, "model.tess")
  argv = [tessera, "compile", path, "-o", out]
  proc = invoke(argv)
  same = proc.returncode == 0 and open(out, "rb").read() == open(valid_tess, "rb").read()
  results.check("(f) external data compiles to the inline model's .tess", argv,
                crash_problem(proc) or (None if same else "differs from the inline model's .tess"),
                proc)
  data = open(os.path.join(d, "weights.bin"), "rb").read()
  cases = []
  truncated = os.path.join(d, "truncated")
  os.makedirs(truncated, exist_ok=True)
  onnx.save_model(onnx.load(path, load_external_data=False), os.path.join(truncated, "model.onnx"))
  with open(os.path.join(truncated, "weights.bin"), "wb") as fh:
    fh.write(data[: len(data) // 2])
  cases.append(("truncated data file", os.path.join(truncated, "model.onnx")))
  missing = os.path.join(d, "missing")
  os.makedirs(missing, exist_ok=True)
  onnx.save_model(onnx.load(path, load_external_data=False), os.path.join(missing, "model.onnx"))
  cases.append(("missing data file", os.path.join(missing, "model.onnx")))
  escaping = onnx.load(path, load_external_data=False)
  for t in escaping.graph.initializer:
    for entry in t.external_data:
      if entry.key == "location":
        entry.value = "../weights.bin"
  onnx.save_model(escaping, os.path.join(missing, "escaping.onnx"))
  cases.append(("location outside the model's folder", os.path.join(missing, "escaping.onnx")))
  for label, onnx_path in cases:
    argv = [tessera, "compile", onnx_path, "-o", os.path.join(d, "bad.tess")]
    proc = invoke(argv)
    # The first tensor the importer reads is one of the initializers: the error names one.
    problem = clean_failure_problem(proc)
    if problem is None and not any(n in proc.stderr.decode() for n in ("'w'", "'b'", "'fc'", "'shape'")):
      problem = "the error does not name the tensor"
    results.check(f"(f) external data: {label}", argv, problem, proc)


def compile_ok(tessera, onnx_path, tess_path):
  argv = [tessera, "compile", onnx_path, "-o", tess_path]
  proc = invoke(argv)
  if proc.returncode != 0:
    raise SystemExit(f"error: cannot make the valid .tess the test starts from: "
                     f"{cmd_str(argv)}: {brief(proc)}")


def truncation_jobs(tess_bytes: bytes, rng, work: str):
  size = len(tess_bytes)
  lengths = list(range(min(256, size)))
  if size > 257:
    lengths += sorted(set(int(x) for x in rng.integers(256, size, 100)))
  lengths.append(size - 1)
  jobs = []
  tdir = os.path.join(work, "truncated")
  os.makedirs(tdir, exist_ok=True)
  for n in sorted(set(lengths)):
    path = os.path.join(tdir, f"len{n}.tess")
    with open(path, "wb") as fh:
      fh.write(tess_bytes[:n])
    jobs.append((f"(a) truncated to {n} of {size} bytes", path))
  return jobs


def run_truncation(tessera, label, path):
  out = []
  for argv in ([tessera, "run", path, "--iterations", "1", "--warmup", "0",
                "--output-dir", os.path.dirname(path)],
               [tessera, "inspect", path]):
    proc = invoke(argv)
    out.append((f"{label} [{argv[1]}]", argv, clean_failure_problem(proc), proc))
  return out


def run_flipped(tessera, tess_bytes: bytes, seed: int, index: int, fdir: str):
  # Each copy has its own generator, so a single copy can be rebuilt from (seed, index).
  rng = np.random.default_rng([seed, index])
  pos = int(rng.integers(0, len(tess_bytes)))
  xor = int(rng.integers(1, 256))
  data = bytearray(tess_bytes)
  data[pos] ^= xor
  path = os.path.join(fdir, f"flip{index:04d}_at{pos}_xor{xor:02x}.tess")
  with open(path, "wb") as fh:
    fh.write(data)
  out_dir = path + ".out"
  os.makedirs(out_dir, exist_ok=True)
  out = []
  keep = False
  for argv in ([tessera, "run", path, "--iterations", "1", "--warmup", "0", "--output-dir",
                out_dir], [tessera, "inspect", path]):
    proc = invoke(argv)
    problem = crash_problem(proc) if proc.returncode == 0 else clean_failure_problem(proc)
    keep = keep or problem is not None
    label = f"(b) flip #{index} byte {pos} ^= 0x{xor:02x} [{argv[1]}]"
    out.append((label, argv, problem, proc))
  if not keep:  # only the files that show a bug stay on disk
    os.remove(path)
    for name in os.listdir(out_dir):
      os.remove(os.path.join(out_dir, name))
    os.rmdir(out_dir)
  return out


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  ap.add_argument("--tessera", required=True)
  ap.add_argument("--work-dir", required=True)
  ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
  ap.add_argument("--flips", type=int, default=1000)
  ap.add_argument("--jobs", type=int, default=2)
  args = ap.parse_args()
  tessera = os.path.abspath(args.tessera)
  work = os.path.abspath(args.work_dir)
  os.makedirs(work, exist_ok=True)
  print(f"seed = {args.seed} (reproduce with --seed {args.seed})", flush=True)
  started = time.monotonic()
  rng = np.random.default_rng(args.seed)
  results = Results()

  valid_onnx = os.path.join(work, "valid.onnx")
  valid_tess = os.path.join(work, "valid.tess")
  valid_model(valid_onnx, rng)
  compile_ok(tessera, valid_onnx, valid_tess)
  proc = invoke([tessera, "run", valid_tess, "--iterations", "1", "--warmup", "0",
                 "--output-dir", work])
  results.check("valid .tess runs", [tessera, "run", valid_tess],
                crash_problem(proc) or (None if proc.returncode == 0 else "exit != 0"), proc)
  with open(valid_tess, "rb") as fh:
    tess_bytes = fh.read()
  print(f"valid .tess: {len(tess_bytes)} bytes", flush=True)

  # (a) and (b) in a small pool: each job is a few processes.
  fdir = os.path.join(work, "flipped")
  os.makedirs(fdir, exist_ok=True)
  with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
    futures = [pool.submit(run_truncation, tessera, label, path)
               for label, path in truncation_jobs(tess_bytes, rng, work)]
    futures += [pool.submit(run_flipped, tessera, tess_bytes, args.seed, i, fdir)
                for i in range(args.flips)]
    flip_outcomes = {"run": [0, 0], "inspect": [0, 0]}  # [exit 0, clean failure]
    for future in futures:
      for label, argv, problem, proc in future.result():
        results.check(label, argv, problem, proc)
        if label.startswith("(b)") and problem is None:
          flip_outcomes[argv[1]][0 if proc.returncode == 0 else 1] += 1
  for command, (ok, refused) in flip_outcomes.items():
    print(f"(b) {command}: {ok} flipped files accepted, {refused} refused cleanly", flush=True)
  print(f"(a)+(b) done in {time.monotonic() - started:.1f} s", flush=True)

  # (c) unsupported ops: the error names the node, the op type and the opset.
  for op, node_name, opset in (("Softsign", "my_softsign_node_17", 13), ("Selu", "selu_layer", 11),
                               ("Softsign", "softsign.at.opset.17", 17)):
    path = os.path.join(work, f"unsupported_{op}_{opset}.onnx")
    unsupported_op_model(path, op, node_name, opset)
    argv = [tessera, "compile", path, "-o", os.path.join(work, "unsupported.tess")]
    proc = invoke(argv)
    results.check(f"(c) unsupported {op} opset {opset}", argv,
                  clean_failure_problem(proc, (node_name, op, str(opset))), proc)

  # (d) bad inputs to `run`.
  two_onnx, two_tess = os.path.join(work, "two_inputs.onnx"), os.path.join(work, "two_inputs.tess")
  two_input_model(two_onnx)
  compile_ok(tessera, two_onnx, two_tess)
  d = os.path.join(work, "npy")
  os.makedirs(d, exist_ok=True)
  good = os.path.join(d, "a_good.npy")
  np.save(good, rng.standard_normal((2, 3)).astype(np.float32))
  wrong_shape = os.path.join(d, "b_shape.npy")
  np.save(wrong_shape, rng.standard_normal((3, 2)).astype(np.float32))
  f64 = os.path.join(d, "c_f64.npy")
  np.save(f64, rng.standard_normal((2, 3)))
  garbage = os.path.join(d, "d_garbage.npy")
  with open(garbage, "wb") as fh:
    fh.write(rng.integers(0, 256, 200, dtype=np.uint8).tobytes())
  bad_header = os.path.join(d, "e_header.npy")
  with open(bad_header, "wb") as fh:  # the magic is right, the header is not
    fh.write(b"\x93NUMPY\x01\x00\xff\xff{'descr': '<f4', 'fortran_order'")
  missing_file = os.path.join(d, "f_does_not_exist.npy")
  run = [tessera, "run", two_tess, "--iterations", "1", "--warmup", "0", "--output-dir", d]
  lhs_ok = ["--input", f"lhs_input={good}"]
  bad_runs = [
      ("missing input", lhs_ok, "rhs_input"),
      ("wrong input name", lhs_ok + ["--input", f"rhs_input={good}", "--input",
                             f"no_such_input={good}"], "no_such_input"),
      ("wrong shape", lhs_ok + ["--input", f"rhs_input={wrong_shape}"], "rhs_input"),
      ("float64 .npy", lhs_ok + ["--input", f"rhs_input={f64}"], "rhs_input"),
      ("non-existent .npy", lhs_ok + ["--input", f"rhs_input={missing_file}"], "rhs_input"),
      ("garbage .npy", lhs_ok + ["--input", f"rhs_input={garbage}"], "rhs_input"),
      ("truncated .npy header", lhs_ok + ["--input", f"rhs_input={bad_header}"], "rhs_input"),
  ]
  for label, extra, name in bad_runs:
    argv = run + extra
    proc = invoke(argv)
    results.check(f"(d) run with {label}", argv, clean_failure_problem(proc, (name,)), proc)
  argv = run + lhs_ok + ["--input", f"rhs_input={good}"]
  proc = invoke(argv)
  results.check("(d) control: both inputs given", argv,
                crash_problem(proc) or (None if proc.returncode == 0 else "exit != 0"), proc)

  # (e) missing, empty and random files to every command.
  empty = os.path.join(work, "empty.bin")
  open(empty, "wb").close()
  noise = os.path.join(work, "random.bin")
  with open(noise, "wb") as fh:
    fh.write(rng.integers(0, 256, 4096, dtype=np.uint8).tobytes())
  absent = os.path.join(work, "no_such_model.onnx")
  out = os.path.join(work, "e_out.tess")
  for label, path in (("non-existent path", absent), ("empty file", empty),
                      ("random bytes", noise)):
    for argv in ([tessera, "compile", path, "-o", out],
                 [tessera, "run", path, "--iterations", "1", "--warmup", "0", "--output-dir",
                  work],
                 [tessera, "inspect", path]):
      proc = invoke(argv)
      results.check(f"(e) {argv[1]} {label}", argv, clean_failure_problem(proc), proc)
  argv = [tessera, "compile", valid_onnx, "-o", os.path.join(work, "no", "such", "dir", "x.tess")]
  proc = invoke(argv)
  results.check("(e) compile into a non-existent directory", argv, clean_failure_problem(proc),
                proc)
  argv = [tessera, "compile", valid_tess, "-o", out]
  proc = invoke(argv)
  results.check("(e) compile a .tess as if it were ONNX", argv, clean_failure_problem(proc), proc)

  external_data_cases(tessera, valid_onnx, valid_tess, work, results)

  for failure in results.failures:
    print("FAIL " + failure)
  print(f"bad-input test took {time.monotonic() - started:.1f} s")
  print(f"{results.passed} passed, {len(results.failures)} failed", flush=True)
  return 1 if results.failures else 0


if __name__ == "__main__":
  sys.exit(main())
