#!/usr/bin/env python3
"""Writes a decoder step of transposed convolutions (a U-Net / FCN upsampling path, random
weights): ConvTranspose 256 -> 128 channels, 28x28 -> 56x56 (4x4, stride 2, pad 1), ReLU,
ConvTranspose 128 -> 64 channels, 56x56 -> 112x112 (2x2, stride 2). Compare it with
compare_ort.py:

  .venv/bin/python bench/e2e/make_decoder_model.py out/decoder.onnx
  .venv/bin/python bench/e2e/compare_ort.py --model out/decoder.onnx --threads 1 2
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def main(path: str) -> None:
  rng = np.random.default_rng(0)
  weight = lambda *shape: numpy_helper.from_array(  # noqa: E731
      (rng.standard_normal(shape) * 0.05).astype(np.float32))
  w1, w2 = weight(256, 128, 4, 4), weight(128, 64, 2, 2)
  w1.name, w2.name = "w1", "w2"
  b1 = numpy_helper.from_array(rng.standard_normal(128).astype(np.float32), "b1")
  nodes = [
      helper.make_node("ConvTranspose", ["x", "w1", "b1"], ["h"], strides=[2, 2], pads=[1, 1, 1, 1]),
      helper.make_node("Relu", ["h"], ["r"]),
      helper.make_node("ConvTranspose", ["r", "w2"], ["y"], strides=[2, 2]),
  ]
  graph = helper.make_graph(nodes, "decoder",
                            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256, 28, 28])],
                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                            [w1, b1, w2])
  onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


if __name__ == "__main__":
  main(sys.argv[1] if len(sys.argv) > 1 else "decoder.onnx")
