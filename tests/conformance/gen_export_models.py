"""Conformance cases for patterns PyTorch's exporters emit that the importer rewrites.

- Squeeze-and-excitation (EfficientNet, MobileNetV3): x.mean((2, 3), keepdim=True) exported as
  ReduceMean over axes 2,3 (an attribute before opset 18, an input from 18) becomes
  GlobalAveragePool; the keepdims=0 form and other axes stay ReduceMean (negative cases).
- Masks combined at export time (GPT-2's causal mask And a padding mask): And/Or/Xor/Not of
  bool constants fold at import; Where then selects with the folded condition.
- EfficientNet's MBConv block: Conv+BN -> SiLU (Mul(x, Sigmoid(x)), either operand order) ->
  depthwise Conv+BN -> SiLU -> squeeze-excitation (ReduceMean(2, 3), 1x1 convs, SiLU, Sigmoid
  gate) -> 1x1 Conv+BN + residual; SiLU fuses into each Conv's epilogue (graph/fuse_silu.hpp).
  Also a SiLU whose x has no epilogue producer (after an Add: left unfused) and a Gemm + SiLU.
- GPT-2's MLP as Gemm -> Reshape -> tanh GELU: the GELU fuses into the Gemm through the Reshape.
- GPT-2's `input_ids.view(-1, seq)`: an int64 model input reshaped to its own shape before the
  embedding Gather is the same tensor.
gen_models.build_cases() appends these cases.
"""

from __future__ import annotations

import numpy as np

import gen_models as gm
import gen_transformer_models as tm


def squeeze_excitation(rng, opset, batch=1, axes=(2, 3), keepdims=1) -> gm.Case:
  b = gm.GraphBuilder(rng)
  c = int(rng.integers(3, 17))
  h, w = int(rng.integers(1, 9)), int(rng.integers(1, 9))
  x = b.input([batch, c, h, w], "x")
  y = b.node("Conv", [x, b.weight([c, c, 3, 3]), b.weight([c], fan_in=1)], pads=[1, 1, 1, 1],
             kernel_shape=[3, 3])
  y = b.node("Mul", [y, b.node("Sigmoid", [y])])  # SiLU
  if opset >= 18:
    pooled = b.node("ReduceMean", [y, tm.i64(b, list(axes))], keepdims=keepdims)
  else:
    pooled = b.node("ReduceMean", [y], axes=list(axes), keepdims=keepdims)
  tag = "".join(map(str, axes)) + f"_k{keepdims}"
  if keepdims and tuple(axes) == (2, 3):
    squeezed = max(1, c // 4)
    s = b.node("Conv", [pooled, b.weight([squeezed, c, 1, 1]), b.weight([squeezed], fan_in=1)],
               kernel_shape=[1, 1])
    s = b.node("Conv", [b.node("Relu", [s]), b.weight([c, squeezed, 1, 1])], kernel_shape=[1, 1])
    out = b.node("Mul", [y, b.node("Sigmoid", [s])])
  else:
    out = pooled
  return gm.Case(f"export_se_{tag}_op{opset}_n{batch}", b.model([out], opset, "se"),
                 b.input_values)


def reshaped_ids(rng, opset, batch=1, seq=7, vocab=20, hidden=8) -> gm.Case:
  b = gm.GraphBuilder(rng)
  ids = tm.int_input(b, [batch, seq], vocab, "input_ids")
  same = b.node("Reshape", [ids, tm.i64(b, [-1, seq])])
  x = b.node("Gather", [b.weight([vocab, hidden], fan_in=1), same], axis=0)
  x = b.node("Add", [x, b.weight([hidden], fan_in=1)])
  return gm.Case(f"export_reshaped_ids_op{opset}_n{batch}", b.model([x], opset, "ids"),
                 b.input_values)


def combined_mask(rng, op, seq=6) -> gm.Case:
  b = gm.GraphBuilder(rng)
  x = b.input([1, 2, seq, seq], "scores")
  causal = tm.const(b, np.tril(np.ones((seq, seq), dtype=bool)), "causal")
  padding = tm.const(b, rng.random((1, 1, 1, seq)) < 0.7, "padding")
  if op == "Not":
    mask = b.node("Not", [causal])
  else:
    mask = b.node(op, [causal, padding])
  y = b.node("Where", [mask, x, tm.f32(b, -1e4)])
  return gm.Case(f"export_mask_{op.lower()}", b.model([b.node("Softmax", [y], axis=-1)], 17, "mask"),
                 b.input_values)


def compared_mask(rng, op, seq=6, floats=False) -> gm.Case:
  # A mask from comparing two index ranges, as torch.onnx exports GPT-2's causal mask at
  # sequence 1024 (LessOrEqual of [seq, 1] and [1, seq] positions): folded at compile time.
  b = gm.GraphBuilder(rng)
  x = b.input([1, 2, seq, seq], "scores")
  rows, cols = np.arange(seq).reshape(seq, 1), np.arange(seq).reshape(1, seq)
  if floats:
    a, c = tm.f32(b, (cols * 0.5).astype(np.float32)), tm.f32(b, (rows * 0.5).astype(np.float32))
  else:
    a, c = tm.i64(b, cols), tm.i64(b, rows)
  mask = b.node(op, [a, c])
  y = b.node("Where", [mask, x, tm.f32(b, -1e4)])
  tag = op.lower() + ("_f32" if floats else "")
  return gm.Case(f"export_compared_mask_{tag}", b.model([b.node("Softmax", [y], axis=-1)], 17,
                                                        "mask"), b.input_values)


def silu(b: gm.GraphBuilder, x, commuted=False):
  s = b.node("Sigmoid", [x])
  return b.node("Mul", [s, x] if commuted else [x, s])


def mbconv(rng, opset, batch=1, expand=4, stride=1, k=3, layout_size=(7, 9)) -> gm.Case:
  b = gm.GraphBuilder(rng)
  c = int(rng.integers(3, 13))
  h, w = layout_size
  x = b.input([batch, c, h, w], "x")
  e = c * expand
  y = silu(b, gm.conv_bn(b, x, c, e, 1))
  y = silu(b, gm.conv_bn(b, y, e, e, k, stride=stride, group=e), commuted=True)
  if opset >= 18:
    pooled = b.node("ReduceMean", [y, tm.i64(b, [2, 3])], keepdims=1)
  else:
    pooled = b.node("ReduceMean", [y], axes=[2, 3], keepdims=1)
  squeezed = max(1, c // 4)
  s = b.node("Conv", [pooled, b.weight([squeezed, e, 1, 1]), b.weight([squeezed], fan_in=1)],
             kernel_shape=[1, 1])
  s = silu(b, s)
  s = b.node("Conv", [s, b.weight([e, squeezed, 1, 1]), b.weight([e], fan_in=1)],
             kernel_shape=[1, 1])
  y = b.node("Mul", [y, b.node("Sigmoid", [s])])
  y = gm.conv_bn(b, y, e, c, 1)
  if stride == 1:
    y = b.node("Add", [y, x])
  tag = f"e{expand}_s{stride}_k{k}"
  return gm.Case(f"export_mbconv_{tag}_op{opset}_n{batch}", b.model([y], opset, "mbconv"),
                 b.input_values)


def silu_unfused_and_gemm(rng) -> gm.Case:
  b = gm.GraphBuilder(rng)
  x = b.input([3, 10], "x")
  y = b.node("Gemm", [x, b.weight([10, 13]), b.weight([13], fan_in=1)])
  y = silu(b, y, commuted=True)
  y = silu(b, b.node("Add", [y, y]))  # no epilogue producer: stays Sigmoid + Mul
  return gm.Case("export_silu_gemm_and_unfused", b.model([y], 17, "silu"), b.input_values)


def gpt2_mlp(rng, seq=6, hidden=8) -> gm.Case:
  """GPT-2's MLP as torch.onnx.export writes its Conv1D layers: [1, S, D] -> Reshape [S, D] ->
  Gemm -> Reshape [1, S, 4D] -> tanh GELU -> Reshape -> Gemm -> Reshape -> Add(residual). The
  GELU fuses into the first Gemm through the Reshape, the Add into the second."""
  b = gm.GraphBuilder(rng)
  x = b.input([1, seq, hidden], "x")
  h = b.node("Reshape", [x, tm.i64(b, [seq, hidden])])
  h = b.node("Gemm", [h, b.weight([hidden, 4 * hidden]), b.weight([4 * hidden], fan_in=1)])
  h = tm.gelu_tanh(b, b.node("Reshape", [h, tm.i64(b, [1, seq, 4 * hidden])]))
  h = b.node("Reshape", [h, tm.i64(b, [seq, 4 * hidden])])
  h = b.node("Gemm", [h, b.weight([4 * hidden, hidden]), b.weight([hidden], fan_in=1)])
  y = b.node("Add", [x, b.node("Reshape", [h, tm.i64(b, [1, seq, hidden])])])
  return gm.Case("export_gpt2_mlp_gemm_reshape_gelu", b.model([y], 17, "gpt2_mlp"), b.input_values)


def build_cases(rng) -> list:
  seeds = iter(rng.integers(0, 2**32, size=100))
  cases = []
  for opset in (13, 18):
    for batch in (1, 2):
      cases.append(squeeze_excitation(np.random.default_rng(int(next(seeds))), opset, batch))
    cases.append(squeeze_excitation(np.random.default_rng(int(next(seeds))), opset, keepdims=0))
    cases.append(squeeze_excitation(np.random.default_rng(int(next(seeds))), opset, axes=(1, 2)))
    cases.append(squeeze_excitation(np.random.default_rng(int(next(seeds))), opset, axes=(3,)))
  for op in ("And", "Or", "Xor", "Not"):
    cases.append(combined_mask(np.random.default_rng(int(next(seeds))), op))
  for batch in (1, 2):
    cases.append(reshaped_ids(np.random.default_rng(int(next(seeds))), 17, batch))
  # Appended last: the seeds of the cases above stay what they were.
  for opset, batch, expand, stride, k in ((13, 1, 4, 1, 3), (18, 2, 6, 2, 5), (17, 1, 1, 1, 3)):
    cases.append(mbconv(np.random.default_rng(int(next(seeds))), opset, batch, expand, stride, k))
  cases.append(silu_unfused_and_gemm(np.random.default_rng(int(next(seeds)))))
  for op in ("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"):
    cases.append(compared_mask(np.random.default_rng(int(next(seeds))), op))
  cases.append(compared_mask(np.random.default_rng(int(next(seeds))), "Less", floats=True))
  cases.append(gpt2_mlp(np.random.default_rng(int(next(seeds)))))
  return cases
