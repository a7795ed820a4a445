"""Conformance cases for the detector-head and CNN-variety operators and a YOLO-style head.

Per-op models over random shapes and attributes (LeakyRelu, HardSigmoid, HardSwish, Neg, Exp,
Log, Reciprocal, Abs, Softplus, Max/Min with broadcasting and more than two operands, Pad in
constant/reflect/edge mode, Resize nearest with every coordinate transformation and nearest
mode and linear from scales or sizes, Split in its opset 11/13/18 forms) and a YOLO-style head
(Conv -> LeakyRelu -> Resize x2 nearest -> Concat -> Conv -> Split -> Sigmoid) at opsets 13 and
17, a reduced YOLO-style backbone (yolo_backbone) and a 13x13 neck (yolo_neck). gen_models.build_cases() appends these cases.
"""

from __future__ import annotations

import numpy as np

import gen_models as gm


def shape_tag(shape) -> str:
  return "x".join(map(str, shape))


def i64(b, values, prefix="k") -> str:
  return b.const(np.array(values, np.int64), prefix)


def f32(b, values, prefix="c") -> str:
  return b.const(np.array(values, np.float32), prefix)


def case(b, name, outputs, opset):
  return gm.Case(name, b.model(outputs, opset, name), b.input_values)


def gen_activation(rng, idx, op):
  b = gm.GraphBuilder(rng)
  shape = gm.rand_shape(rng, [4, 2, 3, 1][idx % 4], 7)
  x = b.input(shape)
  attrs = {}
  opset = gm.rand_opset(rng, 14 if op == "HardSwish" else 11, 21)
  if op == "LeakyRelu" and idx % 2:
    attrs["alpha"] = float(rng.uniform(0.01, 0.3))
  if op == "HardSigmoid" and idx % 2:
    attrs.update(alpha=float(rng.uniform(0.1, 0.4)), beta=float(rng.uniform(0.2, 0.7)))
  if op in ("Log", "Reciprocal"):  # a positive operand, computed at run time
    x = b.node("Add", [b.node("Abs", [x]), f32(b, 0.25)])
  if op == "Exp":
    x = b.node("Mul", [x, f32(b, 2.0)])
  y = b.node(op, [x], **attrs)
  return case(b, f"{op.lower()}_{idx}_op{opset}_{shape_tag(shape)}", [y], opset)


def gen_max_min(rng, idx):
  b = gm.GraphBuilder(rng)
  op = "Max" if idx % 2 else "Min"
  base = gm.rand_shape(rng, int(rng.integers(1, 5)), 6)
  operands = []
  for k in range(2 + idx % 2):  # two or three operands
    shape = [d if rng.random() < 0.7 else 1 for d in base[int(rng.integers(0, len(base))):]]
    operands.append(b.input(shape) if k == 0 or rng.random() < 0.5 else
                    b.const(rng.standard_normal(shape).astype(np.float32)))
  y = b.node(op, operands)
  opset = gm.rand_opset(rng, 11, 21)
  return case(b, f"{op.lower()}_{idx}_op{opset}_{shape_tag(base)}_n{len(operands)}", [y], opset)


def gen_pad(rng, idx):
  b = gm.GraphBuilder(rng)
  mode = ["constant", "reflect", "edge"][idx % 3]
  opset = [11, 13, 18, 19, 21][idx % 5]
  shape = [int(rng.integers(1, 3)), int(rng.integers(1, 4)), int(rng.integers(2, 8)),
           int(rng.integers(2, 8))]
  x = b.input(shape)
  pads = [0] * 8
  axes = [2, 3] if opset >= 18 and idx % 2 else None
  for d in (axes or range(4)):
    hi = shape[d] - 1 if mode == "reflect" else 3  # ONNX Runtime's reflect needs pad < dim
    pads[d] = int(rng.integers(0, hi + 1))
    pads[d + 4] = int(rng.integers(0, hi + 1))
  if mode == "constant" and idx % 2 == 0:
    pads[3] = -1  # a negative pad crops
  inputs = [x]
  if axes:
    inputs.append(i64(b, [pads[d] for d in axes] + [pads[d + 4] for d in axes]))
  else:
    inputs.append(i64(b, pads))
  if mode == "constant":
    inputs.append(f32(b, float(rng.uniform(-2, 2))))
  elif axes:
    inputs.append("")
  if axes:
    inputs.append(i64(b, axes))
  y = b.node("Pad", inputs, mode=mode)
  y = b.node("Relu", [y]) if idx % 4 == 0 else y
  return case(b, f"pad_{idx}_{mode}_op{opset}_{shape_tag(shape)}", [y], opset)


COORDINATE_MODES = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"]
NEAREST_MODES = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]


def resize_node(b, x, opset, mode, scales=None, sizes=None, **attrs):
  """Resize with constant scales or sizes, in the input form of each opset."""
  roi = f32(b, np.zeros(0, np.float32), "roi") if opset < 13 else ""
  if scales is not None:
    return b.node("Resize", [x, roi, f32(b, scales, "scales")], mode=mode, **attrs)
  empty = f32(b, np.zeros(0, np.float32), "scales") if opset < 13 else ""
  return b.node("Resize", [x, roi, empty, i64(b, sizes, "sizes")], mode=mode, **attrs)


def gen_resize(rng, idx):
  b = gm.GraphBuilder(rng)
  opset = [11, 13, 18, 19][idx % 4]
  mode = "linear" if idx % 3 == 2 else "nearest"
  coordinates = COORDINATE_MODES[idx % 4]
  if opset >= 19 and idx % 8 == 3:
    coordinates = "half_pixel_symmetric"
  attrs = dict(coordinate_transformation_mode=coordinates)
  if mode == "nearest":
    attrs["nearest_mode"] = NEAREST_MODES[(idx // 2) % 4]
  shape = [int(rng.integers(1, 3)), int(rng.integers(1, 4)), int(rng.integers(1, 7)),
           int(rng.integers(1, 7))]
  x = b.input(shape)
  if idx % 2:
    sizes = shape[:2] + [int(rng.integers(1, 13)), int(rng.integers(1, 13))]
    y = resize_node(b, x, opset, mode, sizes=sizes, **attrs)
    tag = "sizes" + shape_tag(sizes)
  else:
    scales = [1.0, 1.0] + [float(rng.choice([0.5, 0.75, 1.5, 2.0, 3.0])) for _ in range(2)]
    scales = [s if int(s * d) >= 1 else 2.0 for s, d in zip(scales, shape)]
    y = resize_node(b, x, opset, mode, scales=scales, **attrs)
    tag = "scales" + "x".join(f"{s:g}" for s in scales)
  name = f"resize_{idx}_{mode}_{coordinates}_op{opset}_{shape_tag(shape)}_{tag}"
  return case(b, name, [y], opset)


def gen_split(rng, idx):
  b = gm.GraphBuilder(rng)
  opset = [11, 13, 18][idx % 3]
  shape = gm.rand_shape(rng, 3, 7)
  axis = int(rng.integers(-3, 3))
  dim = shape[axis]
  x = b.input(shape)
  if opset == 18 and idx % 2 == 0:
    parts = int(rng.integers(1, dim + 1))
    chunk = -(-dim // parts)
    parts = -(-dim // chunk)  # every chunk non-empty
    outs = b.node("Split", [x], n_out=parts, axis=axis, num_outputs=parts)
  else:
    cuts = sorted(rng.choice(np.arange(1, dim), size=min(dim - 1, int(rng.integers(0, 3))),
                             replace=False).tolist()) if dim > 1 else []
    sizes = [e - s for s, e in zip([0] + cuts, cuts + [dim])]
    if opset >= 13:
      outs = b.node("Split", [x, i64(b, sizes)], n_out=len(sizes), axis=axis)
    else:
      outs = b.node("Split", [x], n_out=len(sizes), axis=axis, split=sizes)
  outs = outs if isinstance(outs, list) else [outs]
  ys = [b.node("Sigmoid", [o]) for o in outs]
  return case(b, f"split_{idx}_op{opset}_{shape_tag(shape)}_axis{axis}_n{len(ys)}", ys, opset)


def yolo_head(rng, opset, batch=1):
  """Conv -> LeakyRelu -> Resize x2 nearest -> Concat (with a skip feature) -> Conv 1x1 ->
  Split (box xy, box wh, objectness + classes) -> Sigmoid, as YOLOv3/v5 heads export."""
  b = gm.GraphBuilder(rng)
  c_in, h, w, c_mid, c_skip, anchors, classes = 8, 5, 7, 12, 6, 3, 4
  deep = b.input([batch, c_in, h, w], "deep")
  skip = b.input([batch, c_skip, 2 * h, 2 * w], "skip")
  y = b.node("Conv", [deep, b.weight([c_mid, c_in, 3, 3]), b.weight([c_mid], fan_in=1)],
             kernel_shape=[3, 3], pads=[1, 1, 1, 1])
  y = b.node("LeakyRelu", [y], alpha=0.1)
  y = resize_node(b, y, opset, "nearest", scales=[1.0, 1.0, 2.0, 2.0],
                  coordinate_transformation_mode="asymmetric", nearest_mode="floor")
  y = b.node("Concat", [y, skip], axis=1)
  per_anchor = 5 + classes
  y = b.node("Conv", [y, b.weight([anchors * per_anchor, c_mid + c_skip, 1, 1]),
                      b.weight([anchors * per_anchor], fan_in=1)], kernel_shape=[1, 1])
  sizes = [2 * anchors, 2 * anchors, (1 + classes) * anchors]
  xy, wh, conf = b.node("Split", [y, i64(b, sizes)], n_out=3, axis=1)
  xy = b.node("Sigmoid", [xy])
  wh = b.node("Exp", [b.node("Mul", [wh, f32(b, 0.5)])])
  conf = b.node("Sigmoid", [conf])
  name = f"yolo_head_op{opset}_n{batch}"
  return gm.Case(name, b.model([xy, wh, conf], opset, name), b.input_values)


def yolo_backbone(rng, opset, batch=1):
  """A reduced bench/e2e/tiny_yolo.py: the space-to-depth stem (four strided Slices and a
  Concat), Conv + LeakyRelu(0.1) blocks (fused epilogues), MaxPools, the one-sided zero Pad
  before a stride-1 MaxPool, and a 1x1 reduction upsampled by nearest Resize and concatenated
  with the earlier route: the maps between them stay NHWC (cpu.pad, cpu.resize, cpu.concat)."""
  b = gm.GraphBuilder(rng)
  x = b.input([batch, 3, 16, 20], "image")
  phases = [b.node("Slice", [x, i64(b, [h, w]), i64(b, [16, 20]), i64(b, [2, 3]), i64(b, [2, 2])])
            for w in (0, 1) for h in (0, 1)]
  y = b.node("Concat", phases, axis=1)  # [batch, 12, 8, 10]

  def conv(y, c_in, c_out, k):
    y = b.node("Conv", [y, b.weight([c_out, c_in, k, k]), b.weight([c_out], fan_in=1)],
               kernel_shape=[k, k], pads=[k // 2] * 4)
    return b.node("LeakyRelu", [y], alpha=0.1)

  route = conv(y, 12, 16, 3)  # [batch, 16, 8, 10]
  y = b.node("MaxPool", [route], kernel_shape=[2, 2], strides=[2, 2])  # 4x5
  y = conv(y, 16, 24, 3)
  y = b.node("Pad", [y, i64(b, [0, 0, 0, 0, 0, 0, 1, 1]), f32(b, 0.0)], mode="constant")
  y = b.node("MaxPool", [y], kernel_shape=[2, 2], strides=[1, 1])  # 4x5
  deep = conv(y, 24, 32, 3)
  y = conv(deep, 32, 8, 1)
  y = resize_node(b, y, opset, "nearest", scales=[1.0, 1.0, 2.0, 2.0],
                  coordinate_transformation_mode="asymmetric", nearest_mode="floor")
  y = b.node("Concat", [y, route], axis=1)  # [batch, 24, 8, 10]
  y = conv(y, 24, 16, 3)
  name = f"yolo_backbone_op{opset}_n{batch}"
  return gm.Case(name, b.model([deep, y], opset, name), b.input_values)


def yolo_neck(rng, opset, batch=1, size=(13, 13)):
  """A detector neck at 13x13 (and a non-square 11x12): 3x3 convs of 32+ channels on maps of
  10 to 13 rows and columns run Winograd F(2x2, 3x3) (cpu.conv_winograd_2x2), one with a fused
  residual Add, the last with LeakyRelu."""
  b = gm.GraphBuilder(rng)
  h, w = size
  x = b.input([batch, 32, h, w], "deep")

  def conv(y, c_in, c_out):
    return b.node("Conv", [y, b.weight([c_out, c_in, 3, 3]), b.weight([c_out], fan_in=1)],
                  kernel_shape=[3, 3], pads=[1, 1, 1, 1])

  y = b.node("Relu", [conv(x, 32, 48)])
  y = b.node("Add", [conv(y, 48, 32), x])
  y = b.node("LeakyRelu", [conv(y, 32, 40)], alpha=0.1)
  name = f"yolo_neck_op{opset}_n{batch}_{h}x{w}"
  return gm.Case(name, b.model([y], opset, name), b.input_values)


SINGLE_OPS = [
    (lambda r, i: gen_activation(r, i, "LeakyRelu"), 3),
    (lambda r, i: gen_activation(r, i, "HardSigmoid"), 2),
    (lambda r, i: gen_activation(r, i, "HardSwish"), 2),
    (lambda r, i: gen_activation(r, i, "Neg"), 1),
    (lambda r, i: gen_activation(r, i, "Exp"), 1),
    (lambda r, i: gen_activation(r, i, "Log"), 1),
    (lambda r, i: gen_activation(r, i, "Reciprocal"), 1),
    (lambda r, i: gen_activation(r, i, "Abs"), 1),
    (lambda r, i: gen_activation(r, i, "Softplus"), 2),
    (gen_max_min, 4),
    (gen_pad, 9),
    (gen_resize, 16),
    (gen_split, 6),
]


def build_cases(rng) -> list:
  seeds = iter(rng.integers(0, 2**32, size=1000))
  cases = gm.single_op_cases(SINGLE_OPS, seeds)
  for opset in (13, 17):
    cases.append(yolo_head(np.random.default_rng(int(next(seeds))), opset))
  cases.append(yolo_head(np.random.default_rng(int(next(seeds))), 17, batch=2))
  for opset, batch in ((13, 1), (18, 2)):
    cases.append(yolo_backbone(np.random.default_rng(int(next(seeds))), opset, batch))
  # Appended last, so the cases above keep their seeds.
  cases.append(yolo_neck(np.random.default_rng(int(next(seeds))), 17))
  cases.append(yolo_neck(np.random.default_rng(int(next(seeds))), 13, batch=2, size=(11, 12)))
  return cases
