#!/usr/bin/env python3
"""Writes the demo's small CNN (conv-bn-relu, residual blocks, a concat branch,
pooling and a classifier head) as ONNX with random weights, plus an input."""
import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--output", required=True)
    ap.add_argument("--input-npy", required=True)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    nodes, inits = [], []

    def weight(name, shape, scale=None):
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        s = scale if scale is not None else (2.0 / fan_in) ** 0.5
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * s).astype(np.float32), name))
        return name

    def conv_bn_relu(x, name, cin, cout, k=3, stride=1, relu=True):
        w = weight(name + ".w", [cout, cin, k, k])
        nodes.append(helper.make_node("Conv", [x, w], [name + ".conv"], name=name,
                                      kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4))
        bn = [weight(name + ".bn.scale", [cout], 0.2), weight(name + ".bn.bias", [cout], 0.1),
              weight(name + ".bn.mean", [cout], 0.1)]
        inits.append(numpy_helper.from_array(rng.uniform(0.5, 1.5, cout).astype(np.float32), name + ".bn.var"))
        nodes.append(helper.make_node("BatchNormalization", [name + ".conv", *bn, name + ".bn.var"],
                                      [name + ".bn"], name=name + ".bn", epsilon=1e-5))
        if not relu:
            return name + ".bn"
        nodes.append(helper.make_node("Relu", [name + ".bn"], [name + ".relu"], name=name + ".relu"))
        return name + ".relu"

    x = conv_bn_relu("input", "stem", 3, 16, stride=2)                      # 16x32x32
    nodes.append(helper.make_node("MaxPool", [x], ["pool1"], name="pool1", kernel_shape=[3, 3],
                                  strides=[2, 2], pads=[1, 1, 1, 1]))       # 16x16x16
    x = "pool1"
    for i in range(2):                                                       # residual blocks
        y = conv_bn_relu(x, f"res{i}.a", 16, 16)
        y = conv_bn_relu(y, f"res{i}.b", 16, 16, relu=False)
        nodes.append(helper.make_node("Add", [x, y], [f"res{i}.add"], name=f"res{i}.add"))
        nodes.append(helper.make_node("Relu", [f"res{i}.add"], [f"res{i}.out"], name=f"res{i}.out"))
        x = f"res{i}.out"
    a = conv_bn_relu(x, "branch.a", 16, 16, k=1)                             # inception-style
    b = conv_bn_relu(x, "branch.b", 16, 16, k=3)
    nodes.append(helper.make_node("Concat", [a, b], ["cat"], name="cat", axis=1))  # 32x16x16
    x = conv_bn_relu("cat", "down", 32, 32, stride=2)                       # 32x8x8
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], name="flat", axis=1))
    w = weight("fc.w", [10, 32])
    bias = weight("fc.b", [10], 0.1)
    nodes.append(helper.make_node("Gemm", ["flat", w, bias], ["logits"], name="fc", transB=1))
    nodes.append(helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=1))

    graph = helper.make_graph(
        nodes, "small_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 64, 64])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, args.output)
    np.save(args.input_npy, rng.standard_normal([1, 3, 64, 64]).astype(np.float32))
    print(f"wrote {args.output} ({len(nodes)} nodes) and {args.input_npy}")


if __name__ == "__main__":
    main()
