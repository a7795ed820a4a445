#!/usr/bin/env python3
"""Writes ResNet-50 and MobileNetV2 as ONNX (opset 13, batch 1, 3x224x224) with
random weights, without torch: the graphs follow torchvision's architectures
(ResNet-50 v1.5 with the stride on the 3x3 conv; MobileNetV2's inverted-residual
table), built node by node with onnx.helper.

  .venv/bin/python bench/e2e/make_cnn_models.py OUT_DIR [--seed 0] [--models resnet50 mobilenetv2]

Conv weights use He init, BatchNormalization gets random statistics (so the
folded scales are not all one), and the classifier is Gemm with transB=1 like
torch.onnx's export of nn.Linear.
"""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class GraphBuilder:
    def __init__(self, rng):
        self.rng = rng
        self.nodes, self.inits = [], []

    def _init(self, name, array):
        self.inits.append(numpy_helper.from_array(array.astype(np.float32), name))
        return name

    def conv(self, x, name, cin, cout, k, stride=1, groups=1):
        fan_in = (cin // groups) * k * k
        w = self._init(name + ".weight",
                       self.rng.standard_normal([cout, cin // groups, k, k]) * (2.0 / fan_in) ** 0.5)
        self.nodes.append(helper.make_node("Conv", [x, w], [name], name=name, kernel_shape=[k, k],
                                           strides=[stride, stride], pads=[(k - 1) // 2] * 4,
                                           group=groups, dilations=[1, 1]))
        return name

    def batch_norm(self, x, name, channels):
        rng = self.rng
        inputs = [x,
                  self._init(name + ".weight", rng.uniform(0.5, 1.5, channels)),
                  self._init(name + ".bias", rng.standard_normal(channels) * 0.1),
                  self._init(name + ".running_mean", rng.standard_normal(channels) * 0.1),
                  self._init(name + ".running_var", rng.uniform(0.5, 1.5, channels))]
        self.nodes.append(helper.make_node("BatchNormalization", inputs, [name], name=name,
                                           epsilon=1e-5, momentum=0.9))
        return name

    def relu(self, x, name):
        self.nodes.append(helper.make_node("Relu", [x], [name], name=name))
        return name

    def relu6(self, x, name):
        # torch.onnx exports ReLU6 at opset >= 11 as Clip with min/max inputs.
        lo = self._init(name + ".min", np.array(0.0))
        hi = self._init(name + ".max", np.array(6.0))
        self.nodes.append(helper.make_node("Clip", [x, lo, hi], [name], name=name))
        return name

    def add(self, a, b, name):
        self.nodes.append(helper.make_node("Add", [a, b], [name], name=name))
        return name

    def conv_bn(self, x, name, cin, cout, k, stride=1, groups=1, act=None):
        y = self.batch_norm(self.conv(x, name + ".conv", cin, cout, k, stride, groups), name + ".bn", cout)
        if act == "relu":
            y = self.relu(y, name + ".relu")
        elif act == "relu6":
            y = self.relu6(y, name + ".relu6")
        return y

    def head(self, x, channels, classes=1000):
        self.nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"], name="gap"))
        self.nodes.append(helper.make_node("Flatten", ["gap"], ["flatten"], name="flatten", axis=1))
        bound = 1.0 / channels ** 0.5
        w = self._init("fc.weight", self.rng.uniform(-bound, bound, [classes, channels]))
        b = self._init("fc.bias", self.rng.uniform(-bound, bound, [classes]))
        self.nodes.append(helper.make_node("Gemm", ["flatten", w, b], ["logits"], name="fc",
                                           alpha=1.0, beta=1.0, transB=1))
        return "logits"

    def model(self, name, output):
        graph = helper.make_graph(
            self.nodes, name,
            [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 224, 224])],
            [helper.make_tensor_value_info(output, TensorProto.FLOAT, [1, 1000])], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                                  producer_name="tessera-bench")
        model.ir_version = 8
        onnx.checker.check_model(model, full_check=True)
        return model


def resnet50(rng):
    """torchvision resnet50: Bottleneck blocks [3, 4, 6, 3], expansion 4, v1.5."""
    g = GraphBuilder(rng)
    x = g.conv_bn("input", "stem", 3, 64, 7, stride=2, act="relu")  # 64x112x112
    g.nodes.append(helper.make_node("MaxPool", [x], ["maxpool"], name="maxpool", kernel_shape=[3, 3],
                                    strides=[2, 2], pads=[1, 1, 1, 1]))  # 64x56x56
    x, cin = "maxpool", 64
    for stage, (width, blocks, stride) in enumerate([(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]):
        cout = width * 4
        for i in range(blocks):
            s = stride if i == 0 else 1
            p = f"layer{stage + 1}.{i}"
            y = g.conv_bn(x, p + ".a", cin, width, 1, act="relu")
            y = g.conv_bn(y, p + ".b", width, width, 3, stride=s, act="relu")
            y = g.conv_bn(y, p + ".c", width, cout, 1)
            shortcut = x
            if s != 1 or cin != cout:
                shortcut = g.conv_bn(x, p + ".downsample", cin, cout, 1, stride=s)
            x = g.relu(g.add(y, shortcut, p + ".add"), p + ".relu")
            cin = cout
    return g.model("resnet50", g.head(x, 2048))


def mobilenetv2(rng):
    """torchvision mobilenet_v2 (width 1.0): inverted residuals with ReLU6."""
    g = GraphBuilder(rng)
    x = g.conv_bn("input", "features.0", 3, 32, 3, stride=2, act="relu6")  # 32x112x112
    cin, index = 32, 1
    table = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
             (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]
    for t, c, n, s in table:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            p = f"features.{index}"
            y = x
            if t != 1:
                y = g.conv_bn(y, p + ".expand", cin, hidden, 1, act="relu6")
            y = g.conv_bn(y, p + ".dw", hidden, hidden, 3, stride=stride, groups=hidden, act="relu6")
            y = g.conv_bn(y, p + ".project", hidden, c, 1)
            if stride == 1 and cin == c:
                y = g.add(x, y, p + ".add")
            x, cin, index = y, c, index + 1
    x = g.conv_bn(x, f"features.{index}", cin, 1280, 1, act="relu6")  # 1280x7x7
    return g.model("mobilenetv2", g.head(x, 1280))


BUILDERS = {"resnet50": resnet50, "mobilenetv2": mobilenetv2}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir", help="directory to write <model>.onnx into")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--models", nargs="+", choices=sorted(BUILDERS), default=["resnet50", "mobilenetv2"])
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    for name in args.models:
        model = BUILDERS[name](np.random.default_rng(args.seed))
        path = os.path.join(args.out_dir, name + ".onnx")
        onnx.save(model, path)
        params = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
        print(f"wrote {path}: {len(model.graph.node)} nodes, {params / 1e6:.2f} M parameters (seed {args.seed})")


if __name__ == "__main__":
    main()
