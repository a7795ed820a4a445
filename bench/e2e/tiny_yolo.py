"""A YOLO-style detector for issue 5's comparisons: YOLOv3-tiny's backbone and two-scale
neck (conv + batch norm + LeakyReLU(0.1) blocks, max pools including the stride-1 pool
behind a one-sided zero pad, a 1x1 reduction upsampled 2x by nearest Resize and
concatenated with the 26x26 route) with YOLOv5's space-to-depth stem (four strided
Slices and a Concat) and YOLOv5's Detect decode (per scale: Reshape, Transpose,
Sigmoid, Split into xy / wh / confidence, grid and anchor arithmetic, Concat of both
scales into [batch, boxes, 85]). 416x416 input, 80 classes, 3 anchors per scale: about
5.6 GFLOP, most of it in the 13x13 and 26x26 3x3 convolutions.

Random weights (torch_models.build seeds them); the batch-norm statistics are randomised
too, so folding them into the convolutions is exercised with non-trivial values.

compare_peers.py's max|tessera-ort|/max|ort| reads about 2.4e-4 on this model: that is ONNX
Runtime's. Against the module run in float64 (session 16, one random input), ORT with any
graph optimisation level from BASIC up differs by 2.4e-4 of the output's range (a box size,
(2 sigmoid(x))^2 times a 344-pixel anchor), ORT with none by 1.1e-7, PyTorch float32 by 1.8e-7
and Tessera by 2.1e-7.
"""
import torch
from torch import nn

SIZE = 416
CLASSES = 80
ANCHORS = [[(81, 82), (135, 169), (344, 319)], [(10, 14), (23, 27), (37, 58)]]
STRIDES = [32, 16]


def conv(c_in, c_out, k):
    bn = nn.BatchNorm2d(c_out)
    with torch.no_grad():
        bn.running_mean.uniform_(-0.1, 0.1)
        bn.running_var.uniform_(0.5, 1.5)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.1, 0.1)
    return nn.Sequential(nn.Conv2d(c_in, c_out, k, padding=k // 2, bias=False), bn,
                         nn.LeakyReLU(0.1))


class SpaceToDepth(nn.Module):
    """YOLOv5's Focus: every second pixel in four phases, stacked as channels."""

    def forward(self, x):
        return torch.cat([x[..., ::2, ::2], x[..., 1::2, ::2], x[..., ::2, 1::2],
                          x[..., 1::2, 1::2]], 1)


class Detect(nn.Module):
    """YOLOv5's Detect head in inference form: boxes in input pixels, scores in [0, 1]."""

    def __init__(self, channels):
        super().__init__()
        self.outputs = 5 + CLASSES
        self.convs = nn.ModuleList(nn.Conv2d(c, 3 * self.outputs, 1) for c in channels)
        for i, stride in enumerate(STRIDES):
            n = SIZE // stride
            ys, xs = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
            grid = torch.stack((xs, ys), 2).view(1, 1, n, n, 2).float() - 0.5
            anchor = torch.tensor(ANCHORS[i], dtype=torch.float32).view(1, 3, 1, 1, 2)
            self.register_buffer(f"grid{i}", grid)
            self.register_buffer(f"anchor{i}", anchor)

    def forward(self, features):
        boxes = []
        for i, (conv_i, x) in enumerate(zip(self.convs, features)):
            x = conv_i(x)
            b, _, h, w = x.shape
            x = x.view(b, 3, self.outputs, h, w).permute(0, 1, 3, 4, 2)
            xy, wh, conf = x.sigmoid().split((2, 2, CLASSES + 1), 4)
            xy = (xy * 2 + getattr(self, f"grid{i}")) * STRIDES[i]
            wh = (wh * 2) ** 2 * getattr(self, f"anchor{i}")
            boxes.append(torch.cat((xy, wh, conf), 4).view(b, -1, self.outputs))
        return torch.cat(boxes, 1)


class TinyYolo(nn.Module):
    def __init__(self):
        super().__init__()
        pool = nn.MaxPool2d(2, 2)
        self.stem = nn.Sequential(SpaceToDepth(), conv(12, 32, 3))                     # 208
        self.backbone = nn.Sequential(pool, conv(32, 64, 3), pool, conv(64, 128, 3),   # 52
                                      pool, conv(128, 256, 3))                         # 26
        self.deep = nn.Sequential(pool, conv(256, 512, 3), nn.ZeroPad2d((0, 1, 0, 1)),
                                  nn.MaxPool2d(2, 1), conv(512, 1024, 3),
                                  conv(1024, 256, 1))                                  # 13
        self.head13 = conv(256, 512, 3)
        self.lateral = nn.Sequential(conv(256, 128, 1), nn.Upsample(scale_factor=2))
        self.head26 = conv(384, 256, 3)
        self.detect = Detect([512, 256])

    def forward(self, x):
        route26 = self.backbone(self.stem(x))
        route13 = self.deep(route26)
        up = torch.cat((self.lateral(route13), route26), 1)
        return self.detect([self.head13(route13), self.head26(up)])
