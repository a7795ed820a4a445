#!/usr/bin/env python3
"""Writes the small ONNX models test_onnx_importer.cpp imports.

usage: make_models.py OUT_DIR SEED

Each model is OUT_DIR/<name>.onnx. Where the test needs a value it cannot
read from the model itself (an output shape, resolved pads, a folded
constant), the oracle is ONNX Runtime or numpy, written to
OUT_DIR/<name>.expect as lines "key v1 v2 ...". Models are saved with the
ir_version onnx 1.23 picks by default (newer than libonnx 1.12 knows).
"""
import os
import random
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

ort.set_default_logger_severity(3)

OUT = sys.argv[1]
SEED = int(sys.argv[2])
rng = random.Random(SEED)
nprng = np.random.default_rng(SEED)
F = TensorProto.FLOAT


def vi(name, shape, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


def init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def model(name, nodes, inputs, outputs, inits=(), opset=13, ir_version=None, check=False):
    g = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    if ir_version is not None:
        m.ir_version = ir_version
    if check:
        onnx.checker.check_model(m)
    onnx.save(m, os.path.join(OUT, name + ".onnx"))
    return m


def write_expect(name, **values):
    with open(os.path.join(OUT, name + ".expect"), "w") as f:
        for key, v in values.items():
            flat = np.asarray(v).reshape(-1)
            f.write(key + "".join(" " + repr(float(x)) for x in flat) + "\n")


def run_ort(m, feeds):
    """ONNX Runtime, or onnx's reference evaluator for what ORT refuses
    (ORT's Conv has no dilations with SAME auto_pad)."""
    try:
        return run_ort_only(m, feeds)
    except ort.capi.onnxruntime_pybind11_state.InvalidArgument:
        return ReferenceEvaluator(m).run(None, feeds)


def run_ort_only(m, feeds):
    m = onnx.ModelProto.FromString(m.SerializeToString())
    m.ir_version = min(m.ir_version, 8)  # ONNX Runtime may not know the newest IR
    options = ort.SessionOptions()
    options.log_severity_level = 4  # refusals are expected and handled
    sess = ort.InferenceSession(m.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def rand(*shape):
    return nprng.standard_normal(shape).astype(np.float32)


# --- single ops with explicit attributes ------------------------------------

conv_w = rand(5, 3, 3, 3)
m = model("conv_basic",
          [helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv1", strides=[2, 1],
                            pads=[1, 0, 2, 1], dilations=[1, 2], kernel_shape=[3, 3])],
          [vi("x", [1, 3, 7, 11])], [vi("y", None)],
          [init("w", conv_w), init("b", rand(5))])
write_expect("conv_basic", out_shape=run_ort(m, {"x": rand(1, 3, 7, 11)})[0].shape, w=conv_w,
             ir_version=m.ir_version)

m = model("conv_group",
          [helper.make_node("Conv", ["x", "w"], ["y"], name="conv_g", group=3)],
          [vi("x", [2, 6, 5, 5])], [vi("y", None)], [init("w", rand(9, 2, 2, 3))])
write_expect("conv_group", out_shape=run_ort(m, {"x": rand(2, 6, 5, 5)})[0].shape)

m = model("gemm",
          [helper.make_node("Gemm", ["a", "b", "c"], ["y"], name="fc", alpha=0.5, beta=2.0,
                            transA=1, transB=1)],
          [vi("a", [5, 3])], [vi("y", None)], [init("b", rand(4, 5)), init("c", rand(4))])
write_expect("gemm", out_shape=run_ort(m, {"a": rand(5, 3)})[0].shape)

model("gemm_no_c", [helper.make_node("Gemm", ["a", "b"], ["y"])],
      [vi("a", [1, 7]), vi("b", [7, 2])], [vi("y", None)])

m = model("matmul", [helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")],
          [vi("a", [2, 3, 5])], [vi("y", None)], [init("b", rand(5, 7))])
write_expect("matmul", out_shape=run_ort(m, {"a": rand(2, 3, 5)})[0].shape)

model("unary",
      [helper.make_node("Relu", ["x"], ["r"], name="relu"),
       helper.make_node("Sigmoid", ["r"], ["s"], name="sig"),
       helper.make_node("Clip", ["s", "lo", "hi"], ["c1"], name="clip_both"),
       helper.make_node("Clip", ["c1", "", "hi"], ["c2"], name="clip_max"),
       helper.make_node("Clip", ["c2"], ["y"], name="clip_none")],
      [vi("x", [3, 1, 2])], [vi("y", [3, 1, 2])],
      [init("lo", np.float32(-0.25)), init("hi", np.float32(0.75))])

m = model("broadcast",
          [helper.make_node("Add", ["x", "bias"], ["s"], name="add"),
           helper.make_node("Mul", ["s", "z"], ["y"], name="mul")],
          [vi("x", [2, 3, 4]), vi("z", [1, 3, 1])], [vi("y", None)],
          # float_data rather than raw_data
          [helper.make_tensor("bias", F, [4], [0.5, -1.0, 2.0, 3.25])])
write_expect("broadcast",
             out_shape=run_ort(m, {"x": rand(2, 3, 4), "z": rand(1, 3, 1)})[0].shape)

m = model("avgpool",
          [helper.make_node("AveragePool", ["x"], ["y"], name="avg", kernel_shape=[3, 2],
                            strides=[2, 2], pads=[1, 0, 1, 1], count_include_pad=1,
                            ceil_mode=1)],
          [vi("x", [1, 2, 8, 7])], [vi("y", None)])
write_expect("avgpool", out_shape=run_ort(m, {"x": rand(1, 2, 8, 7)})[0].shape)

m = model("maxpool",
          [helper.make_node("MaxPool", ["x"], ["y"], name="mp", kernel_shape=[2, 3],
                            strides=[1, 2], dilations=[2, 1], ceil_mode=1)],
          [vi("x", [1, 1, 9, 10])], [vi("y", None)])
write_expect("maxpool", out_shape=run_ort(m, {"x": rand(1, 1, 9, 10)})[0].shape)

model("maxpool_storage_order",
      [helper.make_node("MaxPool", ["x"], ["y"], name="mp_so", kernel_shape=[2, 2],
                        storage_order=1)],
      [vi("x", [1, 1, 4, 4])], [vi("y", None)])
model("maxpool_indices",
      [helper.make_node("MaxPool", ["x"], ["y", "idx"], name="mp_idx", kernel_shape=[2, 2])],
      [vi("x", [1, 1, 4, 4])], [vi("y", None), vi("idx", None, TensorProto.INT64)])

model("global_avgpool", [helper.make_node("GlobalAveragePool", ["x"], ["y"], name="gap")],
      [vi("x", [1, 5, 3, 2])], [vi("y", None)])

model("flatten_neg",
      [helper.make_node("Flatten", ["x"], ["y"], name="flat", axis=-3)],
      [vi("x", [2, 3, 4, 5])], [vi("y", None)])

model("reshape",
      [helper.make_node("Reshape", ["x", "s1"], ["r1"], name="reshape1"),
       helper.make_node("Reshape", ["r1", "s2"], ["y"], name="reshape2")],
      [vi("x", [2, 3, 4])], [vi("y", None)],
      [helper.make_tensor("s1", TensorProto.INT64, [2], [0, -1]),  # int64_data
       init("s2", np.array([-1, 0, 2], np.int64))])  # raw_data

model("reshape_allowzero",
      [helper.make_node("Reshape", ["x", "s"], ["y"], name="rz", allowzero=1)],
      [vi("x", [6, 1])], [vi("y", None)], [init("s", np.array([3, -1, 1], np.int64))],
      opset=14)

model("concat_neg",
      [helper.make_node("Concat", ["a", "w", "b"], ["y"], name="cat", axis=-2)],
      [vi("a", [2, 3, 4]), vi("b", [2, 5, 4])], [vi("y", None)], [init("w", rand(2, 1, 4))])

for opset in (11, 13):
    model(f"softmax_default_opset{opset}",
          [helper.make_node("Softmax", ["x"], ["y"], name="sm")],
          [vi("x", [2, 3, 4])], [vi("y", [2, 3, 4])], opset=opset)
    model(f"softmax_neg_opset{opset}",
          [helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=-1)],
          [vi("x", [2, 3, 4])], [vi("y", [2, 3, 4])], opset=opset)

model("batchnorm",
      [helper.make_node("BatchNormalization", ["x", "g", "b", "m", "v"], ["y"], name="bn",
                        epsilon=1e-3)],
      [vi("x", [1, 3, 4, 4])], [vi("y", None)],
      [init("g", rand(3)), init("b", rand(3)), init("m", rand(3)),
       init("v", np.abs(rand(3)) + 1)])

# Constant nodes of every supported form; value_ints drives a Reshape.
model("constants",
      [helper.make_node("Constant", [], ["k_tensor"], name="k1",
                        value=init("t", np.arange(4, dtype=np.float32))),
       helper.make_node("Constant", [], ["k_float"], name="k2", value_float=2.5),
       helper.make_node("Constant", [], ["k_floats"], name="k3", value_floats=[1.0, -2.0]),
       helper.make_node("Constant", [], ["k_ints"], name="k4", value_ints=[4, -1]),
       helper.make_node("Constant", [], ["k_int"], name="k5", value_int=7),
       helper.make_node("Add", ["x", "k_tensor"], ["a"], name="add_tensor"),
       helper.make_node("Mul", ["a", "k_float"], ["b"], name="mul_float"),
       helper.make_node("Reshape", ["b", "k_ints"], ["c"], name="reshape_ints"),
       helper.make_node("Add", ["c", "k_floats"], ["y"], name="add_floats")],
      [vi("x", [2, 4])], [vi("y", None)])

# Constant folding: relu(w0) * k + w1 is known at import time; only the final
# Add reads the input. ONNX Runtime with x = 0 gives the folded values.
w0, w1 = rand(3, 4), rand(3, 4)
m = model("fold",
          [helper.make_node("Relu", ["w0"], ["r"], name="fold_relu"),
           helper.make_node("Constant", [], ["k"], name="fold_k", value_float=-1.5),
           helper.make_node("Mul", ["r", "k"], ["m"], name="fold_mul"),
           helper.make_node("Add", ["m", "w1"], ["f"], name="fold_add"),
           helper.make_node("Gemm", ["f", "wg"], ["g"], name="fold_gemm", transB=1),
           helper.make_node("Add", ["x", "g"], ["y"], name="live_add")],
          [vi("x", [3, 2])], [vi("y", None)],
          [init("w0", w0), init("w1", w1), init("wg", rand(2, 4)),
           init("unused", rand(5))])
write_expect("fold", folded=run_ort(m, {"x": np.zeros((3, 2), np.float32)})[0])

# Nodes out of order, an initializer also listed as a graph input, an unused
# initializer, and Identity/Dropout aliases in front of the graph output.
model("unsorted",
      [helper.make_node("Dropout", ["i"], ["y"], name="drop"),
       helper.make_node("Identity", ["r"], ["i"], name="ident"),
       helper.make_node("Relu", ["a"], ["r"], name="relu"),
       helper.make_node("Add", ["x", "w"], ["a"], name="add")],
      [vi("x", [4]), vi("w", [4])], [vi("y", [4])],
      [init("w", rand(4)), init("unused", rand(2))])

# --- auto_pad and random conv/pool shapes ------------------------------------
# The expected pads come from the ONNX spec's SAME rule here, and each case is
# confirmed: onnx's reference evaluator on the auto_pad model must compute
# what ONNX Runtime computes with the explicit pads. (ONNX Runtime's own SAME
# handling ignores dilations and rejects negative totals, so it is not the
# oracle for auto_pad; the reference evaluator has its own gaps: a case
# neither oracle confirms is drawn again.)
def every_window_reads_input(size, k, s, d, pads):
    """Whether every output window of a pool has a tap inside the input (floor mode)."""
    for i in range(2):
        ext = (k[i] - 1) * d[i] + 1
        out = (size[i] + pads[i] + pads[2 + i] - ext) // s[i] + 1
        for o in range(out):
            start = o * s[i] - pads[i]
            if not any(0 <= start + t * d[i] < size[i] for t in range(k[i])):
                return False
    return True


cases = []
unconfirmed = 0  # cases no oracle could confirm; drawn again
sizes = [1, 2, 3, 5, 7, 11, 13]
while len(cases) < 24:
    op = rng.choice(["Conv", "MaxPool", "AveragePool"])
    auto_pad = rng.choice(["VALID", "SAME_UPPER", "SAME_LOWER", "NOTSET"])
    h, w = rng.choice(sizes), rng.choice(sizes)
    k = [rng.randint(1, 4), rng.randint(1, 4)]
    s = [rng.randint(1, 3), rng.randint(1, 3)]
    d = [rng.randint(1, 2), rng.randint(1, 2)] if op != "AveragePool" else [1, 1]
    ext = [(k[i] - 1) * d[i] + 1 for i in range(2)]
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0, 0, 0, 0]
        for i, n in enumerate([h, w]):
            out = -(-n // s[i])
            total = max(0, (out - 1) * s[i] + ext[i] - n)
            small, large = total // 2, total - total // 2
            pads[i], pads[2 + i] = (small, large) if auto_pad == "SAME_UPPER" else (large, small)
    elif auto_pad == "NOTSET":
        pads = [rng.randint(0, k[0] - 1), rng.randint(0, k[1] - 1),
                rng.randint(0, k[0] - 1), rng.randint(0, k[1] - 1)]
    else:
        pads = [0, 0, 0, 0]
    if h + pads[0] + pads[2] < ext[0] or w + pads[1] + pads[3] < ext[1]:
        continue
    if op != "Conv" and not every_window_reads_input([h, w], k, s, d, pads):
        continue  # Tessera refuses such pools on purpose (nothing to reduce); not this test
    c = rng.randint(1, 3)
    attrs = dict(strides=s, auto_pad=auto_pad)
    if op != "AveragePool":
        attrs["dilations"] = d
    if op != "Conv":
        attrs["kernel_shape"] = k
    if auto_pad == "NOTSET":
        attrs["pads"] = pads
    inits = [init("w", rand(2, c, k[0], k[1]))] if op == "Conv" else []
    ins = ["x", "w"] if op == "Conv" else ["x"]
    name = f"autopad_{len(cases)}"
    m = model(name, [helper.make_node(op, ins, ["y"], name=name, **attrs)],
              [vi("x", [1, c, h, w])], [vi("y", None)], inits)
    explicit = dict(attrs, auto_pad="NOTSET", pads=pads)
    m2 = helper.make_model(
        helper.make_graph([helper.make_node(op, ins, ["y"], **explicit)], "e",
                          [vi("x", [1, c, h, w])], [vi("y", None)], inits),
        opset_imports=[helper.make_opsetid("", 13)])
    x = rand(1, c, h, w)
    y2 = run_ort_only(m2, {"x": x})[0]
    confirmed = False
    for oracle in (lambda: run_ort_only(m, {"x": x})[0],
                   lambda: ReferenceEvaluator(m).run(None, {"x": x})[0]):
        try:
            y1 = oracle()
        except Exception:  # this oracle cannot run the case
            continue
        confirmed = confirmed or (y1.shape == y2.shape and
                                  np.allclose(y1, y2, rtol=1e-4, atol=1e-5))
    if not confirmed:
        unconfirmed += 1
        continue
    write_expect(name, op=["Conv", "MaxPool", "AveragePool"].index(op), pads=pads,
                 kernel=k, strides=s, dilations=d, out_shape=y2.shape)
    cases.append(name)
with open(os.path.join(OUT, "autopad.count"), "w") as f:
    f.write(str(len(cases)) + "\n")
print(f"make_models.py: seed {SEED}, {len(cases)} auto_pad cases, {unconfirmed} redrawn")

# --- models the importer must refuse -----------------------------------------

model("unsupported_lstm",
      [helper.make_node("Relu", ["x"], ["r"], name="relu0"),
       helper.make_node("LSTM", ["r", "w", "rw"], ["", "h"], name="conv3", hidden_size=2)],
      [vi("x", [1, 1, 2])], [vi("h", None)],
      [init("w", rand(1, 8, 2)), init("rw", rand(1, 8, 2))])
model("unsupported_unnamed", [helper.make_node("Softsign", ["x"], ["y"])],
      [vi("x", [2])], [vi("y", None)], opset=12)
model("symbolic_dim", [helper.make_node("Relu", ["x"], ["y"])],
      [vi("x", ["batch", 3])], [vi("y", None)])
model("unknown_dim", [helper.make_node("Relu", ["x"], ["y"])],
      [vi("x", [None, 3])], [vi("y", None)])
model("opset9", [helper.make_node("Relu", ["x"], ["y"])],
      [vi("x", [2])], [vi("y", None)], opset=9)
model("opset29", [helper.make_node("Relu", ["x"], ["y"])],
      [vi("x", [2])], [vi("y", None)], opset=29)
model("opset28", [helper.make_node("Relu", ["x"], ["r"]),
                  helper.make_node("Transpose", ["r"], ["y"], perm=[1, 0])],
      [vi("x", [2, 3])], [vi("y", None)], opset=28)
model("gelu_opset13", [helper.make_node("Gelu", ["x"], ["y"], name="gelu13")],
      [vi("x", [2])], [vi("y", None)], opset=13)
model("avgpool_dilated",
      [helper.make_node("AveragePool", ["x"], ["y"], name="ap_dil", kernel_shape=[2, 2],
                        dilations=[2, 1])],
      [vi("x", [1, 1, 5, 5])], [vi("y", None)], opset=19)
model("int_input", [helper.make_node("Relu", ["x"], ["y"])],
      [vi("x", [2], TensorProto.INT64)], [vi("y", None, TensorProto.INT64)])
model("output_is_input", [helper.make_node("Relu", ["x"], ["r"])],
      [vi("x", [2])], [vi("r", None), vi("x", [2])])
model("output_is_weight", [helper.make_node("Relu", ["x"], ["r"])],
      [vi("x", [2])], [vi("r", None), vi("w", [2])], [init("w", rand(2))])
model("clip_dynamic_min", [helper.make_node("Clip", ["x", "lo"], ["y"], name="clip_dyn")],
      [vi("x", [2]), vi("lo", [])], [vi("y", None)])
# Operands that fix a shape or a scale, given as model inputs; a training-only output asked for.
model("reshape_dynamic_shape", [helper.make_node("Reshape", ["x", "s"], ["y"], name="rs_dyn")],
      [vi("x", [2, 3]), vi("s", [2], TensorProto.INT64)], [vi("y", None)])
model("resize_dynamic_scales",
      [helper.make_node("Resize", ["x", "", "sc"], ["y"], name="rz_dyn", mode="nearest")],
      [vi("x", [1, 1, 2, 2]), vi("sc", [4])], [vi("y", None)], opset=19)
model("layernorm_mean_output",
      [helper.make_node("LayerNormalization", ["x", "g"], ["y", "mean"], name="ln_mean")],
      [vi("x", [2, 3])], [vi("y", None), vi("mean", None)], [init("g", np.ones(3, np.float32))],
      opset=17)
model("shape_mismatch", [helper.make_node("Relu", ["x"], ["y"], name="relu_bad")],
      [vi("x", [2, 3])], [vi("y", [2, 4])], check=False)
model("bad_auto_pad",
      [helper.make_node("Conv", ["x", "w"], ["y"], name="conv_bad_pad", auto_pad="SAME")],
      [vi("x", [1, 1, 4, 4])], [vi("y", None)], [init("w", rand(1, 1, 3, 3))], check=False)
model("int64_data", [helper.make_node("Add", ["x", "k"], ["y"], name="add_int")],
      [vi("x", [2])], [vi("y", None)], [init("k", np.array([1, 2], np.int64))])
model("dropout_training",
      [helper.make_node("Dropout", ["x", "", "t"], ["y"], name="drop_train")],
      [vi("x", [2])], [vi("y", None)], [init("t", np.array(True))])
model("batchnorm_training",
      [helper.make_node("BatchNormalization", ["x", "g", "b", "m", "v"], ["y", "rm", "rv"],
                        name="bn_train", training_mode=1)],
      [vi("x", [1, 2, 2, 2])], [vi("y", None), vi("rm", None), vi("rv", None)],
      [init(n, np.ones(2, np.float32)) for n in "gbmv"], opset=15)


# --- transformer ops -----------------------------------------------------------
I64 = TensorProto.INT64


def i64(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


# Embedding lookup: int64 ids input, weight table; then a constant scalar-index Gather.
model("gather_embedding",
      [helper.make_node("Gather", ["table", "ids"], ["e"], name="embed", axis=0),
       helper.make_node("Gather", ["e", "zero"], ["first"], name="first_token", axis=1)],
      [vi("ids", [2, 5], I64)], [vi("first", None)],
      [init("table", rand(11, 4)), i64("zero", 0)])

# A PyTorch-style reshape target from Shape/Gather/Unsqueeze/Concat, folded at import.
model("shape_subgraph",
      [helper.make_node("Shape", ["x"], ["s"]),
       helper.make_node("Gather", ["s", "i0"], ["d0"], axis=0),
       helper.make_node("Unsqueeze", ["d0", "ax0"], ["u0"]),
       helper.make_node("Concat", ["u0", "rest"], ["target"], axis=0),
       helper.make_node("Reshape", ["x", "target"], ["r"], name="reshape"),
       helper.make_node("Transpose", ["r"], ["y"], name="tr", perm=[0, 2, 1, 3])],
      [vi("x", [2, 6, 8])], [vi("y", None)],
      [i64("i0", 0), i64("ax0", [0]), i64("rest", [6, 2, 4])])

# Slice with clamped ends and a negative step; Unsqueeze (opset 13 axes input) -> Reshape.
model("slice_unsqueeze",
      [helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["s"], name="sl"),
       helper.make_node("Unsqueeze", ["s", "uax"], ["y"], name="unsq")],
      [vi("x", [4, 9])], [vi("y", None)],
      [i64("st", [-1, 1]), i64("en", [-(2**63), 2**63 - 1]), i64("ax", [0, 1]), i64("sp", [-2, 3]),
       i64("uax", [1])])

# ReduceMean-18 (axes input), LayerNormalization-17 and Gelu-20 (newer than libonnx 1.12).
model("norm_opset20",
      [helper.make_node("ReduceMean", ["x", "axes"], ["m"], name="rm", keepdims=0),
       helper.make_node("LayerNormalization", ["x", "g", "b"], ["ln"], name="ln", axis=-1,
                        epsilon=1e-3),
       helper.make_node("Gelu", ["ln"], ["y"], name="gelu", approximate="tanh")],
      [vi("x", [3, 4, 5])], [vi("y", None), vi("m", None)],
      [i64("axes", [-1, 0]), init("g", rand(5)), init("b", rand(5))], opset=20)

# Where with a constant bool mask, Expand, Cast float->float.
model("where_expand",
      [helper.make_node("Where", ["mask", "x", "neg"], ["w"], name="where"),
       helper.make_node("Expand", ["w", "shape"], ["e"], name="expand"),
       helper.make_node("Cast", ["e"], ["y"], name="cast", to=F)],
      [vi("x", [3, 3])], [vi("y", None)],
      [init("mask", np.tril(np.ones((3, 3), bool))), init("neg", np.array(-1e4, np.float32)),
       i64("shape", [2, 1, 3])])

# Refusals: a run-time Where condition, a Cast of an activation to int64, an empty Slice.
model("where_dynamic",
      [helper.make_node("Where", ["c", "x", "x"], ["y"], name="where_dyn")],
      [vi("x", [2]), vi("c", [2])], [vi("y", None)])
model("cast_activation",
      [helper.make_node("Cast", ["x"], ["y"], name="cast_int", to=I64)],
      [vi("x", [2])], [vi("y", None, I64)])
model("cast_float_to_bool",
      [helper.make_node("Cast", ["x"], ["b"], name="cast_fb", to=TensorProto.BOOL),
       helper.make_node("Cast", ["b"], ["y"], name="back", to=TensorProto.FLOAT)],
      [vi("x", [2])], [vi("y", None)])
# An attention_mask as Hugging Face 4.x reads it: mask[:, None, None, :] (a view of the int64
# input) cast to bool, negated, then an additive -inf where masked.
model("runtime_mask",
      [helper.make_node("Unsqueeze", ["m", "axes"], ["m4"], name="unsq"),
       helper.make_node("Cast", ["m4"], ["keep"], name="to_bool", to=TensorProto.BOOL),
       helper.make_node("Not", ["keep"], ["masked"], name="not"),
       helper.make_node("Where", ["masked", "ninf", "zero"], ["bias"], name="where"),
       helper.make_node("Add", ["x", "bias"], ["y"], name="add")],
      [vi("x", [2, 1, 3, 3]), vi("m", [2, 3], I64)], [vi("y", None)],
      [i64("axes", [1, 2]), init("ninf", np.float32(-np.inf)), init("zero", np.float32(0))])
model("int64_view_gather",
      [helper.make_node("Unsqueeze", ["ids", "axes"], ["ids3"], name="unsq"),
       helper.make_node("Gather", ["table", "ids3"], ["y"], name="embed")],
      [vi("ids", [2, 3], I64)], [vi("y", None)],
      [i64("axes", [1]), init("table", rand(5, 4))])
model("gather_nd_batch_dims",
      [helper.make_node("GatherND", ["x", "i"], ["y"], name="gnd", batch_dims=1)],
      [vi("x", [2, 3])], [vi("y", None)], [i64("i", [[1], [2]])])
model("gather_nd_runtime_indices",
      [helper.make_node("GatherND", ["x", "i"], ["y"], name="gnd")],
      [vi("x", [2, 3]), vi("i", [1, 2], I64)], [vi("y", None)])
model("slice_empty",
      [helper.make_node("Slice", ["x", "st", "en"], ["y"], name="sl_empty")],
      [vi("x", [4])], [vi("y", None)], [i64("st", [3]), i64("en", [1])])

# --- detector-head ops ----------------------------------------------------------

# Split: the split attribute (opset 11), the split input (13), num_outputs with a smaller last
# chunk (18); each becomes a Slice.
model("split_op11",
      [helper.make_node("Split", ["x"], ["a", "b"], name="sp", axis=1, split=[1, 3])],
      [vi("x", [2, 4, 3])], [vi("a", None), vi("b", None)], opset=11)
model("split_op13",
      [helper.make_node("Split", ["x", "s"], ["a", "b", "c"], name="sp", axis=-1)],
      [vi("x", [2, 7])], [vi("a", None), vi("b", None), vi("c", None)],
      [i64("s", [2, 4, 1])], opset=13)
model("split_op18",
      [helper.make_node("Split", ["x"], ["a", "b", "c"], name="sp", axis=0, num_outputs=3)],
      [vi("x", [7, 2])], [vi("a", None), vi("b", None), vi("c", None)], opset=18)
model("split_bad",
      [helper.make_node("Split", ["x"], ["a", "b"], name="sp_bad", axis=0)],
      [vi("x", [3, 2])], [vi("a", None), vi("b", None)], opset=13)

# Pad with axes (opset 18) and a constant value; Resize from scales and from sizes; Max of three.
model("pad_resize_max",
      [helper.make_node("Pad", ["x", "pads", "cv", "axes"], ["p"], name="pad", mode="constant"),
       helper.make_node("Resize", ["p", "", "scales"], ["r"], name="rs", mode="nearest",
                        coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
       helper.make_node("Resize", ["x", "", "", "sizes"], ["r2"], name="rs2", mode="linear"),
       helper.make_node("Max", ["r", "r", "r"], ["y"], name="mx")],
      [vi("x", [1, 2, 3, 4])], [vi("y", None), vi("r2", None)],
      [i64("pads", [1, -1, 2, 0]), init("cv", np.array(0.5, np.float32)), i64("axes", [2, 3]),
       init("scales", np.array([1, 1, 2, 1.5], np.float32)), i64("sizes", [1, 2, 5, 7])],
      opset=18)
model("pad_wrap",
      [helper.make_node("Pad", ["x", "pads"], ["y"], name="pad_wrap", mode="wrap")],
      [vi("x", [3])], [vi("y", None)], [i64("pads", [1, 1])], opset=19)

# Symbolic and unknown input dims, fixed by InputShapeOverrides (tessera compile --batch/--shape).
model("symbolic_dims",
      [helper.make_node("Add", ["x", "z"], ["y"], name="add")],
      [vi("x", ["N", "seq", 4]), vi("z", [None, 1, 4])], [vi("y", None)])

# Folded integer and float shape arithmetic: Mod (both signs conventions, int64 and float),
# Neg and Abs of int64, Size, CastLike. The folded sum is added to x; ONNX Runtime with x = 0
# gives the folded values.
mod_a = np.array([7, -7, 7, -7], np.int64)
mod_b = np.array([3, 3, -3, -3], np.int64)
m = model("fold_int_ops",
          [helper.make_node("Mod", ["ma", "mb"], ["m0"], name="mod0"),
           helper.make_node("Mod", ["ma", "mb"], ["m1"], name="mod1", fmod=1),
           helper.make_node("Mod", ["fa", "fb"], ["m2"], name="mod2", fmod=1),
           helper.make_node("Neg", ["m0"], ["n0"], name="neg0"),
           helper.make_node("Abs", ["m1"], ["a1"], name="abs1"),
           helper.make_node("Size", ["x"], ["sz"], name="size"),
           helper.make_node("Add", ["n0", "a1"], ["s0"], name="sum_int"),
           helper.make_node("Add", ["s0", "sz"], ["s1"], name="sum_size"),
           helper.make_node("CastLike", ["s1", "x"], ["f0"], name="castlike"),
           helper.make_node("Add", ["f0", "m2"], ["f1"], name="sum_float"),
           helper.make_node("Add", ["x", "f1"], ["y"], name="live_add")],
          [vi("x", [4])], [vi("y", None)],
          [init("ma", mod_a), init("mb", mod_b),
           init("fa", np.array([5.5, -5.5, 5.5, -5.5], np.float32)),
           init("fb", np.array([2.0, 2.0, -2.0, -2.0], np.float32))], opset=15)
write_expect("fold_int_ops", folded=run_ort(m, {"x": np.zeros(4, np.float32)})[0])

# Attention (opset 23): a 4-D causal MHA becomes Transpose(K), MatMul, Mul(scale), Add(mask),
# Softmax, MatMul; an external cache length (nonpad_kv_seqlen) and a bool mask input are refused.
attention_inputs = [vi("q", [1, 2, 3, 4]), vi("k", [1, 2, 3, 4]), vi("v", [1, 2, 3, 4])]
model("attention_causal",
      [helper.make_node("Attention", ["q", "k", "v"], ["y"], name="attn", is_causal=1)],
      attention_inputs, [vi("y", None)], opset=23)
model("attention_nonpad",
      [helper.make_node("Attention", ["q", "k", "v", "", "", "", "n"], ["y"], name="attn_np")],
      attention_inputs + [vi("n", [1], TensorProto.INT64)], [vi("y", None)], opset=24)
model("attention_bool_mask",
      [helper.make_node("Attention", ["q", "k", "v", "m"], ["y"], name="attn_bm")],
      attention_inputs + [vi("m", [3, 3], TensorProto.BOOL)], [vi("y", None)], opset=23)

# GatherElements of constants (axis 1, a negative index) folded into a weight; ONNX Runtime with
# x = 0 gives the folded values.
m = model("fold_gather_elements",
          [helper.make_node("GatherElements", ["gd", "gi"], ["g"], name="gather_el", axis=1),
           helper.make_node("Add", ["x", "g"], ["y"], name="live_add")],
          [vi("x", [2, 3])], [vi("y", None)],
          [init("gd", np.arange(12, dtype=np.float32).reshape(3, 4)),
           init("gi", np.array([[1, 3, 0], [-1, 0, 2]], np.int64))], opset=13)
write_expect("fold_gather_elements", folded=run_ort(m, {"x": np.zeros((2, 3), np.float32)})[0])

# Trilu of a constant (lower, diagonal k = 1; then upper, k = -1) folded into a weight; ONNX
# Runtime with x = 0 gives the folded values.
m = model("fold_trilu",
          [helper.make_node("Trilu", ["td", "tk"], ["lo"], name="tril", upper=0),
           helper.make_node("Trilu", ["lo", "tn"], ["t"], name="triu"),
           helper.make_node("Add", ["x", "t"], ["y"], name="live_add")],
          [vi("x", [3, 4])], [vi("y", None)],
          [init("td", np.arange(1, 13, dtype=np.float32).reshape(3, 4)),
           init("tk", np.array(1, np.int64)), init("tn", np.array(-1, np.int64))], opset=14)
write_expect("fold_trilu", folded=run_ort(m, {"x": np.zeros((3, 4), np.float32)})[0])

# Casts of constants as ONNX Runtime does them on x86: NaN, the infinities and values out of range
# give the type's lowest value, floats truncate, any non-zero is true (0.5 too); int64 Where, Max
# and Min fold exactly whatever the values' size (T5's relative position buckets). Cast back to
# float and added to x = 0 by ONNX Runtime, the folded values.
special = np.array([-np.inf, np.inf, np.nan, 1e30, -2.7, 2.7, 0.5, -3e9, 0.0], np.float32)
F32 = TensorProto.FLOAT
m = model("fold_casts",
          [helper.make_node("Cast", ["sp"], ["i64"], to=I64),
           helper.make_node("Cast", ["sp"], ["i32"], to=TensorProto.INT32),
           helper.make_node("Cast", ["i32"], ["i32_64"], to=I64),
           helper.make_node("Cast", ["sp"], ["b"], to=TensorProto.BOOL),
           helper.make_node("Where", ["b", "i64", "big"], ["w"]),
           helper.make_node("Max", ["w", "lo"], ["mx"]),
           helper.make_node("Min", ["i32_64", "hi"], ["mn"]),
           helper.make_node("Cast", ["mx"], ["fmx"], to=F32),
           helper.make_node("Cast", ["mn"], ["fmn"], to=F32),
           helper.make_node("Cast", ["b"], ["fb"], to=F32),
           helper.make_node("Concat", ["fmx", "fmn", "fb"], ["t"], axis=0),
           helper.make_node("Add", ["x", "t"], ["y"], name="live_add")],
          [vi("x", [27])], [vi("y", None)],
          [init("sp", special), i64("big", [2**62 + 2**40] * 9), i64("lo", -(2**62)),
           i64("hi", 2**40)])
write_expect("fold_casts", folded=run_ort(m, {"x": np.zeros(27, np.float32)})[0])

# Floor, Ceil, Round (half to even: 0.5, 1.5, 2.5, -0.5) and Sign of constants folded exactly;
# Sin and Cos (Llama's rotary tables) within an ulp of ONNX Runtime's.
grid = np.array([-2.5, -1.5, -0.5, -0.2, 0.0, 0.5, 1.5, 2.5, 3.7, -3.7], np.float32)
m = model("fold_rounding",
          [helper.make_node(op, ["g"], [op.lower()]) for op in ("Floor", "Ceil", "Round", "Sign")] +
          [helper.make_node("Concat", ["floor", "ceil", "round", "sign"], ["t"], axis=0),
           helper.make_node("Add", ["x", "t"], ["y"], name="live_add")],
          [vi("x", [40])], [vi("y", None)], [init("g", grid)])
write_expect("fold_rounding", folded=run_ort(m, {"x": np.zeros(40, np.float32)})[0])
angles = np.linspace(-20, 20, 41).astype(np.float32)
m = model("fold_trig",
          [helper.make_node("Sin", ["a"], ["s"]), helper.make_node("Cos", ["a"], ["c"]),
           helper.make_node("Concat", ["s", "c"], ["t"], axis=0),
           helper.make_node("Add", ["x", "t"], ["y"], name="live_add")],
          [vi("x", [82])], [vi("y", None)], [init("a", angles)])
write_expect("fold_trig", folded=run_ort(m, {"x": np.zeros(82, np.float32)})[0])
model("sin_runtime", [helper.make_node("Sin", ["x"], ["y"], name="sin_rt")],
      [vi("x", [3])], [vi("y", None)])

# RoBERTa's position ids from its token ids (int64 arithmetic at run time, in float32): Equal,
# Not, Cast to int32, CumSum, Mul, Cast to int64, Add, then Gather indices (ToIndex).
model("position_ids",
      [helper.make_node("Equal", ["ids", "pad"], ["is_pad"]),
       helper.make_node("Not", ["is_pad"], ["keep"]),
       helper.make_node("Cast", ["keep"], ["mask"], to=TensorProto.INT32),
       helper.make_node("CumSum", ["mask", "axis"], ["run"]),
       helper.make_node("Mul", ["run", "mask"], ["masked"]),
       helper.make_node("Cast", ["masked"], ["pos64"], to=I64),
       helper.make_node("Add", ["pos64", "pad"], ["pos"]),
       helper.make_node("Gather", ["table", "pos"], ["y"], name="positions")],
      [vi("ids", [2, 5], I64)], [vi("y", None)],
      [i64("pad", 1), init("axis", np.array(1, np.int32)), init("table", rand(8, 4))])
model("int_div_runtime",
      [helper.make_node("Div", ["ids", "two"], ["half"], name="halve"),
       helper.make_node("Gather", ["table", "half"], ["y"])],
      [vi("ids", [3], I64)], [vi("y", None)], [i64("two", 2), init("table", rand(8, 4))])
model("int_constant_too_big",
      [helper.make_node("Add", ["ids", "big"], ["shifted"], name="shift"),
       helper.make_node("Gather", ["table", "shifted"], ["y"])],
      [vi("ids", [3], I64)], [vi("y", None)], [i64("big", 2**30), init("table", rand(8, 4))])
model("cumsum_exclusive",
      [helper.make_node("CumSum", ["x", "axis"], ["y"], name="cs", exclusive=1)],
      [vi("x", [2, 3])], [vi("y", None)], [i64("axis", 0)])
