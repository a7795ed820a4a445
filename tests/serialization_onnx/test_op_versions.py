#!/usr/bin/env python3
"""Fails when an op Tessera claims has an ONNX since-version up to Tessera's newest opset that
the importer's reviewed table (serialization/onnx/op_versions.cpp, between the `BEGIN/END
reviewed op versions` markers) does not list, or when the table lists a version ONNX does not
have. The ONNX version history comes from the `onnx` wheel's schemas (get_all_schemas_with_history),
so a newer wheel that adds a version within the claimed opsets makes this test fail until the
version is reviewed.

    test_op_versions.py path/to/op_versions.cpp
"""

from __future__ import annotations

import collections
import re
import sys

import onnx.defs

sys.dont_write_bytecode = True


def main(source_path: str) -> int:
  with open(source_path) as f:
    source = f.read()
  lo = int(re.search(r"constexpr int64_t kMinOpset = (\d+);", source).group(1))
  hi = int(re.search(r"constexpr int64_t kMaxOpset = (\d+);", source).group(1))
  begin = source.index("BEGIN reviewed op versions")
  end = source.index("END reviewed op versions")
  table = {op: sorted(int(v) for v in versions.split(","))
           for op, versions in re.findall(r'\{"(\w+)", \{([\d, ]+)\}\}', source[begin:end])}
  if len(table) < 40:
    print(f"parsed only {len(table)} ops from the reviewed table: has its format changed?")
    return 1

  history = collections.defaultdict(set)
  for schema in onnx.defs.get_all_schemas_with_history():
    if schema.domain in ("", "ai.onnx"):
      history[schema.name].add(schema.since_version)

  problems = []
  for op, reviewed in sorted(table.items()):
    versions = sorted(history.get(op, ()))
    if not versions:
      problems.append(f"{op}: not an ONNX op")
      continue
    # The version in force at the oldest claimed opset, then every later one up to the newest.
    at_min = [v for v in versions if v <= lo]
    expected = ([at_min[-1]] if at_min else []) + [v for v in versions if lo < v <= hi]
    missing = sorted(set(expected) - set(reviewed))
    extra = sorted(set(reviewed) - set(expected))
    if missing:
      problems.append(f"{op}: since-version(s) {missing} (<= opset {hi}) are not reviewed")
    if extra:
      problems.append(f"{op}: the table lists {extra}, which ONNX's history "
                      f"{versions} does not have in force for opsets {lo}..{hi}")
  for line in problems:
    print(line)
  print(f"{len(table)} ops, opsets {lo}..{hi} (onnx {onnx.__version__}): "
        f"{len(problems)} problem(s)")
  return 1 if problems else 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1]))
