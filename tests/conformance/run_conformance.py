#!/usr/bin/env python3
"""Whole-model conformance: `tessera compile` + `tessera run` against ONNX Runtime.

For every case of gen_models.build_cases(seed): ONNX Runtime (CPU, graph optimizations off)
gives the reference; the model is compiled with --tiles in {default, 1, 3, 7} (7 with
--reuse-distance 2) and each .tess run with --threads 1, 2 and 4 on the same .npy inputs. Checks:
  * every output: max |tessera - reference| <= 1e-4 * (1 + max |reference|);
  * for one .tess, outputs are bitwise identical across thread counts;
  * across tile counts, outputs agree within the same tolerance;
  * `--json` reports the threads, iterations and the outputs (names, shapes, files).
Prints one line per model and finally `N passed, M failed`; exits 1 if M > 0.

    run_conformance.py --tessera build/bin/tessera --work-dir /tmp/conf [--seed S] [--only SUB]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shlex
import subprocess
import sys
import time

import numpy as np
import onnx

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_models  # noqa: E402

TILE_CHOICES = [None, 1, 3, 7]  # None: no --tiles flag, the compiler chooses
# The 7-tile compile also bounds run-ahead to 2 ops (--reuse-distance 2): the
# memory plan then adds ordering edges to every model with parallel paths, and
# those models run with them (graph/memory_plan.hpp).
TIGHT_REUSE_TILES, TIGHT_REUSE_DISTANCE = 7, 2
THREAD_CHOICES = [1, 2, 4]
REL_TOLERANCE = 1e-4
PROCESS_TIMEOUT_S = 120


def tolerance(reference: np.ndarray) -> float:
  peak = float(np.max(np.abs(reference))) if reference.size else 0.0
  return REL_TOLERANCE * (1.0 + peak)


def max_abs_error(actual: np.ndarray, expected: np.ndarray) -> float:
  if actual.size == 0:
    return 0.0
  diff = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
  # NaN anywhere must fail the comparison, so it becomes +inf.
  return float(np.max(np.where(np.isnan(diff), np.inf, diff)))


def tiles_tag(tiles) -> str:
  return "default" if tiles is None else str(tiles)


def command_line(argv: list[str]) -> str:
  return " ".join(shlex.quote(a) for a in argv)


def run_process(argv: list[str]) -> subprocess.CompletedProcess:
  try:
    return subprocess.run(argv, capture_output=True, text=True, timeout=PROCESS_TIMEOUT_S,
                          errors="replace")
  except subprocess.TimeoutExpired as e:
    return subprocess.CompletedProcess(argv, returncode=-999, stdout=str(e.stdout or ""),
                                       stderr=f"timed out after {PROCESS_TIMEOUT_S} s")


def describe_exit(proc: subprocess.CompletedProcess) -> str:
  stderr = proc.stderr.strip().replace("\n", " | ")
  if len(stderr) > 600:
    stderr = stderr[:600] + "..."
  return f"exit {proc.returncode}, stderr: {stderr!r}"


class CaseFiles:
  """The case's model, inputs and reference outputs written under the work dir."""

  def __init__(self, work_dir: str, case: gen_models.Case, reference: dict[str, np.ndarray]):
    self.name = case.name
    self.dir = os.path.join(work_dir, case.name)
    os.makedirs(self.dir, exist_ok=True)
    self.model_path = os.path.join(self.dir, "model.onnx")
    onnx.save(case.model, self.model_path)
    self.input_args: list[str] = []
    for name, value in case.inputs.items():
      path = os.path.join(self.dir, f"input.{gen_models.safe_file_name(name)}.npy")
      # int64 inputs (token ids) keep their type; everything else is float32.
      dtype = np.int64 if value.dtype == np.int64 else np.float32
      np.save(path, np.ascontiguousarray(value, dtype=dtype))
      self.input_args += ["--input", f"{name}={path}"]
    self.reference = reference
    self.output_names = [o.name for o in case.model.graph.output]


def compile_and_run(tessera: str, files: CaseFiles, tiles) -> dict:
  """One compile, then one run per thread count. Returns what happened, for the checker."""
  tag = tiles_tag(tiles)
  tess = os.path.join(files.dir, f"model.tiles-{tag}.tess")
  argv = [tessera, "compile", files.model_path, "-o", tess]
  if tiles is not None:
    argv += ["--tiles", str(tiles)]
  if tiles == TIGHT_REUSE_TILES:
    argv += ["--reuse-distance", str(TIGHT_REUSE_DISTANCE)]
  result = {"tiles": tiles, "compile_cmd": command_line(argv), "runs": {}}
  proc = run_process(argv)
  if proc.returncode != 0:
    result["compile_error"] = describe_exit(proc)
    return result
  for threads in THREAD_CHOICES:
    out_dir = os.path.join(files.dir, f"out.tiles-{tag}.threads-{threads}")
    os.makedirs(out_dir, exist_ok=True)
    for stale in os.listdir(out_dir):
      os.remove(os.path.join(out_dir, stale))
    argv = [tessera, "run", tess, *files.input_args, "--output-dir", out_dir, "--threads",
            str(threads), "--iterations", "1", "--warmup", "0", "--json"]
    proc = run_process(argv)
    run = {"cmd": command_line(argv), "out_dir": out_dir}
    if proc.returncode != 0:
      run["error"] = describe_exit(proc)
    else:
      run["stdout"] = proc.stdout
    result["runs"][threads] = run
  return result


def load_outputs(files: CaseFiles, run: dict, threads: int, problems: list[str], where: str):
  """Checks the --json report and loads every output .npy; None where one is missing."""
  try:
    report = json.loads(run["stdout"])
  except json.JSONDecodeError as e:
    problems.append(f"{where}: --json output is not one JSON object ({e}): "
                    f"{run['stdout'][:200]!r}")
    report = None
  if report is not None:
    if report.get("threads") != threads or report.get("iterations") != 1:
      problems.append(f"{where}: --json says threads={report.get('threads')} "
                      f"iterations={report.get('iterations')}, expected {threads} and 1")
    latency = report.get("latency_ms", {})
    if not all(isinstance(latency.get(k), (int, float)) for k in ("min", "median", "p90",
                                                                  "mean")):
      problems.append(f"{where}: --json latency_ms lacks min/median/p90/mean: {latency!r}")
    listed = {o.get("name"): o for o in report.get("outputs", [])}
    if set(listed) != set(files.output_names):
      problems.append(f"{where}: --json lists outputs {sorted(listed)}, the model has "
                      f"{sorted(files.output_names)}")
    for name, entry in listed.items():
      ref = files.reference.get(name)
      if ref is not None and list(entry.get("shape", [])) != list(ref.shape):
        problems.append(f"{where} output {name!r}: --json shape {entry.get('shape')} != "
                        f"reference {list(ref.shape)}")
      expected_file = gen_models.safe_file_name(name) + ".npy"
      if os.path.basename(str(entry.get("file", ""))) != expected_file:
        problems.append(f"{where} output {name!r}: --json file {entry.get('file')!r}, "
                        f"expected .../{expected_file}")
  outputs = {}
  for name in files.output_names:
    path = os.path.join(run["out_dir"], gen_models.safe_file_name(name) + ".npy")
    try:
      value = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
      problems.append(f"{where} output {name!r}: cannot load {path}: {e}")
      outputs[name] = None
      continue
    if value.dtype != np.float32:
      problems.append(f"{where} output {name!r}: dtype {value.dtype}, expected float32")
    outputs[name] = value
  return outputs


def check_case(files: CaseFiles, results: list[dict]) -> tuple[list[str], float]:
  """Every failure as one message naming model, tiles, threads, output, error, tolerance."""
  problems: list[str] = []
  worst_ratio = 0.0
  per_tiles_first = {}  # tiles -> outputs of the first thread count that ran
  for result in results:
    tag = tiles_tag(result["tiles"])
    if "compile_error" in result:
      problems.append(f"model={files.name} tiles={tag}: compile failed ({result['compile_error']})"
                      f"\n      repro: {result['compile_cmd']}")
      continue
    by_threads = {}
    for threads, run in result["runs"].items():
      where = f"model={files.name} tiles={tag} threads={threads}"
      if "error" in run:
        problems.append(f"{where}: run failed ({run['error']})\n      repro: "
                        f"{result['compile_cmd']} && {run['cmd']}")
        continue
      n_before = len(problems)
      outputs = load_outputs(files, run, threads, problems, where)
      for name, value in outputs.items():
        if value is None:
          continue
        ref = files.reference[name]
        if value.shape != ref.shape:
          problems.append(f"{where} output={name!r}: shape {list(value.shape)} != reference "
                          f"{list(ref.shape)}")
          continue
        err, tol = max_abs_error(value, ref), tolerance(ref)
        worst_ratio = max(worst_ratio, err / tol)
        if not err <= tol:
          idx = np.unravel_index(int(np.argmax(np.abs(value.astype(np.float64) - ref))),
                                 ref.shape) if ref.ndim else ()
          problems.append(f"{where} output={name!r}: max abs error {err:.3g} > tolerance "
                          f"{tol:.3g} (first worst at index {tuple(int(i) for i in idx)}: "
                          f"got {float(value[idx])!r}, reference {float(ref[idx])!r})")
      if len(problems) != n_before:
        problems[-1] += f"\n      repro: {result['compile_cmd']} && {run['cmd']}"
      by_threads[threads] = outputs
    # Bitwise identity across thread counts for the same .tess.
    thread_counts = sorted(by_threads)
    if thread_counts:
      base_t = thread_counts[0]
      per_tiles_first.setdefault(result["tiles"], by_threads[base_t])
      for t in thread_counts[1:]:
        for name in files.output_names:
          a, b = by_threads[base_t].get(name), by_threads[t].get(name)
          if a is None or b is None or a.shape != b.shape:
            continue
          if a.tobytes() != b.tobytes():
            n_diff = int(np.count_nonzero(a.view(np.uint32) != b.view(np.uint32)))
            problems.append(f"model={files.name} tiles={tag} output={name!r}: threads={t} "
                            f"differs bitwise from threads={base_t} in {n_diff} of {a.size} "
                            f"elements (max abs diff {max_abs_error(a, b):.3g})")
  # Agreement across tile counts, within the reference tolerance.
  tile_keys = list(per_tiles_first)
  for other in tile_keys[1:]:
    for name in files.output_names:
      a, b = per_tiles_first[tile_keys[0]].get(name), per_tiles_first[other].get(name)
      if a is None or b is None or a.shape != b.shape:
        continue
      diff, tol = max_abs_error(a, b), tolerance(files.reference[name])
      if not diff <= tol:
        problems.append(f"model={files.name} output={name!r}: tiles={tiles_tag(other)} vs "
                        f"tiles={tiles_tag(tile_keys[0])} differ by {diff:.3g} > {tol:.3g}")
  return problems, worst_ratio


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  ap.add_argument("--tessera", required=True, help="path of the tessera binary")
  ap.add_argument("--work-dir", required=True, help="where models, inputs and outputs go")
  ap.add_argument("--seed", type=int, default=gen_models.DEFAULT_SEED)
  ap.add_argument("--only", default="", help="only cases whose name contains this")
  ap.add_argument("--jobs", type=int, default=2, help="concurrent tessera processes")
  args = ap.parse_args()

  tessera = os.path.abspath(args.tessera)
  if not os.access(tessera, os.X_OK):
    print(f"error: {tessera} is not an executable", file=sys.stderr)
    return 2
  os.makedirs(args.work_dir, exist_ok=True)
  print(f"seed = {args.seed} (reproduce with --seed {args.seed} --only <model>)", flush=True)
  started = time.monotonic()

  cases = [c for c in gen_models.build_cases(args.seed) if args.only in c.name]
  all_files: list[CaseFiles] = []
  generation_failures: list[tuple[str, str]] = []
  for case in cases:
    try:
      reference = gen_models.finalize(case)
    except Exception as e:  # a broken generator case is a failure of this test, not skipped
      generation_failures.append((case.name, f"reference could not be computed: {e}"))
      continue
    all_files.append(CaseFiles(args.work_dir, case, reference))
  print(f"{len(cases)} models generated, references from ONNX Runtime in "
        f"{time.monotonic() - started:.1f} s", flush=True)

  results: dict[str, list[dict]] = {f.name: [] for f in all_files}
  with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
    futures = {pool.submit(compile_and_run, tessera, f, tiles): f
               for f in all_files for tiles in TILE_CHOICES}
    for future in concurrent.futures.as_completed(futures):
      results[futures[future].name].append(future.result())

  passed = failed = 0
  for name, message in generation_failures:
    failed += 1
    print(f"FAIL {name}: {message}")
  for files in all_files:
    ordered = sorted(results[files.name], key=lambda r: TILE_CHOICES.index(r["tiles"]))
    problems, worst = check_case(files, ordered)
    if problems:
      failed += 1
      print(f"FAIL {files.name} ({len(problems)} problems)")
      for p in problems[:12]:
        print(f"    {p}")
      if len(problems) > 12:
        print(f"    ... and {len(problems) - 12} more")
    else:
      passed += 1
      print(f"ok   {files.name} (worst error/tolerance {worst:.3f})")
  print(f"conformance took {time.monotonic() - started:.1f} s")
  print(f"{passed} passed, {failed} failed", flush=True)
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
