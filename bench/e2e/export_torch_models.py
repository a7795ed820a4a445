#!/usr/bin/env python3
"""Exports the models of issue 5 from PyTorch's own modules to ONNX (random weights, fixed
seed; torch_models.py builds them): torchvision ResNet-50, MobileNetV2, VGG-16,
EfficientNet-B0 (batch N, 3x224x224), a YOLO-style detector (tiny_yolo.py, 3x416x416) and
Hugging Face BertModel / GPT2Model (token ids [batch, seq]). Uses torch.onnx.export's default exporter (torch.export + onnxscript,
dynamo=True; it emits opset 18 and up); --exporter torchscript picks the older
TorchScript-based one (it cannot export current transformers' mask code: aten::diff).

  .venv-bench/bin/python bench/e2e/export_torch_models.py [--models resnet50 bert ...] \\
      [--batch 1] [--seq 128] [--layers 12] [--opset 18] [--exporter dynamo|torchscript] [--out-dir out/torch_models]

Writes OUT/<key>.onnx (key: torch_models.model_key) unless it is already there, and prints
one line per model. Needs ./scripts/setup_bench.sh.
"""
import argparse
import os
import sys
import warnings

import torch

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_models  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def export(name, batch, seq, layers, opset, exporter, out_dir):
    path = os.path.join(out_dir, torch_models.model_key(name, batch, seq, layers) + ".onnx")
    if os.path.exists(path):
        return path, False
    module, inputs = torch_models.build(name, batch, seq, layers)
    tmp = path + ".partial"
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, tuple(inputs.values()), tmp, input_names=list(inputs),
                          output_names=["output"], opset_version=opset, dynamo=exporter == "dynamo",
                          do_constant_folding=True, external_data=False)
    os.replace(tmp, path)
    return path, True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=torch_models.MODELS,
                    choices=torch_models.MODELS)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--opset", type=int, default=18)
    ap.add_argument("--exporter", choices=["dynamo", "torchscript"], default="dynamo")
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "out", "torch_models"))
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    for name in args.models:
        path, made = export(name, args.batch, args.seq, args.layers, args.opset, args.exporter,
                            args.out_dir)
        print(f"{name}: {path}{'' if made else ' (already there)'}")


if __name__ == "__main__":
    main()
