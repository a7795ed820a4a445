"""Conformance cases for the transformer operators and two tiny transformers.

Per-op models over random shapes and attributes (Transpose, Gather, Sub, Div, Pow, Sqrt, Erf,
Tanh, Gelu, Where, Expand, ReduceMean and the other reductions, LogSoftmax, LayerNormalization,
RMSNormalization, Attention (opset 23), Slice, Unsqueeze/Squeeze, Cast,
batched MatMul, shape subgraphs folded at import), a 2-layer BERT encoder and a GPT-2 block,
built with onnx.helper in the structure torch.onnx.export emits (Shape/Gather/Unsqueeze/Concat
reshape targets, decomposed LayerNorm at opset 13, LayerNormalization at 17, Erf-GELU for BERT,
tanh-GELU and a Where causal mask for GPT-2). gen_models.build_cases() appends these cases.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import gen_models as gm


def shape_tag(shape) -> str:
  return "x".join(map(str, shape))


def int_input(b, shape, high: int, name: str | None = None) -> str:
  """An int64 graph input (token ids) with values in [0, high)."""
  name = name or b.fresh("ids")
  b.graph_inputs.append(helper.make_tensor_value_info(name, TensorProto.INT64, list(shape)))
  b.input_values[name] = b.rng.integers(0, high, shape).astype(np.int64)
  return name


def const(b, array: np.ndarray, prefix: str) -> str:
  """An initializer that keeps rank 0 (GraphBuilder.const's ascontiguousarray makes it 1-D)."""
  name = b.fresh(prefix)
  b.initializers.append(numpy_helper.from_array(np.array(array, copy=True), name))
  return name


def i64(b, values, prefix="k") -> str:
  return const(b, np.array(values, dtype=np.int64), prefix)


def f32(b, values, prefix="c") -> str:
  return const(b, np.array(values, dtype=np.float32), prefix)


def unsqueeze(b, x, axes, opset):
  if opset >= 13:
    return b.node("Unsqueeze", [x, i64(b, axes, "axes")])
  return b.node("Unsqueeze", [x], axes=axes)


def squeeze(b, x, axes, opset):
  if opset >= 13:
    return b.node("Squeeze", [x, i64(b, axes, "axes")])
  return b.node("Squeeze", [x], axes=axes)


def reduce_mean(b, x, axes, opset, keepdims=1):
  if opset >= 18:
    return b.node("ReduceMean", [x, i64(b, axes, "axes")], keepdims=keepdims)
  return b.node("ReduceMean", [x], axes=axes, keepdims=keepdims)


def case(b, name, outputs, opset):
  return gm.Case(name, b.model(outputs, opset, name), b.input_values)


# ---------------------------------------------------------------- single ops


def gen_transpose(rng, idx):
  b = gm.GraphBuilder(rng)
  rank = [2, 3, 4, 4][idx % 4]
  shape = gm.rand_shape(rng, rank, 8)
  x = b.input(shape)
  attrs = {} if idx == 0 else {"perm": [int(p) for p in rng.permutation(rank)]}
  y = b.node("Transpose", [x], **attrs)
  opset = gm.rand_opset(rng, 11, 21)
  return case(b, f"transpose_{idx}_{shape_tag(shape)}_{attrs.get('perm', 'rev')}", [y], opset)


def gen_gather(rng, idx):
  """Embedding lookup (int64 ids input), constant indices (scalar, 1-D, 2-D, negative) on an
  activation, and constant data with constant indices (folded)."""
  b = gm.GraphBuilder(rng)
  opset = gm.rand_opset(rng, 11, 21)
  kind = idx % 4
  if kind == 0:  # embedding: weight [vocab, hidden], ids [batch, seq]
    vocab, hidden = int(rng.integers(5, 40)), int(rng.integers(1, 24))
    ids_shape = [int(rng.integers(1, 3)), int(rng.integers(1, 12))]
    w = b.weight([vocab, hidden], fan_in=1)
    ids = int_input(b, ids_shape, vocab)
    y = b.node("Gather", [w, ids], axis=0)
    y = b.node("Mul", [y, f32(b, 1.5)])
    name = f"gather_{idx}_embedding_{vocab}x{hidden}_ids{shape_tag(ids_shape)}"
  elif kind == 3:  # constant data and indices: folded, then used
    data = rng.standard_normal((6, 5)).astype(np.float32)
    d = b.const(data, "table")
    g = b.node("Gather", [d, i64(b, [[1, -1], [0, 2]])], axis=0)
    x = b.input([2, 2, 5])
    y = b.node("Add", [x, g])
    name = f"gather_{idx}_folded"
  else:
    rank = int(rng.integers(2, 5))
    shape = gm.rand_shape(rng, rank, 7)
    axis = int(rng.integers(-rank, rank))
    n = shape[axis]
    if kind == 1:
      indices = np.array(int(rng.integers(-n, n)), dtype=np.int64)  # scalar: drops the axis
      idx_name = const(b, indices, "idx")
    else:
      indices = rng.integers(-n, n, size=gm.rand_shape(rng, int(rng.integers(1, 3)), 4))
      idx_name = const(b, indices.astype(np.int64), "idx")
    x = b.input(shape)
    y = b.node("Gather", [x, idx_name], axis=axis)
    name = f"gather_{idx}_{shape_tag(shape)}_axis{axis}_idx{shape_tag(indices.shape) or 'scalar'}"
  return case(b, name, [y], opset)


def gen_arith(rng, idx, op):
  """Sub/Div/Pow with broadcasting; operands keep Div and Pow away from NaN/inf."""
  b = gm.GraphBuilder(rng)
  form, sa, sb, side = gm.BCAST_FORMS[(idx * 2 + int(rng.integers(0, 2))) % len(gm.BCAST_FORMS)]
  b_const = side != ""
  x = b.input(sa)
  if op == "Pow":
    x = b.node("Add", [b.node("Mul", [x, x]), f32(b, 0.5)])  # positive base
    exponent = rng.choice([2.0, 3.0, 0.5, -1.5]) * np.ones(sb, np.float32)
    if b_const:
      y_in = b.const(exponent.astype(np.float32), "exp")
    else:
      y_in = b.node("Mul", [b.node("Tanh", [b.input(sb)]), f32(b, 2.0)])
    y = b.node("Pow", [x, y_in])
  elif op == "Div":
    divisor = (rng.uniform(0.5, 2.0, sb) * rng.choice([-1, 1], sb)).astype(np.float32)
    if b_const:
      d = b.const(divisor, "div")
    else:
      d = b.node("Add", [b.node("Mul", [b.input(sb), b.input(sb)]), f32(b, 0.5)])
    y = b.node("Div", [x, d] if idx % 2 == 0 else [d, x] if b_const else [x, d])
  else:
    other = b.const(rng.standard_normal(sb).astype(np.float32), "k") if b_const else b.input(sb)
    y = b.node("Sub", [x, other] if idx % 2 == 0 else [other, x])
  name = f"{op.lower()}_{idx}_{form}_{shape_tag(sa)}_{shape_tag(sb)}"
  return case(b, name, [y], gm.rand_opset(rng, 11, 21))


def gen_unary_math(rng, idx, op):
  b = gm.GraphBuilder(rng)
  rank = [1, 2, 3, 4][idx % 4]
  shape = gm.rand_shape(rng, rank, 9)
  x = b.input(shape)
  x = b.node("Mul", [x, f32(b, 2.5)])
  opset = gm.rand_opset(rng, 11, 21)
  attrs = {}
  if op == "Sqrt":
    x = b.node("Mul", [x, x])
  if op == "Gelu":
    opset = int(rng.integers(20, 22))
    if idx % 2:
      attrs["approximate"] = "tanh"
  y = b.node(op, [x], **attrs)
  name = f"{op.lower()}_{idx}_{shape_tag(shape)}{'_tanh' if attrs else ''}"
  return case(b, name, [y], opset)


def gen_where(rng, idx):
  """Constant bool condition (a causal-style mask), broadcast against X/Y."""
  b = gm.GraphBuilder(rng)
  s = int(rng.integers(1, 9))
  lead = gm.rand_shape(rng, int(rng.integers(0, 3)), 4)
  x = b.input(lead + [s, s])
  mask = np.tril(np.ones((s, s), dtype=bool)) if idx % 2 == 0 else rng.random((1, s)) < 0.5
  cond = b.const(mask, "mask")
  other = f32(b, -1e4) if idx % 3 != 2 else b.input([s])
  y = b.node("Where", [cond, x, other])
  name = f"where_{idx}_{shape_tag(lead + [s, s])}"
  return case(b, name, [y], gm.rand_opset(rng, 11, 21))


def gen_expand(rng, idx):
  b = gm.GraphBuilder(rng)
  base = gm.rand_shape(rng, int(rng.integers(2, 5)), 6)
  src = [d if rng.random() < 0.5 else 1 for d in base][int(rng.integers(0, 2)):]
  target = [1 if (rng.random() < 0.3 and i >= len(base) - len(src) and
                  src[i - (len(base) - len(src))] != 1) else d for i, d in enumerate(base)]
  x = b.input(src)
  y = b.node("Expand", [x, i64(b, target, "shape")])
  name = f"expand_{idx}_{shape_tag(src)}_to_{shape_tag(target)}"
  return case(b, name, [y], gm.rand_opset(rng, 11, 21))


def gen_reduce_mean(rng, idx):
  b = gm.GraphBuilder(rng)
  rank = int(rng.integers(1, 5))
  shape = gm.rand_shape(rng, rank, 9)
  opset = [13, 18, 11, 21][idx % 4]
  picked = rng.choice(rank, size=int(rng.integers(1, rank + 1)), replace=False)
  axes = [int(a) - rank if rng.random() < 0.3 else int(a) for a in sorted(picked)]
  keepdims = 1 if (idx % 3 != 1 or len(axes) == rank) else 0
  x = b.input(shape)
  y = reduce_mean(b, x, axes, opset, keepdims)
  name = f"reducemean_{idx}_op{opset}_{shape_tag(shape)}_axes{axes}_k{keepdims}"
  return case(b, name, [y], opset)


REDUCTIONS = ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare", "ReduceL1",
              "ReduceL2", "ReduceLogSum", "ReduceLogSumExp"]


def gen_reduction(rng, idx):
  """The reductions beside ReduceMean: axes as an attribute (opset 13; ReduceSum's an input from
  13) or an input (18+), negative axes, keepdims 0/1, and no axes at all (every axis)."""
  op = REDUCTIONS[idx % len(REDUCTIONS)]
  b = gm.GraphBuilder(rng)
  rank = int(rng.integers(1, 5))
  shape = gm.rand_shape(rng, rank, 7)
  opset = [13, 18, 21][idx % 3]
  x = b.input(shape)
  if op == "ReduceLogSum":  # a positive sum
    x = b.node("Add", [b.node("Abs", [x]), f32(b, 0.1)])
  if op == "ReduceProd":  # factors near 1
    x = b.node("Add", [b.node("Mul", [x, f32(b, 0.1)]), f32(b, 1.0)])
  picked = sorted(rng.choice(rank, size=int(rng.integers(1, rank + 1)), replace=False))
  axes = [] if idx % 5 == 4 else [int(a) - rank if rng.random() < 0.3 else int(a) for a in picked]
  keepdims = int(rng.integers(0, 2))
  axes_input = opset >= (13 if op == "ReduceSum" else 18)
  if not axes:
    y = b.node(op, [x], keepdims=keepdims)
  elif axes_input:
    y = b.node(op, [x, i64(b, axes, "axes")], keepdims=keepdims)
  else:
    y = b.node(op, [x], axes=axes, keepdims=keepdims)
  name = f"{op.lower()}_{idx}_op{opset}_{shape_tag(shape)}_axes{axes}_k{keepdims}"
  return case(b, name, [y], opset)


def gen_log_softmax(rng, idx):
  b = gm.GraphBuilder(rng)
  rank = int(rng.integers(1, 5))
  shape = gm.rand_shape(rng, rank, 9)
  opset = [11, 13][idx % 2]
  axis = int(rng.integers(-rank, rank))
  x = b.node("Mul", [b.input(shape), f32(b, 10.0)])  # logits whose softmax underflows
  y = b.node("LogSoftmax", [x], axis=axis)
  return case(b, f"logsoftmax_{idx}_op{opset}_{shape_tag(shape)}_axis{axis}", [y], opset)


def gen_rms_norm(rng, idx):
  b = gm.GraphBuilder(rng)
  rank = int(rng.integers(2, 5))
  shape = gm.rand_shape(rng, rank, 9)
  axis = int(rng.integers(-rank, rank)) if idx % 2 else -1
  x = b.node("Add", [b.input(shape), f32(b, 2.0)])
  scale = b.const(rng.uniform(0.5, 1.5, shape[axis:]).astype(np.float32), "gamma")
  y = b.node("RMSNormalization", [x, scale], axis=axis, epsilon=float(rng.choice([1e-5, 1e-3])))
  return case(b, f"rmsnorm_{idx}_{shape_tag(shape)}_axis{axis}", [y], 23)


def gen_attention(rng, idx):
  """ONNX Attention (opset 23): 4-D or 3-D (heads as attributes), MHA or GQA, causal or not, a
  float mask, a KV cache (past in, present out), a softcap; Tessera fuses the chain it emits."""
  b = gm.GraphBuilder(rng)
  batch, kv_heads = int(rng.integers(1, 3)), int(rng.choice([1, 2]))
  q_heads = kv_heads * int(rng.choice([1, 2, 3]))
  q_len, kv_len, head = int(rng.integers(1, 9)), int(rng.integers(1, 9)), int(rng.choice([4, 8]))
  three_d, causal = idx % 2 == 1, idx % 3 == 0
  past = int(rng.integers(1, 5)) if idx % 4 == 2 else 0
  if causal and not past:
    q_len = kv_len  # top-left and bottom-right causal masks agree only then
  attrs = {"is_causal": int(causal)}
  if idx % 5 == 3:
    attrs["softcap"] = 2.0
  if three_d:
    attrs.update(q_num_heads=q_heads, kv_num_heads=kv_heads)
    q = b.input([batch, q_len, q_heads * head])
    k = b.input([batch, kv_len, kv_heads * head])
    v = b.input([batch, kv_len, kv_heads * head])
  else:
    q = b.input([batch, q_heads, q_len, head])
    k = b.input([batch, kv_heads, kv_len, head])
    v = b.input([batch, kv_heads, kv_len, head])
  inputs = [q, k, v, b.input([q_len, past + kv_len]) if idx % 2 == 0 else ""]
  if past:
    inputs += [b.input([batch, kv_heads, past, head]), b.input([batch, kv_heads, past, head])]
  outs = [b.fresh("y")] + ([b.fresh("present_k"), b.fresh("present_v")] if past else [])
  b.node("Attention", inputs, n_out=len(outs), out_names=outs, **attrs)
  name = (f"attention_{idx}_{'3d' if three_d else '4d'}_q{q_heads}kv{kv_heads}_s{q_len}l{kv_len}"
          f"p{past}{'_causal' if causal else ''}")
  return case(b, name, outs, 23)


def gen_nan_guard(rng, idx):
  """Hugging Face's softmax NaN guard, Where(IsNaN(p), 0, p): a row of the additive mask is all
  -inf, so that row's softmax is NaN and the guard zeroes it."""
  b = gm.GraphBuilder(rng)
  rows, cols = int(rng.integers(2, 9)), int(rng.integers(2, 9))
  bias = np.zeros((rows, cols), np.float32)
  bias[int(rng.integers(0, rows))] = -np.inf
  p = b.node("Softmax", [b.node("Add", [b.input([rows, cols]), b.const(bias, "mask")])], axis=-1)
  y = b.node("Where", [b.node("IsNaN", [p]), f32(b, 0.0), p])
  return case(b, f"nan_guard_{idx}_{rows}x{cols}", [y], [13, 18, 20][idx % 3])


def gen_layer_norm(rng, idx):
  b = gm.GraphBuilder(rng)
  rank = int(rng.integers(2, 5))
  shape = gm.rand_shape(rng, rank, 9)
  axis = int(rng.integers(-rank, rank)) if idx % 2 else -1
  norm = shape[axis:]
  x = b.input(shape)
  x = b.node("Mul", [x, f32(b, 3.0)])
  scale = b.const(rng.uniform(0.5, 1.5, norm).astype(np.float32), "gamma")
  inputs = [x, scale]
  if idx % 3 != 2:
    inputs.append(b.const(rng.standard_normal(norm).astype(np.float32), "beta"))
  eps = float(rng.choice([1e-5, 1e-12, 1e-3]))
  y = b.node("LayerNormalization", inputs, axis=axis, epsilon=eps)
  name = f"layernorm_{idx}_{shape_tag(shape)}_axis{axis}"
  return case(b, name, [y], int(rng.integers(17, 22)))


def gen_slice(rng, idx):
  b = gm.GraphBuilder(rng)
  rank = int(rng.integers(1, 5))
  shape = gm.rand_shape(rng, rank, 10)
  opset = gm.rand_opset(rng, 11, 21)
  axes = [int(a) for a in rng.permutation(rank)[: int(rng.integers(1, rank + 1))]]
  starts, ends, steps = [], [], []
  for a in axes:
    n = shape[a]
    step = int(rng.choice([1, 1, 2, 3, -1, -2]))
    lo, hi = (int(v) for v in sorted(rng.integers(-n - 2, n + 3, size=2)))
    if step > 0:
      s, e = lo, hi
    else:
      s, e = hi, lo
    if idx % 5 == 0:
      e = 2**63 - 1 if step > 0 else -(2**63)  # "to the end", as exporters write it
    starts.append(s)
    ends.append(e)
    steps.append(step)
  # ONNX Runtime accepts empty results, Tessera does not: redraw until every dim is non-empty.
  ref = np.zeros(shape)
  sl = [slice(None)] * rank
  for a, s, e, t in zip(axes, starts, ends, steps):
    sl[a] = slice(s, e, t)
  if 0 in ref[tuple(sl)].shape:
    return gen_slice(rng, idx)
  x = b.input(shape)
  ins = [x, i64(b, starts), i64(b, ends)]
  if idx % 3 != 0 or any(t != 1 for t in steps) or axes != list(range(len(axes))):
    ins += [i64(b, [a - rank if rng.random() < 0.3 else a for a in axes]), i64(b, steps)]
  y = b.node("Slice", ins)
  name = f"slice_{idx}_{shape_tag(shape)}_axes{axes}"
  return case(b, name, [y], opset)


def gen_squeeze(rng, idx):
  b = gm.GraphBuilder(rng)
  opset = [11, 13, 17, 21][idx % 4]
  shape = gm.rand_shape(rng, int(rng.integers(1, 4)), 6)
  x = b.input(shape)
  u = unsqueeze(b, x, [0, -1] if idx % 2 else [1], opset)
  u = b.node("Relu", [u])
  y = squeeze(b, u, [0] if idx % 2 else [1], opset)
  name = f"squeeze_{idx}_op{opset}_{shape_tag(shape)}"
  return case(b, name, [y], opset)


def gen_cast(rng, idx):
  """Float-to-float Cast of an activation (identity) and Casts of constants (folded)."""
  b = gm.GraphBuilder(rng)
  shape = gm.rand_shape(rng, 3, 6)
  x = b.input(shape)
  y = b.node("Cast", [x], to=TensorProto.FLOAT)
  k = b.node("Cast", [i64(b, list(range(shape[-1])))], to=TensorProto.FLOAT)
  kb = b.node("Cast", [b.node("Cast", [f32(b, [0.0, 2.5, -1.0][: 1 + idx % 3])],
                              to=TensorProto.BOOL)], to=TensorProto.FLOAT)
  y = b.node("Add", [b.node("Mul", [y, k]), b.node("ReduceMean", [kb], axes=[0], keepdims=1)])
  return case(b, f"cast_{idx}_{shape_tag(shape)}", [y], gm.rand_opset(rng, 13, 17))


def gen_shape_subgraph(rng, idx):
  """Reshape targets computed the way PyTorch exports them: Shape -> Gather -> Unsqueeze ->
  Concat -> Reshape, plus ConstantOfShape, Range, Equal/Where and integer arithmetic."""
  b = gm.GraphBuilder(rng)
  opset = [13, 11, 17, 21][idx % 4]
  n, s, h = int(rng.integers(1, 3)), int(rng.integers(1, 9)), 2 * int(rng.integers(1, 5))
  x = b.input([n, s, h])
  shp = b.node("Shape", [x])
  d0 = unsqueeze(b, b.node("Gather", [shp, i64(b, 0)], axis=0), [0], opset)
  d1 = unsqueeze(b, b.node("Gather", [shp, i64(b, 1)], axis=0), [0], opset)
  half = b.node("Div", [b.node("Gather", [shp, i64(b, 2)], axis=0), i64(b, 2)])
  d3 = unsqueeze(b, half, [0], opset)
  target = b.node("Concat", [d0, d1, i64(b, [2]), d3], axis=0)
  # Equal/Where as exporters emit for -1 handling: where(target == 0, shape, target).
  target = b.node("Where", [b.node("Equal", [target, i64(b, [0, 0, 0, 0])]),
                            i64(b, [1, 1, 1, 1]), target])
  y = b.node("Reshape", [x, target])
  y = b.node("Transpose", [y], perm=[0, 2, 1, 3])
  # Positions from Range, as float via Cast, added per token.
  pos = b.node("Range", [i64(b, 0), b.node("Gather", [shp, i64(b, 1)], axis=0), i64(b, 1)])
  pos = b.node("Cast", [pos], to=TensorProto.FLOAT)
  pos = b.node("Reshape", [pos, i64(b, [1, 1, s, 1])])
  zeros = b.node("ConstantOfShape", [b.node("Shape", [y])],
                 value=numpy_helper.from_array(np.array([0.5], np.float32)))
  y = b.node("Add", [b.node("Add", [y, pos]), zeros])
  return case(b, f"shapes_{idx}_op{opset}_{n}x{s}x{h}", [y], opset)


def gen_batched_matmul(rng, idx):
  """Attention-shaped batched MatMuls: [n, heads, s, d] x [n, heads, d, s] and broadcasting."""
  b = gm.GraphBuilder(rng)
  n, heads, s, d = (int(rng.integers(1, 3)), int(rng.integers(1, 5)), int(rng.integers(1, 10)),
                    int(rng.integers(1, 9)))
  q = b.input([n, heads, s, d])
  if idx % 2:
    k = b.weight([heads, d, s], fan_in=d)  # broadcast over the batch
  else:
    k = b.node("Transpose", [b.input([n, heads, s, d])], perm=[0, 1, 3, 2])
  y = b.node("MatMul", [q, k])
  y = b.node("Softmax", [y], axis=-1)
  y = b.node("MatMul", [y, b.input([n, heads, s, d])])
  return case(b, f"attention_matmul_{idx}_{n}x{heads}x{s}x{d}", [y], gm.rand_opset(rng, 13, 21))


def gen_fusion_pattern(rng, idx):
  """The exporter forms the compiler fuses (issue 5), one per case, each with its operand orders:
  Linear with bias [N] or [1, 1, N] on either side of the Add; erf GELU as torch writes it
  (0.5 * x) * (1 + erf(x * 0.70710677)); tanh GELU with x * x * x; LayerNorm with Mul(d, d) and
  commuted Mul/Add; and near misses that must stay unfused but still compute the same."""
  b = gm.GraphBuilder(rng)
  n, s, h = int(rng.integers(1, 3)), int(rng.integers(1, 8)), 4 * int(rng.integers(1, 6))
  x = b.input([n, s, h])
  w = b.weight([h, 2 * h], fan_in=h)
  bias = (0.1 * rng.standard_normal(2 * h)).astype(np.float32)
  kind = idx % 6
  if kind == 0:  # bias [1, 1, N] on the left, then a Relu fused after it
    y = b.node("Add", [b.const(bias.reshape(1, 1, -1), "bias"), b.node("MatMul", [x, w])])
    y = b.node("Relu", [y])
  elif kind == 1:  # torch's erf GELU after a Linear
    y = b.node("Add", [b.node("MatMul", [x, w]), b.const(bias, "bias")])
    e = b.node("Erf", [b.node("Mul", [y, f32(b, 0.70710677)])])
    y = b.node("Mul", [b.node("Mul", [f32(b, 0.5), y]), b.node("Add", [f32(b, 1.0), e])])
  elif kind == 2:  # tanh GELU with x * x * x, factors grouped as x * (0.5 * (1 + tanh))
    y = b.node("Add", [b.node("MatMul", [x, w]), b.const(bias, "bias")])
    cube = b.node("Mul", [b.node("Mul", [y, y]), y])
    inner = b.node("Add", [b.node("Mul", [f32(b, 0.044715), cube]), y])
    t = b.node("Tanh", [b.node("Mul", [f32(b, 0.7978845608), inner])])
    y = b.node("Mul", [y, b.node("Mul", [f32(b, 0.5), b.node("Add", [t, f32(b, 1.0)])])])
  elif kind == 3:  # LayerNorm with Mul(d, d), commuted scale and shift, gamma [1, 1, H]
    mean = reduce_mean(b, x, [-1], 13)
    d = b.node("Sub", [x, mean])
    var = reduce_mean(b, b.node("Mul", [d, d]), [-1], 13)
    sd = b.node("Sqrt", [b.node("Add", [f32(b, 1e-5), var])])
    gamma = b.const(rng.uniform(0.5, 1.5, (1, 1, h)).astype(np.float32), "ln_g")
    beta = b.const((0.1 * rng.standard_normal(h)).astype(np.float32), "ln_b")
    y = b.node("Add", [beta, b.node("Mul", [gamma, b.node("Div", [d, sd])])])
  elif kind == 4:  # near miss: the MatMul output is also read by a second branch
    mm = b.node("MatMul", [x, w])
    y = b.node("Add", [b.node("Add", [mm, b.const(bias, "bias")]), b.node("Sigmoid", [mm])])
  else:  # near miss: a GELU-like chain with 0.6 instead of 0.5, and a per-row addend
    y = b.node("Add", [b.node("MatMul", [x, w]), b.const(bias[:s].reshape(s, 1), "rows")])
    e = b.node("Erf", [b.node("Div", [y, f32(b, 1.4142135)])])
    y = b.node("Mul", [b.node("Mul", [y, b.node("Add", [e, f32(b, 1.0)])]), f32(b, 0.6)])
  opset = 13 if kind == 3 else gm.rand_opset(rng, 13, 21)
  return case(b, f"fusion_{idx}_{n}x{s}x{h}", [y], opset)


# ---------------------------------------------------------------- transformers


def layer_norm(b, x, hidden, opset, eps=1e-12):
  gamma = b.const(b.rng.uniform(0.8, 1.2, hidden).astype(np.float32), "ln_g")
  beta = b.const((0.1 * b.rng.standard_normal(hidden)).astype(np.float32), "ln_b")
  if opset >= 17:
    return b.node("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=eps)
  # PyTorch's decomposition before opset 17.
  mean = reduce_mean(b, x, [-1], opset)
  centred = b.node("Sub", [x, mean])
  var = reduce_mean(b, b.node("Pow", [centred, f32(b, 2.0)]), [-1], opset)
  std = b.node("Sqrt", [b.node("Add", [var, f32(b, eps)])])
  return b.node("Add", [b.node("Mul", [b.node("Div", [centred, std]), gamma]), beta])


def linear(b, x, fan_in, fan_out):
  w = b.weight([fan_in, fan_out], fan_in=fan_in)
  bias = b.const((0.02 * b.rng.standard_normal(fan_out)).astype(np.float32), "bias")
  return b.node("Add", [b.node("MatMul", [x, w]), bias])


def split_heads(b, x, heads, head_dim, opset):
  """[n, s, hidden] -> [n, heads, s, head_dim], the target built from Shape like PyTorch."""
  shp = b.node("Shape", [x])
  n = unsqueeze(b, b.node("Gather", [shp, i64(b, 0)], axis=0), [0], opset)
  s = unsqueeze(b, b.node("Gather", [shp, i64(b, 1)], axis=0), [0], opset)
  target = b.node("Concat", [n, s, i64(b, [heads]), i64(b, [head_dim])], axis=0)
  return b.node("Transpose", [b.node("Reshape", [x, target])], perm=[0, 2, 1, 3])


def merge_heads(b, x, hidden):
  y = b.node("Transpose", [x], perm=[0, 2, 1, 3])
  return b.node("Reshape", [y, i64(b, [0, 0, hidden])])


def gelu_erf(b, x):
  inner = b.node("Add", [b.node("Erf", [b.node("Div", [x, f32(b, 1.4142135)])]), f32(b, 1.0)])
  return b.node("Mul", [b.node("Mul", [x, inner]), f32(b, 0.5)])


def gelu_tanh(b, x):
  cube = b.node("Pow", [x, f32(b, 3.0)])
  inner = b.node("Add", [x, b.node("Mul", [cube, f32(b, 0.044715)])])
  t = b.node("Tanh", [b.node("Mul", [inner, f32(b, 0.7978845608)])])
  return b.node("Mul", [b.node("Mul", [x, f32(b, 0.5)]), b.node("Add", [t, f32(b, 1.0)])])


def bert_encoder(rng, opset, batch=1, seq=16, hidden=64, heads=4, layers=2, vocab=50):
  b = gm.GraphBuilder(rng)
  head_dim = hidden // heads
  ids = int_input(b, [batch, seq], vocab, "input_ids")
  word = b.node("Gather", [b.weight([vocab, hidden], fan_in=1), ids], axis=0)
  # position_ids is a buffer: Gather of constants, folded at import.
  pos_table = b.weight([seq + 4, hidden], fan_in=1)
  positions = unsqueeze(b, b.node("Range", [i64(b, 0), i64(b, seq), i64(b, 1)]), [0], opset)
  pos = b.node("Gather", [pos_table, positions], axis=0)
  token_type = b.node("Gather", [b.weight([2, hidden], fan_in=1),
                                 b.node("ConstantOfShape", [i64(b, [batch, seq])],
                                        value=numpy_helper.from_array(np.array([0], np.int64)))],
                      axis=0)
  x = layer_norm(b, b.node("Add", [b.node("Add", [word, token_type]), pos]), hidden, opset)
  # The additive attention mask HF builds from an all-ones mask: folded at import.
  mask = b.node("Cast", [unsqueeze(b, unsqueeze(b, b.node("ConstantOfShape", [
      i64(b, [batch, seq])], value=numpy_helper.from_array(np.array([1], np.int64))), [1], opset),
      [2], opset)], to=TensorProto.FLOAT)
  mask = b.node("Mul", [b.node("Sub", [f32(b, 1.0), mask]), f32(b, -3.4028234663852886e38)])
  for _ in range(layers):
    q = split_heads(b, linear(b, x, hidden, hidden), heads, head_dim, opset)
    k = split_heads(b, linear(b, x, hidden, hidden), heads, head_dim, opset)
    v = split_heads(b, linear(b, x, hidden, hidden), heads, head_dim, opset)
    scores = b.node("MatMul", [q, b.node("Transpose", [k], perm=[0, 1, 3, 2])])
    scores = b.node("Add", [b.node("Div", [scores, f32(b, float(np.sqrt(head_dim)))]), mask])
    context = merge_heads(b, b.node("MatMul", [b.node("Softmax", [scores], axis=-1), v]), hidden)
    x = layer_norm(b, b.node("Add", [linear(b, context, hidden, hidden), x]), hidden, opset)
    ffn = linear(b, gelu_erf(b, linear(b, x, hidden, 4 * hidden)), 4 * hidden, hidden)
    x = layer_norm(b, b.node("Add", [ffn, x]), hidden, opset)
  # The pooler reads the first token: Gather with a constant scalar index.
  first = b.node("Gather", [x, i64(b, 0)], axis=1)
  pooled = b.node("Tanh", [linear(b, first, hidden, hidden)])
  name = f"bert_tiny_op{opset}_n{batch}"
  return gm.Case(name, b.model([x, pooled], opset, name), b.input_values)


def gpt2_block(rng, opset, batch=1, seq=16, hidden=64, heads=4, vocab=50, max_positions=32):
  b = gm.GraphBuilder(rng)
  head_dim = hidden // heads
  ids = int_input(b, [batch, seq], vocab, "input_ids")
  wte = b.weight([vocab, hidden], fan_in=1)
  x = b.node("Gather", [wte, ids], axis=0)
  positions = b.node("Range", [i64(b, 0), i64(b, seq), i64(b, 1)])
  x = b.node("Add", [x, b.node("Gather", [b.weight([max_positions, hidden], fan_in=1),
                                          positions], axis=0)])
  # The causal mask buffer [1, 1, P, P] (bool), sliced to the sequence like HF GPT-2.
  bias = b.const(np.tril(np.ones((max_positions, max_positions), bool))[None, None], "attn_bias")
  causal = b.node("Slice", [bias, i64(b, [0, 0]), i64(b, [seq, seq]), i64(b, [2, 3])])
  h = layer_norm(b, x, hidden, opset, eps=1e-5)
  qkv = linear(b, h, hidden, 3 * hidden)
  parts = []
  for i in range(3):
    part = b.node("Slice", [qkv, i64(b, [i * hidden]), i64(b, [(i + 1) * hidden]), i64(b, [2])])
    parts.append(split_heads(b, part, heads, head_dim, opset))
  q, k, v = parts
  scores = b.node("MatMul", [q, b.node("Transpose", [k], perm=[0, 1, 3, 2])])
  scores = b.node("Div", [scores, f32(b, float(np.sqrt(head_dim)))])
  scores = b.node("Where", [causal, scores, f32(b, -3.4028234663852886e38)])
  context = merge_heads(b, b.node("MatMul", [b.node("Softmax", [scores], axis=-1), v]), hidden)
  x = b.node("Add", [x, linear(b, context, hidden, hidden)])
  h = layer_norm(b, x, hidden, opset, eps=1e-5)
  x = b.node("Add", [x, linear(b, gelu_tanh(b, linear(b, h, hidden, 4 * hidden)), 4 * hidden,
                               hidden)])
  x = layer_norm(b, x, hidden, opset, eps=1e-5)
  logits = b.node("MatMul", [x, b.node("Transpose", [wte], perm=[1, 0])])
  name = f"gpt2_tiny_op{opset}_n{batch}"
  return gm.Case(name, b.model([logits], opset, name), b.input_values)


def gen_runtime_mask(rng, idx):
  """An attention whose additive mask comes from an int64 attention_mask input at run time, in
  the forms exporters write: Hugging Face 4.x's (1 - float(mask)) * min (idx 0); transformers
  5's legacy export, Cast to bool, Flatten, Gather, Reshape, And, Expand, Where (1); the dynamo
  export's GatherND and And (2); Not, Or and Xor with constants, -inf where masked, so fully
  masked rows give NaN that the softmax guard zeroes (3). Forms 1-3 keep the guard
  Where(IsNaN(p), 0, p) between the softmax and P·V. A second output casts the bool mask back to
  float."""
  b = gm.GraphBuilder(rng)
  form = idx % 4
  batch, heads, seq, head = int(rng.integers(1, 3)), int(rng.integers(1, 4)), int(rng.integers(
      3, 12)), int(rng.integers(2, 9))
  mask = int_input(b, [batch, seq], 2, "attention_mask")
  if form == 3:  # the first sample all padding: its rows mask every column (unless flipped)
    b.input_values[mask][0] = 0
  minimum = -3.4028234663852886e38
  if form == 0:
    m = b.node("Cast", [unsqueeze(b, mask, [1, 2], 17)], to=TensorProto.FLOAT)
    additive = b.node("Mul", [b.node("Sub", [f32(b, 1.0), m]), f32(b, minimum)])
    keep = b.node("Cast", [mask], to=TensorProto.BOOL)
  else:
    keep = b.node("Cast", [mask], to=TensorProto.BOOL)
    if form == 1:
      flat = b.node("Flatten", [keep], axis=1)
      rows = b.node("Gather", [flat, i64(b, list(range(batch)))], axis=0)
      keep = b.node("Reshape", [rows, i64(b, [batch, 1, 1, seq])])
      keep = b.node("And", [const(b, np.ones((1, 1, seq, 1), bool), "all"), keep])
      keep = b.node("Expand", [keep, i64(b, [batch, 1, seq, seq])])
    elif form == 2:
      tuples = np.array([[[[[n, j] for j in range(seq)]]] for n in range(batch)], np.int64)
      keep = b.node("GatherND", [keep, const(b, tuples, "tuples")])
      keep = b.node("And", [const(b, rng.random((seq, 1)) < 0.8, "rows"), keep])
    else:
      masked = b.node("Not", [unsqueeze(b, keep, [1, 2], 17)])
      masked = b.node("Or", [masked, const(b, rng.random((seq, seq)) < 0.1, "extra")])
      masked = b.node("Xor", [masked, const(b, rng.random((seq, 1)) < 0.2, "flip")])
      keep = b.node("Not", [masked])
    fill = float("-inf") if form == 3 else minimum
    additive = b.node("Where", [keep, f32(b, 0.0), f32(b, fill)])
  q = b.input([batch, heads, seq, head])
  kt = b.input([batch, heads, head, seq])
  v = b.input([batch, heads, seq, head])
  scores = b.node("Add", [b.node("Mul", [b.node("MatMul", [q, kt]), f32(b, 0.5)]), additive])
  p = b.node("Softmax", [scores], axis=-1)
  if form != 0:
    p = b.node("Where", [b.node("IsNaN", [p]), f32(b, 0.0), p])
  y = b.node("MatMul", [p, v])
  keep_float = b.node("Cast", [keep], to=TensorProto.FLOAT)
  return case(b, f"runtime_mask_{idx}_form{form}_n{batch}h{heads}s{seq}", [y, keep_float], 18)


def gen_runtime_compare(rng, idx):
  """A comparison of run-time tensors (an input with a broadcast input or a constant, values on a
  coarse grid so that ties occur; one NaN in X, where every relation is false) as a Where
  condition, and as float."""
  b = gm.GraphBuilder(rng)
  op = ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"][idx % 5]
  shape = gm.rand_shape(rng, int(rng.integers(1, 5)), 7)
  other = [d if rng.random() < 0.5 else 1 for d in shape[int(rng.integers(0, len(shape))):]]
  x = b.input(shape)
  b.input_values[x] = np.round(b.input_values[x] * 2) / 2
  b.input_values[x].flat[0] = np.nan
  if idx % 2:
    y = b.input(other)
    b.input_values[y] = np.round(b.input_values[y] * 2) / 2
  else:
    y = f32(b, np.round(rng.standard_normal(other) * 2).astype(np.float32) / 2)
  condition = b.node(op, [x, y])
  chosen = b.node("Where", [condition, f32(b, 1.5), b.node("Neg", [y])])
  as_float = b.node("Cast", [condition], to=TensorProto.FLOAT)
  # X to bool and back: zeros false, NaN and everything else true.
  nonzero = b.node("Cast", [b.node("Cast", [x], to=TensorProto.BOOL)], to=TensorProto.FLOAT)
  name = f"runtime_compare_{idx}_{op}_{shape_tag(shape)}"
  return case(b, name, [chosen, as_float, nonzero], int(rng.choice([13, 17, 19])))


def gen_int_arithmetic(rng, idx):
  """Integer arithmetic on int64 token ids at run time, ending in Gather indices: RoBERTa's
  position ids, CumSum(ids != pad) * mask + pad (idx % 3 == 0); ids shifted and clamped with
  Where, Sub, Max, Min and Greater (1); a view of the ids compared and gathered with, and
  Slice + Add (2)."""
  b = gm.GraphBuilder(rng)
  batch, seq, vocab, pad = int(rng.integers(1, 3)), int(rng.integers(3, 12)), 40, 1
  ids = int_input(b, [batch, seq], vocab, "input_ids")
  b.input_values[ids][:, seq - int(rng.integers(0, seq)):] = pad
  form = idx % 3
  table = b.weight([vocab + pad + 1, 8], fan_in=1)
  if form == 0:
    mask = b.node("Cast", [b.node("Not", [b.node("Equal", [ids, i64(b, pad)])])],
                  to=TensorProto.INT32)
    running = b.node("CumSum", [mask, const(b, np.array(1, np.int32), "axis")])
    pos = b.node("Add", [b.node("Cast", [b.node("Mul", [running, mask])], to=TensorProto.INT64),
                         i64(b, pad)])
    extra = b.node("Cast", [pos], to=TensorProto.FLOAT)
  elif form == 1:
    shifted = b.node("Sub", [ids, i64(b, 20)])
    pos = b.node("Where", [b.node("Greater", [ids, i64(b, 20)]), shifted,
                           b.node("Max", [ids, i64(b, 3)])])
    pos = b.node("Min", [pos, i64(b, vocab - 1)])
    extra = b.node("Cast", [b.node("Less", [pos, i64(b, 10)])], to=TensorProto.FLOAT)
  else:
    view = unsqueeze(b, ids, [2], 17)
    extra = b.node("Cast", [b.node("Equal", [view, i64(b, pad)])], to=TensorProto.FLOAT)
    pos = b.node("Add", [b.node("Slice", [ids, i64(b, [1]), i64(b, [seq]), i64(b, [1])]),
                         i64(b, 1)])
  y = b.node("Gather", [table, pos], axis=0)
  outputs = [y, extra]
  if form == 2:  # the view itself as Gather indices
    outputs.append(b.node("Gather", [table, view], axis=0))
  return case(b, f"int_arithmetic_{idx}_form{form}_n{batch}s{seq}", outputs, 17)


def gen_rms_decomposed(rng, idx):
  """Hugging Face's RMSNorm as exported (Llama, T5): x * 1 / Sqrt(ReduceMean(x^2) + eps) * w, or
  with Reciprocal; x is also read by a residual Add. Tessera fuses it into RMSNormalization."""
  b = gm.GraphBuilder(rng)
  shape = [int(rng.integers(1, 3)), int(rng.integers(1, 9)), int(rng.choice([8, 33, 64]))]
  x = b.node("Relu", [b.input(shape)])
  mean = b.node("ReduceMean", [b.node("Pow", [x, f32(b, 2.0)])], axes=[-1], keepdims=1)
  sd = b.node("Sqrt", [b.node("Add", [mean, f32(b, 1e-6)])])
  r = b.node("Reciprocal", [sd]) if idx % 2 else b.node("Div", [f32(b, 1.0), sd])
  y = b.node("Mul", [b.node("Mul", [x, r]), b.const(rng.uniform(0.5, 1.5, shape[-1]).astype(
      np.float32), "w")])
  return case(b, f"rms_decomposed_{idx}_{shape_tag(shape)}", [b.node("Add", [x, y])], 17)


SINGLE_OPS = [
    (gen_transpose, 4),
    (gen_gather, 8),
    (lambda r, i: gen_arith(r, i, "Sub"), 4),
    (lambda r, i: gen_arith(r, i, "Div"), 5),
    (lambda r, i: gen_arith(r, i, "Pow"), 5),
    (lambda r, i: gen_unary_math(r, i, "Sqrt"), 3),
    (lambda r, i: gen_unary_math(r, i, "Erf"), 3),
    (lambda r, i: gen_unary_math(r, i, "Tanh"), 3),
    (lambda r, i: gen_unary_math(r, i, "Gelu"), 4),
    (gen_where, 4),
    (gen_expand, 5),
    (gen_reduce_mean, 8),
    (gen_reduction, 18),
    (gen_log_softmax, 4),
    (gen_rms_norm, 4),
    (gen_attention, 12),
    (gen_layer_norm, 6),
    (gen_slice, 10),
    (gen_squeeze, 4),
    (gen_cast, 3),
    (gen_shape_subgraph, 4),
    (gen_batched_matmul, 4),
    (gen_fusion_pattern, 6),
    (gen_nan_guard, 3),
    (gen_runtime_mask, 8),
    (gen_runtime_compare, 10),
    (gen_int_arithmetic, 6),
    (gen_rms_decomposed, 4),
]


def build_cases(rng) -> list:
  seeds = iter(rng.integers(0, 2**32, size=1000))
  cases = gm.single_op_cases(SINGLE_OPS, seeds)
  for opset in (13, 17):
    cases.append(bert_encoder(np.random.default_rng(int(next(seeds))), opset))
    cases.append(gpt2_block(np.random.default_rng(int(next(seeds))), opset))
  cases.append(bert_encoder(np.random.default_rng(int(next(seeds))), 17, batch=2))
  return cases
