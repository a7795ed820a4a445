#!/usr/bin/env python3
"""Random ONNX models for Tessera's whole-model conformance test.

Every supported op alone over random shapes and attributes, plus small multi-op
CNNs (conv-bn-relu, ResNet, Inception, MobileNet, classifier head, MLP), all
built with onnx.helper from one seed so a failure can be reproduced exactly.

    python gen_models.py --out-dir DIR [--seed S] [--only SUBSTRING]

writes DIR/<case>.onnx and DIR/<case>.<input>.npy for every case; the runner
(run_conformance.py) imports build_cases() instead.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

DEFAULT_SEED = 20240611
# IR version 8 is understood by every ONNX consumer that reads opsets 11..17; later opsets
# need the IR version that introduced them.
IR_VERSION = 8


def ir_version_for(opset: int) -> int:
  return 11 if opset >= 23 else 10 if opset >= 21 else 9 if opset >= 19 else IR_VERSION


@dataclasses.dataclass
class Case:
  name: str
  model: onnx.ModelProto
  inputs: dict[str, np.ndarray]  # graph input name -> float32 (or int64 indices) C-order array


class GraphBuilder:
  """Collects nodes, initializers and inputs; names every node uniquely."""

  def __init__(self, rng: np.random.Generator):
    self.rng = rng
    self.nodes: list[onnx.NodeProto] = []
    self.initializers: list[onnx.TensorProto] = []
    self.graph_inputs: list[onnx.ValueInfoProto] = []
    self.input_values: dict[str, np.ndarray] = {}
    self.counter = 0

  def fresh(self, prefix: str) -> str:
    self.counter += 1
    return f"{prefix}_{self.counter}"

  def input(self, shape, name: str | None = None) -> str:
    name = name or self.fresh("in")
    self.graph_inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
    self.input_values[name] = self.rng.standard_normal(shape).astype(np.float32)
    return name

  def const(self, array: np.ndarray, prefix: str = "w") -> str:
    name = self.fresh(prefix)
    self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
    return name

  def weight(self, shape, fan_in: int | None = None, prefix: str = "w") -> str:
    fan_in = fan_in or int(np.prod(shape[1:])) or 1
    w = self.rng.standard_normal(shape) * (1.0 / np.sqrt(fan_in))
    return self.const(w.astype(np.float32), prefix)

  def node(self, op: str, inputs: list[str], n_out: int = 1, out_names=None, **attrs):
    outs = out_names or [self.fresh(op.lower()) for _ in range(n_out)]
    self.nodes.append(helper.make_node(op, inputs, outs, name=self.fresh("node_" + op), **attrs))
    return outs[0] if n_out == 1 else outs

  def model(self, outputs: list[str], opset: int, graph_name: str) -> onnx.ModelProto:
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs]
    graph = helper.make_graph(self.nodes, graph_name, self.graph_inputs, outs, self.initializers)
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset)],
        ir_version=ir_version_for(opset),
        producer_name="tessera-conformance",
    )


# ---------------------------------------------------------------- single ops


def rand_opset(rng, lo=11, hi=17) -> int:
  return int(rng.integers(lo, hi + 1))


def gen_conv(rng, idx: int) -> Case:
  """Conv with groups (incl. depthwise), strides, asymmetric pads, dilations, auto_pad."""
  b = GraphBuilder(rng)
  kind = idx % 7
  n = int(rng.integers(1, 3))
  group = 1
  if kind == 1:  # grouped
    group = int(rng.choice([2, 3]))
  elif kind == 2:  # depthwise (multiplier 1 or 2)
    group = int(rng.integers(2, 9))
  cin_per_group = 1 if kind == 2 else int(rng.integers(1, 6))
  cin = cin_per_group * group
  cout = group * (int(rng.integers(1, 3)) if kind == 2 else int(rng.integers(1, 5)))
  kh, kw = int(rng.choice([1, 2, 3, 5])), int(rng.choice([1, 3, 4]))
  sh, sw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
  dh, dw = (int(rng.integers(1, 3)), int(rng.integers(1, 4))) if kind in (3, 6) else (1, 1)
  attrs = dict(kernel_shape=[kh, kw], strides=[sh, sw], dilations=[dh, dw], group=group)
  auto_pad = "NOTSET"
  if kind == 4:
    auto_pad = str(rng.choice(["SAME_UPPER", "SAME_LOWER", "VALID"]))
    attrs["auto_pad"] = auto_pad
  else:
    pads = [int(rng.integers(0, k)) for k in (kh, kw, kh, kw)]
    attrs["pads"] = pads
  eff_h, eff_w = dh * (kh - 1) + 1, dw * (kw - 1) + 1
  h = int(rng.integers(eff_h, eff_h + 12))
  w = int(rng.integers(eff_w, eff_w + 12))
  if kind == 5:  # 1x1 spatial edge
    kh = kw = 1
    attrs["kernel_shape"] = [1, 1]
    attrs["pads"] = [0, 0, 0, 0]
    h = w = 1
  x = b.input([n, cin, h, w])
  wt = b.weight([cout, cin_per_group, attrs["kernel_shape"][0], attrs["kernel_shape"][1]])
  inputs = [x, wt]
  if rng.random() < 0.7:
    inputs.append(b.const(rng.standard_normal(cout).astype(np.float32), "bias"))
  y = b.node("Conv", inputs, **attrs)
  name = f"conv_{idx}_g{group}_k{kh}x{kw}_s{sh}x{sw}_d{dh}x{dw}_{auto_pad.lower()}"
  return Case(name, b.model([y], rand_opset(rng), name), b.input_values)


def gen_gemm(rng, idx: int) -> Case:
  b = GraphBuilder(rng)
  m, k, n = (int(rng.integers(1, 20)) for _ in range(3))
  if idx == 0:
    m, k, n = 1, 1, 1
  trans_a, trans_b = int(rng.integers(0, 2)), int(rng.integers(0, 2))
  alpha = float(rng.choice([1.0, 0.5, -1.25]))
  beta = float(rng.choice([1.0, 0.75, -2.0]))
  a = b.input([k, m] if trans_a else [m, k])
  b_shape = [n, k] if trans_b else [k, n]
  bb = b.input(b_shape) if idx % 3 == 2 else b.weight(b_shape, fan_in=k)
  c_forms = [None, [], [n], [1, n], [m, 1], [m, n], [1, 1]]
  c_form = c_forms[idx % len(c_forms)]
  inputs = [a, bb]
  if c_form is not None:
    c = rng.standard_normal(c_form).astype(np.float32)
    inputs.append(b.const(c, "c"))
  y = b.node("Gemm", inputs, alpha=alpha, beta=beta, transA=trans_a, transB=trans_b)
  cdesc = "none" if c_form is None else "x".join(map(str, c_form)) or "scalar"
  name = f"gemm_{idx}_{m}x{k}x{n}_tA{trans_a}_tB{trans_b}_C{cdesc}"
  return Case(name, b.model([y], rand_opset(rng), name), b.input_values)


MATMUL_FORMS = [
    # (A shape, B shape, B is constant)
    ("2d", lambda r, m, k, n: ([m, k], [k, n]), False),
    ("2d_const", lambda r, m, k, n: ([m, k], [k, n]), True),
    ("batch_same", lambda r, m, k, n: ([3, m, k], [3, k, n]), False),
    ("batch_bcast_b2d", lambda r, m, k, n: ([2, 3, m, k], [k, n]), True),
    ("batch_bcast_1", lambda r, m, k, n: ([2, 1, m, k], [1, 3, k, n]), False),
    ("batch_bcast_rank", lambda r, m, k, n: ([m, k], [2, k, n]), False),
    ("a_1d", lambda r, m, k, n: ([k], [k, n]), False),
    ("b_1d", lambda r, m, k, n: ([2, m, k], [k]), False),
    ("a_1d_batch", lambda r, m, k, n: ([k], [2, k, n]), True),
    ("both_1d", lambda r, m, k, n: ([k], [k]), False),
]


def gen_matmul(rng, idx: int) -> Case:
  b = GraphBuilder(rng)
  form, shapes, b_const = MATMUL_FORMS[idx % len(MATMUL_FORMS)]
  m, k, n = (int(rng.integers(1, 17)) for _ in range(3))
  a_shape, b_shape = shapes(rng, m, k, n)
  a = b.input(a_shape)
  bb = b.weight(b_shape, fan_in=k) if b_const else b.input(b_shape)
  y = b.node("MatMul", [a, bb])
  name = f"matmul_{idx}_{form}_{m}x{k}x{n}"
  return Case(name, b.model([y], rand_opset(rng), name), b.input_values)


def rand_shape(rng, rank: int, hi: int = 9):
  return [int(rng.integers(1, hi)) for _ in range(rank)]


def gen_conv_transpose(rng, idx: int) -> Case:
  """ConvTranspose: groups, strides, dilations, explicit pads, output_padding, output_shape and
  SAME_UPPER/LOWER auto_pad (both split the padding, the former the smaller half first)."""
  b = GraphBuilder(rng)
  group = int(rng.integers(1, 3))
  cg, mg = int(rng.integers(1, 4)), int(rng.integers(1, 4))
  kh, kw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
  strides = [int(rng.integers(1, 4)), int(rng.integers(1, 4))]
  dilations = [int(rng.integers(1, 3)), int(rng.integers(1, 3))]
  h, w = int(rng.integers(1, 8)), int(rng.integers(1, 8))
  x = b.input([int(rng.integers(1, 3)), cg * group, h, w])
  inputs = [x, b.const(rng.standard_normal((cg * group, mg, kh, kw)).astype(np.float32))]
  if rng.random() < 0.6:
    inputs.append(b.const(rng.standard_normal(mg * group).astype(np.float32), "b"))
  attrs = dict(group=group, strides=strides, dilations=dilations, kernel_shape=[kh, kw])
  kind = idx % 4
  if kind == 0:
    attrs["pads"] = [int(rng.integers(0, kh)), int(rng.integers(0, kw)), 0, 0]
  elif kind == 1:
    # Below the stride: ONNX Runtime's rule (the spec allows stride or dilation).
    attrs["output_padding"] = [int(rng.integers(0, strides[0])), int(rng.integers(0, strides[1]))]
  elif kind == 2:
    natural = [(h - 1) * strides[0] + (kh - 1) * dilations[0] + 1,
               (w - 1) * strides[1] + (kw - 1) * dilations[1] + 1]
    attrs["output_shape"] = [max(1, n + int(rng.integers(-1, 2))) for n in natural]
  else:
    attrs["auto_pad"] = "SAME_UPPER" if rng.random() < 0.5 else "SAME_LOWER"
  y = b.node("ConvTranspose", inputs, **attrs)
  name = f"convtranspose_{idx}_{h}x{w}_k{kh}x{kw}_s{strides}_d{dilations}_g{group}_kind{kind}"
  return Case(name, b.model([y], rand_opset(rng, 11, 21), name), b.input_values)


def gen_1d(rng, idx: int) -> Case:
  """1-D Conv, ConvTranspose, MaxPool and AveragePool on [N, C, L] (audio and sequence models),
  which Tessera runs as their 2-D forms over [N, C, 1, L]: groups, strides, dilations, pads,
  SAME auto_pad, ceil_mode, count_include_pad."""
  b = GraphBuilder(rng)
  op = ["Conv", "ConvTranspose", "MaxPool", "AveragePool"][idx % 4]
  group = int(rng.integers(1, 3)) if op.startswith("Conv") else 1
  c, length, k = int(rng.integers(1, 4)) * group, int(rng.integers(3, 30)), int(rng.integers(1, 5))
  x = b.input([int(rng.integers(1, 3)), c, length])
  attrs = dict(kernel_shape=[k], strides=[int(rng.integers(1, 4))])
  if op != "AveragePool":
    attrs["dilations"] = [int(rng.integers(1, 3))]
  if idx % 8 >= 4 and op == "Conv" and attrs["dilations"] == [1]:  # ORT: no SAME with dilations
    attrs["auto_pad"] = "SAME_UPPER" if rng.random() < 0.5 else "SAME_LOWER"
  else:
    attrs["pads"] = [int(rng.integers(0, k)), int(rng.integers(0, k))]
  inputs = [x]
  if op == "Conv":
    m = int(rng.integers(1, 4)) * group
    inputs.append(b.const(rng.standard_normal((m, c // group, k)).astype(np.float32)))
    if rng.random() < 0.5:
      inputs.append(b.const(rng.standard_normal(m).astype(np.float32), "b"))
    attrs["group"] = group
  elif op == "ConvTranspose":
    inputs.append(b.const(rng.standard_normal((c, int(rng.integers(1, 4)), k)).astype(np.float32)))
    attrs["group"] = group
  else:
    attrs["ceil_mode"] = int(rng.integers(0, 2))
    if op == "AveragePool":
      attrs["count_include_pad"] = int(rng.integers(0, 2))
    # A window must start inside the input or its left padding (ONNX's rule with ceil_mode).
    attrs["pads"] = [min(p, k - 1) for p in attrs["pads"]]
  y = b.node(op, inputs, **attrs)
  name = f"{op.lower()}1d_{idx}_c{c}_l{length}_k{k}_{'_'.join(f'{a}{v}' for a, v in attrs.items())}"
  return Case(name.replace(" ", ""), b.model([y], rand_opset(rng, 11, 17), name), b.input_values)


def gen_unary(rng, idx: int, op: str) -> Case:
  b = GraphBuilder(rng)
  rank = [1, 2, 4, 3][idx % 4]
  shape = rand_shape(rng, rank, 13 if rank < 3 else 7)
  x = b.input(shape)
  y = b.node(op, [x])
  name = f"{op.lower()}_{idx}_{'x'.join(map(str, shape))}"
  return Case(name, b.model([y], rand_opset(rng), name), b.input_values)


def gen_clip(rng, idx: int) -> Case:
  """Clip min/max as initializers, Constant nodes, or absent; opset 11 and 13+."""
  b = GraphBuilder(rng)
  opset = 11 if idx % 2 == 0 else rand_opset(rng, 13, 17)
  shape = rand_shape(rng, 4, 7)
  x = b.input(shape)
  form = idx % 6 if idx < 6 else int(rng.integers(0, 6))
  lo, hi = float(rng.uniform(-1.0, 0.0)), float(rng.uniform(0.0, 1.0))
  if form == 3:
    lo, hi = 0.0, 6.0
  def scalar(v, as_node):
    if as_node:
      return b.node("Constant", [], value=numpy_helper.from_array(np.array(v, np.float32)))
    return b.const(np.array(v, np.float32), "bound")
  as_node = idx % 3 == 1
  if form == 0:
    inputs, desc = [x, scalar(lo, as_node), scalar(hi, as_node)], "minmax"
  elif form == 1:
    inputs, desc = [x, scalar(lo, as_node)], "min_only"
  elif form == 2:
    inputs, desc = [x, "", scalar(hi, as_node)], "max_only"
  elif form == 3:
    inputs, desc = [x, scalar(lo, as_node), scalar(hi, as_node)], "relu6"
  elif form == 4:
    inputs, desc = [x], "none"
  else:
    inputs, desc = [x, scalar(lo, as_node), scalar(lo, as_node)], "min_eq_max"
  y = b.node("Clip", inputs)
  name = f"clip_{idx}_op{opset}_{desc}{'_constnode' if as_node else ''}"
  return Case(name, b.model([y], opset, name), b.input_values)


BCAST_FORMS = [
    # name, lhs shape, rhs shape, which side is a constant ("" / "l" / "r")
    ("same", [2, 3, 5, 4], [2, 3, 5, 4], ""),
    ("scalar_const", [2, 3, 5, 4], [], "r"),
    ("chan_const", [2, 6, 5, 3], [6, 1, 1], "r"),
    ("last_dim", [2, 3, 5, 7], [7], ""),
    ("both_bcast", [2, 1, 5, 1], [1, 4, 1, 6], ""),
    ("rank_mismatch_lhs_small", [5, 1], [3, 1, 4], ""),
    ("const_lhs", [1, 4, 1, 1], [2, 4, 3, 5], "l"),
    ("one_elem", [1], [3, 4], ""),
    ("2d_row_col", [6, 1], [1, 7], "r"),
]


def gen_binary(rng, idx: int, op: str) -> Case:
  b = GraphBuilder(rng)
  form, ls, rs, const_side = BCAST_FORMS[idx % len(BCAST_FORMS)]
  def operand(shape, is_const):
    if is_const:
      return b.const(rng.standard_normal(shape).astype(np.float32), "k")
    return b.input(shape)
  lhs = operand(ls, const_side == "l")
  rhs = operand(rs, const_side == "r")
  y = b.node(op, [lhs, rhs])
  name = f"{op.lower()}_{idx}_{form}"
  return Case(name, b.model([y], rand_opset(rng), name), b.input_values)


def gen_pool(rng, idx: int, op: str) -> Case:
  b = GraphBuilder(rng)
  n, c = int(rng.integers(1, 3)), int(rng.integers(1, 6))
  kh, kw = int(rng.integers(1, 4)), int(rng.integers(2, 5))
  sh, sw = int(rng.integers(1, 4)), int(rng.integers(1, 3))
  attrs = dict(kernel_shape=[kh, kw], strides=[sh, sw])
  dh = dw = 1
  if op == "MaxPool" and idx % 3 == 1 and idx % 5 != 4:
    dh, dw = int(rng.integers(1, 3)), int(rng.integers(2, 4))
    attrs["dilations"] = [dh, dw]
  ceil_mode = idx % 2
  attrs["ceil_mode"] = ceil_mode
  if op == "AveragePool":
    attrs["count_include_pad"] = (idx // 2) % 2
  # auto_pad with dilations is left out: ONNX Runtime sizes that output wrongly (a 3x13 input,
  # kernel 2x4, strides 2, dilations 1x3, SAME_UPPER gives width 4; the spec and onnx.reference
  # give ceil(13/2) = 7), so it cannot serve as the reference there.
  if idx % 5 == 4 and "dilations" not in attrs:
    attrs["auto_pad"] = str(rng.choice(["SAME_UPPER", "SAME_LOWER", "VALID"]))
    pads = [0, 0, 0, 0]
  else:
    # Pads must be smaller than the kernel (ONNX Runtime rejects the rest).
    pads = [int(rng.integers(0, k)) for k in (kh, kw, kh, kw)]
    attrs["pads"] = pads
  eff_h, eff_w = dh * (kh - 1) + 1, dw * (kw - 1) + 1
  h, w = int(rng.integers(eff_h, eff_h + 10)), int(rng.integers(eff_w, eff_w + 10))
  if idx == 8:
    # ceil_mode where the last window would start in the right padding: such windows are
    # dropped (ONNX spec text of opset 22, ONNX Runtime, onnx.reference, PyTorch), so the
    # height is 3, not ceil((5 + 2 - 2) / 2) + 1 = 4.
    h, w = 5, 6
    attrs = dict(kernel_shape=[2, 2], strides=[2, 2], pads=[1, 0, 1, 1], ceil_mode=1)
    if op == "AveragePool":
      attrs["count_include_pad"] = 1
  x = b.input([n, c, h, w])
  y = b.node(op, [x], **attrs)
  desc = "_".join(f"{k}{''.join(map(str, v)) if isinstance(v, list) else v}" for k, v in attrs.items())
  name = f"{op.lower()}_{idx}_{h}x{w}_{desc}"
  # MaxPool's dilations/ceil_mode exist from opset 10; AveragePool's ceil_mode too.
  return Case(name, b.model([y], rand_opset(rng), name), b.input_values)


def gen_global_avg_pool(rng, idx: int) -> Case:
  b = GraphBuilder(rng)
  shape = [int(rng.integers(1, 3)), int(rng.integers(1, 9)), int(rng.integers(1, 14)),
           int(rng.integers(1, 14))]
  x = b.input(shape)
  y = b.node("GlobalAveragePool", [x])
  name = f"globalavgpool_{idx}_{'x'.join(map(str, shape))}"
  return Case(name, b.model([y], rand_opset(rng), name), b.input_values)


def gen_flatten(rng, idx: int) -> Case:
  b = GraphBuilder(rng)
  shape = rand_shape(rng, 4, 6)
  axis = [0, 1, 2, -1, -3, 4][idx % 6]
  x = b.input(shape)
  # Flatten alone is a pure copy; a Relu after it keeps a compute op in the graph too.
  f = b.node("Flatten", [x], axis=axis)
  y = b.node("Relu", [f]) if idx % 2 else f
  name = f"flatten_{idx}_axis{axis}"
  return Case(name, b.model([y], rand_opset(rng), name), b.input_values)


def gen_reshape(rng, idx: int) -> Case:
  b = GraphBuilder(rng)
  forms = [
      ([2, 3, 4, 5], [0, -1]),
      ([2, 3, 4, 5], [6, 20]),
      ([2, 3, 4, 5], [0, 0, -1]),
      ([3, 8], [2, -1, 4, 1]),
      ([1, 30], [-1]),
      ([2, 3, 4, 5], [0, 3, 2, -1]),
  ]
  in_shape, target = forms[idx % len(forms)]
  x = b.input(in_shape)
  shape_arr = np.array(target, np.int64)
  if idx % 2:
    s = b.node("Constant", [], value=numpy_helper.from_array(shape_arr))
  else:
    s = b.const(shape_arr, "shape")
  r = b.node("Reshape", [x, s])
  y = b.node("Sigmoid", [r]) if idx % 3 == 0 else r
  name = f"reshape_{idx}_{'x'.join(map(str, in_shape))}_to_{'_'.join(map(str, target))}"
  return Case(name, b.model([y], rand_opset(rng), name), b.input_values)


def gen_concat(rng, idx: int) -> Case:
  b = GraphBuilder(rng)
  rank = [4, 4, 2, 3, 4, 1][idx % 6]
  base = rand_shape(rng, rank, 6)
  axis = int(rng.integers(-rank, rank))
  count = int(rng.integers(2, 5))
  parts = []
  for i in range(count):
    shape = list(base)
    shape[axis] = int(rng.integers(1, 6))
    if i == 1 and idx % 2:
      parts.append(b.const(rng.standard_normal(shape).astype(np.float32), "part"))
    else:
      parts.append(b.input(shape))
  y = b.node("Concat", parts, axis=axis)
  name = f"concat_{idx}_rank{rank}_axis{axis}_n{count}"
  return Case(name, b.model([y], rand_opset(rng), name), b.input_values)


def gen_softmax(rng, idx: int) -> Case:
  """Opset 11 (coerce to 2-D at axis, default 1) vs opset 13+ (one axis, default -1)."""
  b = GraphBuilder(rng)
  opset = 11 if idx % 2 == 0 else rand_opset(rng, 13, 17)
  rank = [2, 3, 4, 4, 3, 1][idx % 6]
  shape = rand_shape(rng, rank, 7)
  x = b.input(shape)
  attrs = {}
  if idx % 4 != 0:
    attrs["axis"] = int(rng.integers(-rank, rank))
  # Scale the logits up so that the max-subtraction and exponent range matter.
  x3 = b.node("Mul", [x, b.const(np.array(4.0, np.float32), "scale")])
  y = b.node("Softmax", [x3], **attrs)
  name = f"softmax_{idx}_op{opset}_{'x'.join(map(str, shape))}_axis{attrs.get('axis', 'default')}"
  return Case(name, b.model([y], opset, name), b.input_values)


def gen_batchnorm(rng, idx: int) -> Case:
  b = GraphBuilder(rng)
  rank = [4, 4, 2, 3][idx % 4]
  c = int(rng.integers(1, 9))
  shape = [int(rng.integers(1, 3)), c] + rand_shape(rng, rank - 2, 9)
  x = b.input(shape)
  scale = b.const(rng.uniform(0.5, 2.0, c).astype(np.float32), "gamma")
  bias = b.const(rng.standard_normal(c).astype(np.float32), "beta")
  mean = b.const(rng.standard_normal(c).astype(np.float32), "mean")
  var = b.const(rng.uniform(0.1, 3.0, c).astype(np.float32), "var")
  eps = float(rng.choice([1e-5, 1e-3, 0.1]))
  y = b.node("BatchNormalization", [x, scale, bias, mean, var], epsilon=eps)
  name = f"batchnorm_{idx}_{'x'.join(map(str, shape))}_eps{eps:g}"
  return Case(name, b.model([y], rand_opset(rng), name), b.input_values)


def gen_constant(rng, idx: int) -> Case:
  b = GraphBuilder(rng)
  shape = rand_shape(rng, 3, 6)
  x = b.input(shape)
  if idx == 0:
    k = b.node("Constant", [], value=numpy_helper.from_array(
        rng.standard_normal(shape[1:]).astype(np.float32)))
    opset = rand_opset(rng)
  else:
    k = b.node("Constant", [], value_float=float(rng.uniform(-2, 2)))  # value_float: opset 12+
    opset = rand_opset(rng, 12, 17)
  y = b.node("Mul" if idx else "Add", [x, k])
  name = f"constant_{idx}_{'value' if idx == 0 else 'value_float'}"
  return Case(name, b.model([y], opset, name), b.input_values)


# ---------------------------------------------------------------- networks


def conv_bn(b: GraphBuilder, x, cin, cout, k, stride=1, group=1, pad=None):
  pad = k // 2 if pad is None else pad
  w = b.weight([cout, cin // group, k, k])
  y = b.node("Conv", [x, w], kernel_shape=[k, k], strides=[stride, stride],
             pads=[pad] * 4, group=group)
  r = b.rng
  bn = [b.const(r.uniform(0.5, 1.5, cout).astype(np.float32), "gamma"),
        b.const((0.1 * r.standard_normal(cout)).astype(np.float32), "beta"),
        b.const((0.1 * r.standard_normal(cout)).astype(np.float32), "mean"),
        b.const(r.uniform(0.5, 1.5, cout).astype(np.float32), "var")]
  return b.node("BatchNormalization", [y] + bn, epsilon=1e-5)


def relu6(b: GraphBuilder, x):
  return b.node("Clip", [x, b.const(np.array(0.0, np.float32), "zero"),
                         b.const(np.array(6.0, np.float32), "six")])


def net_conv_bn_relu(rng, batch):
  b = GraphBuilder(rng)
  x = b.input([batch, 3, 17, 16], name="image")
  y = b.node("Relu", [conv_bn(b, x, 3, 8, 3)])
  y = b.node("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
  y = b.node("Relu", [conv_bn(b, y, 8, 16, 3)])
  y = b.node("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
  y = b.node("Relu", [conv_bn(b, y, 16, 12, 1)], out_names=["features/out:0"])
  return b.model([y], 13, "conv_bn_relu"), b.input_values


def net_resnet(rng, batch):
  b = GraphBuilder(rng)
  x = b.input([batch, 3, 15, 15], name="data")
  x = b.node("Relu", [conv_bn(b, x, 3, 8, 3)])
  # Identity block.
  y = b.node("Relu", [conv_bn(b, x, 8, 8, 3)])
  y = conv_bn(b, y, 8, 8, 3)
  x = b.node("Relu", [b.node("Add", [y, x])])
  # Down-sampling block with a 1x1 projection shortcut.
  y = b.node("Relu", [conv_bn(b, x, 8, 16, 3, stride=2)])
  y = conv_bn(b, y, 16, 16, 3)
  shortcut = conv_bn(b, x, 8, 16, 1, stride=2)
  x = b.node("Relu", [b.node("Add", [shortcut, y])])
  # A second identity block on the smaller map.
  y = b.node("Relu", [conv_bn(b, x, 16, 16, 3)])
  y = conv_bn(b, y, 16, 16, 3)
  out = b.node("Relu", [b.node("Add", [x, y])], out_names=["resnet_out"])
  return b.model([out], 15, "resnet"), b.input_values


def net_resnet_wide(rng, batch):
  """3x3 stride-1 convs wide and large enough for cpu.conv_winograd (C >= 32,
  maps >= 28x28), an identity block with its residual Add fused into the conv."""
  b = GraphBuilder(rng)
  x = b.input([batch, 32, 29, 30], name="data")
  x = b.node("Relu", [conv_bn(b, x, 32, 32, 3)])
  y = b.node("Relu", [conv_bn(b, x, 32, 48, 3)])
  y = conv_bn(b, y, 48, 32, 3)
  out = b.node("Relu", [b.node("Add", [y, x])], out_names=["resnet_wide_out"])
  return b.model([out], 15, "resnet_wide"), b.input_values


def net_inception(rng, batch):
  b = GraphBuilder(rng)
  x = b.input([batch, 6, 13, 11], name="x")
  br1 = b.node("Relu", [conv_bn(b, x, 6, 4, 1)])
  br2 = b.node("Relu", [conv_bn(b, b.node("Relu", [conv_bn(b, x, 6, 5, 1)]), 5, 6, 3)])
  br3 = b.node("Relu", [conv_bn(b, b.node("Relu", [conv_bn(b, x, 6, 3, 1)]), 3, 4, 5)])
  pool = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
  br4 = b.node("Relu", [conv_bn(b, pool, 6, 3, 1)])
  cat = b.node("Concat", [br1, br2, br3, br4], axis=1)
  # A second stage reads the concatenation, so every branch feeds later tiles.
  y = b.node("Conv", [cat, b.weight([8, 17, 3, 3])], kernel_shape=[3, 3], strides=[2, 2],
             pads=[1, 1, 1, 1])
  y = b.node("AveragePool", [y], kernel_shape=[2, 2], strides=[1, 1], count_include_pad=0,
             pads=[0, 0, 1, 1])
  return b.model([y, cat], 12, "inception"), b.input_values


def net_mobilenet(rng, batch):
  b = GraphBuilder(rng)
  x = b.input([batch, 3, 18, 18], name="input.1")
  x = relu6(b, conv_bn(b, x, 3, 8, 3, stride=2))
  # Depthwise-separable block.
  x = relu6(b, conv_bn(b, x, 8, 8, 3, group=8))
  x = relu6(b, conv_bn(b, x, 8, 12, 1))
  # Inverted residual block: expand 1x1, depthwise 3x3, project 1x1, Add.
  y = relu6(b, conv_bn(b, x, 12, 24, 1))
  y = relu6(b, conv_bn(b, y, 24, 24, 3, group=24))
  y = conv_bn(b, y, 24, 12, 1)
  x = b.node("Add", [x, y])
  # Strided depthwise to a smaller map, then a pointwise conv.
  x = relu6(b, conv_bn(b, x, 12, 12, 3, stride=2, group=12))
  x = relu6(b, conv_bn(b, x, 12, 16, 1))
  return b.model([x], 13, "mobilenet"), b.input_values


def net_mobilenet_wide(rng, batch):
  # Inverted residual blocks whose expanded maps are 1 MiB per image (64
  # channels on 64x64): Tessera fuses each 1x1 expansion into its depthwise
  # conv (graph/fuse_expand_depthwise.hpp, cpu.conv_expand_depthwise).
  # The stem keeps the first block's input off the model input (NCHW).
  b = GraphBuilder(rng)
  x = b.input([batch, 3, 64, 64], name="input.1")
  x = relu6(b, conv_bn(b, x, 3, 8, 3))
  y = relu6(b, conv_bn(b, x, 8, 64, 1))
  y = relu6(b, conv_bn(b, y, 64, 64, 3, group=64))
  x = b.node("Add", [x, conv_bn(b, y, 64, 8, 1)])
  y = relu6(b, conv_bn(b, x, 8, 64, 1))
  y = relu6(b, conv_bn(b, y, 64, 64, 3, stride=2, group=64))
  x = conv_bn(b, y, 64, 16, 1)
  return b.model([x], 13, "mobilenet_wide"), b.input_values


def net_classifier_head(rng, batch):
  b = GraphBuilder(rng)
  x = b.input([batch, 4, 9, 7], name="feat")
  y = b.node("Relu", [conv_bn(b, x, 4, 16, 3)])
  y = b.node("GlobalAveragePool", [y])
  y = b.node("Flatten", [y], axis=1)
  y = b.node("Gemm", [y, b.weight([10, 16]), b.const(rng.standard_normal(10).astype(np.float32))],
             transB=1)
  y = b.node("Softmax", [y], axis=-1, out_names=["prob"])
  return b.model([y], 13, "classifier_head"), b.input_values


def net_mlp(rng, batch):
  b = GraphBuilder(rng)
  x = b.input([batch, 4, 8], name="tokens")
  y = b.node("Reshape", [x, b.const(np.array([0, -1], np.int64), "shape")])
  y = b.node("Relu", [b.node("Add", [b.node("MatMul", [y, b.weight([32, 48], 32)]),
                                      b.const(rng.standard_normal(48).astype(np.float32))])])
  y = b.node("Relu", [b.node("Add", [b.node("MatMul", [y, b.weight([48, 24], 48)]),
                                      b.const(rng.standard_normal(24).astype(np.float32))])])
  y = b.node("MatMul", [y, b.weight([24, 10], 24)])
  y = b.node("Reshape", [y, b.const(np.array([-1, 2, 5], np.int64), "shape")],
             out_names=["logits"])
  return b.model([y], 14, "mlp"), b.input_values


NETWORKS = {
    "net_a_conv_bn_relu_maxpool": net_conv_bn_relu,
    "net_b_resnet": net_resnet,
    "net_b2_resnet_wide": net_resnet_wide,
    "net_c_inception": net_inception,
    "net_d_mobilenet": net_mobilenet,
    "net_d2_mobilenet_wide": net_mobilenet_wide,
    "net_e_classifier_head": net_classifier_head,
    "net_f_mlp": net_mlp,
}

# (generator, number of random cases)
SINGLE_OPS = [
    (gen_conv, 14),
    (gen_gemm, 7),
    (gen_matmul, 10),
    (lambda r, i: gen_unary(r, i, "Relu"), 3),
    (lambda r, i: gen_unary(r, i, "Sigmoid"), 3),
    (gen_clip, 7),
    (lambda r, i: gen_binary(r, i, "Add"), 9),
    (lambda r, i: gen_binary(r, i, "Mul"), 9),
    (lambda r, i: gen_pool(r, i, "MaxPool"), 9),
    (lambda r, i: gen_pool(r, i, "AveragePool"), 9),
    (gen_global_avg_pool, 3),
    (gen_flatten, 4),
    (gen_reshape, 5),
    (gen_concat, 5),
    (gen_softmax, 8),
    (gen_batchnorm, 4),
    (gen_constant, 2),
    # Appended last, so that the cases above keep their seeds.
    (gen_conv_transpose, 12),
    (gen_1d, 16),
]


# ------------------------------------------------------ sparse weights (issue 6)
# MLPs whose weights are magnitude-pruned: 90% unstructured and 90% in 32x32
# blocks, so `tessera compile` picks cpu.gemm_sparse / cpu.matmul_sparse
# (tests/kernels_sparse/check_sparse_report.py checks that it does).


def prune_unstructured(w: np.ndarray, ratio: float) -> np.ndarray:
  """Zeroes the `ratio` fraction of w's elements with the smallest magnitude."""
  flat = np.abs(w).ravel()
  cut = np.sort(flat)[int(ratio * flat.size) - 1] if ratio > 0 else -1.0
  return np.where(np.abs(w) > cut, w, 0.0).astype(np.float32)


def prune_blocks(w: np.ndarray, ratio: float, block: int = 32) -> np.ndarray:
  """Zeroes the `ratio` fraction of block x block tiles of a 2-D w with the smallest L2 norm."""
  rows, cols = w.shape
  br, bc = -(-rows // block), -(-cols // block)
  norms = np.zeros((br, bc))
  for i in range(br):
    for j in range(bc):
      norms[i, j] = np.linalg.norm(w[i * block:(i + 1) * block, j * block:(j + 1) * block])
  keep = norms > np.sort(norms.ravel())[int(ratio * norms.size) - 1]
  mask = np.kron(keep, np.ones((block, block)))[:rows, :cols]
  return (w * mask).astype(np.float32)


def net_sparse_mlp(rng, batch):
  """Gemm (90% unstructured) -> Relu -> Gemm transB (90% 32x32 blocks) -> Relu -> MatMul
  (90% unstructured)."""
  b = GraphBuilder(rng)
  x = b.input([batch, 256], name="features")

  def weight(shape, fan_in):
    return (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)

  w1 = b.const(prune_unstructured(weight([256, 320], 256), 0.9), "w_unstructured")
  y = b.node("Gemm", [x, w1, b.const(rng.standard_normal(320).astype(np.float32), "bias")])
  y = b.node("Relu", [y])
  w2 = b.const(prune_blocks(weight([192, 320], 320), 0.9), "w_blocks")  # [N, K]: transB
  y = b.node("Gemm", [y, w2, b.const(rng.standard_normal(192).astype(np.float32), "bias")],
             transB=1, alpha=0.75)
  y = b.node("Relu", [y])
  w3 = b.const(prune_unstructured(weight([192, 64], 192), 0.9), "w_matmul")
  y = b.node("MatMul", [y, w3], out_names=["scores"])
  return b.model([y], 13, "sparse_mlp"), b.input_values


NETWORKS["net_g_sparse_mlp"] = net_sparse_mlp
# ------------------------------------------------------ end of sparse weights


import gen_transformer_models  # noqa: E402  (uses Case and GraphBuilder above)
import gen_detector_models  # noqa: E402
import gen_export_models  # noqa: E402


def single_op_cases(single_ops, seeds) -> list[Case]:
  """`count` cases of each (generator, count), each generator call seeded from `seeds`."""
  return [gen(np.random.default_rng(int(next(seeds))), i)
          for gen, count in single_ops for i in range(count)]


def build_cases(seed: int) -> list[Case]:
  """Every case, in a fixed order; each has its own generator seeded from `seed`."""
  cases: list[Case] = []
  root = np.random.SeedSequence(seed)
  children = iter(root.spawn(1000))
  for gen, count in SINGLE_OPS:
    for i in range(count):
      cases.append(gen(np.random.default_rng(next(children)), i))
  for name, net in NETWORKS.items():
    for batch in (1, 2):
      model, inputs = net(np.random.default_rng(next(children)), batch)
      cases.append(Case(f"{name}_n{batch}", model, inputs))
  cases += gen_transformer_models.build_cases(np.random.default_rng(next(children)))
  cases += gen_detector_models.build_cases(np.random.default_rng(next(children)))
  cases += gen_export_models.build_cases(np.random.default_rng(next(children)))
  names = [c.name for c in cases]
  assert len(names) == len(set(names)), "case names must be unique"
  return cases


def ort_reference(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """ONNX Runtime on the CPU with every graph optimization off (its fusions would shift the
  reference), returning {output name: array}."""
  import onnxruntime as ort

  opts = ort.SessionOptions()
  opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
  opts.intra_op_num_threads = 1
  opts.log_severity_level = 3  # its shape-mismatch warnings are the ceil_mode case below
  sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
  names = [o.name for o in sess.get_outputs()]
  return dict(zip(names, sess.run(names, inputs)))


def finalize(case: Case) -> dict[str, np.ndarray]:
  """Computes the reference, writes the output shapes into the graph, checks the model."""
  ref = ort_reference(case.model, case.inputs)
  for out in case.model.graph.output:
    value = ref[out.name]
    assert value.dtype == np.float32, (case.name, out.name, value.dtype)
    out.CopyFrom(helper.make_tensor_value_info(out.name, TensorProto.FLOAT, list(value.shape)))
  # No full_check: ONNX's own shape inference sizes a ceil_mode pool whose last window starts in
  # the right padding one larger than ONNX Runtime and onnx.reference do; we follow the latter.
  onnx.checker.check_model(case.model)
  return ref


def safe_file_name(name: str) -> str:
  """The CLI's rule for output files: every char outside [A-Za-z0-9_.-] becomes '_'."""
  return "".join(ch if (ch.isascii() and (ch.isalnum() or ch in "_.-")) else "_" for ch in name)


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  ap.add_argument("--out-dir", required=True)
  ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
  ap.add_argument("--only", default="", help="keep cases whose name contains this")
  args = ap.parse_args()
  print(f"seed = {args.seed}")
  os.makedirs(args.out_dir, exist_ok=True)
  for case in build_cases(args.seed):
    if args.only not in case.name:
      continue
    finalize(case)
    onnx.save(case.model, os.path.join(args.out_dir, case.name + ".onnx"))
    for name, value in case.inputs.items():
      np.save(os.path.join(args.out_dir, f"{case.name}.{safe_file_name(name)}.npy"), value)
    print(case.name)
  return 0


if __name__ == "__main__":
  sys.exit(main())
