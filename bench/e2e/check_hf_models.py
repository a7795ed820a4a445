#!/usr/bin/env python3
"""Which Hugging Face architectures import into Tessera and match ONNX Runtime: each model is a
small random-weight instance of a transformers class (one layer, hidden 64), exported with
torch.onnx's legacy exporter (opset 17; text models with input_ids and an attention_mask whose
last quarter is padding, vision models with pixel_values), compiled, run and compared with ONNX
Runtime on the same file. Prints one line per model: max |difference| and whether every
attention fused, or the error. Needs .venv-bench (scripts/setup_bench.sh).

  .venv-bench/bin/python bench/e2e/check_hf_models.py --tessera build/bin/tessera [--models ...]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import onnxruntime as ort
import torch
import transformers as T

SMALL = dict(hidden_size=64, num_hidden_layers=1, num_attention_heads=2, intermediate_size=128)


class Text(torch.nn.Module):
  def __init__(self, model):
    super().__init__()
    self.model = model

  def forward(self, ids, mask):
    return self.model(input_ids=ids, attention_mask=mask)[0]


class Vision(torch.nn.Module):
  def __init__(self, model):
    super().__init__()
    self.model = model

  def forward(self, pixels):
    return self.model(pixel_values=pixels)[0]


def text(cls, config, seq=16):
  ids = torch.randint(0, config.vocab_size, (1, seq))
  mask = torch.ones(1, seq, dtype=torch.int64)
  mask[:, seq - seq // 4:] = 0
  return Text(cls(config).eval()), (ids, mask), ["input_ids", "attention_mask"]


def vision(cls, config, size):
  return Vision(cls(config).eval()), (torch.randn(1, 3, size, size),), ["pixel_values"]


MODELS = {
    "bert": lambda: text(T.BertModel, T.BertConfig(**SMALL)),
    "gpt2": lambda: text(T.GPT2Model, T.GPT2Config(n_embd=64, n_layer=1, n_head=2)),
    "distilbert": lambda: text(T.DistilBertModel,
                               T.DistilBertConfig(dim=64, n_layers=1, n_heads=2, hidden_dim=128)),
    "roberta": lambda: text(T.RobertaModel, T.RobertaConfig(**SMALL)),
    "albert": lambda: text(T.AlbertModel, T.AlbertConfig(embedding_size=32, **SMALL)),
    "electra": lambda: text(T.ElectraModel, T.ElectraConfig(embedding_size=32, **SMALL)),
    "t5_encoder": lambda: text(T.T5EncoderModel, T.T5Config(d_model=64, d_kv=32, d_ff=128,
                                                            num_layers=1, num_heads=2)),
    "llama": lambda: text(T.LlamaModel, T.LlamaConfig(hidden_size=64, intermediate_size=128,
                                                      num_hidden_layers=1, num_attention_heads=2,
                                                      num_key_value_heads=1)),
    "xlm_roberta": lambda: text(T.XLMRobertaModel, T.XLMRobertaConfig(**SMALL)),
    "deberta_v2": lambda: text(T.DebertaV2Model, T.DebertaV2Config(**SMALL)),
    "mpnet": lambda: text(T.MPNetModel, T.MPNetConfig(**SMALL)),
    "mistral": lambda: text(T.MistralModel, T.MistralConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1)),
    "qwen2": lambda: text(T.Qwen2Model, T.Qwen2Config(
        hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1)),
    "gpt_neox": lambda: text(T.GPTNeoXModel, T.GPTNeoXConfig(**SMALL)),
    "clip_text": lambda: text(T.CLIPTextModel, T.CLIPTextConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2)),
    "vit": lambda: vision(T.ViTModel, T.ViTConfig(image_size=32, patch_size=8, **SMALL), 32),
    "deit": lambda: vision(T.DeiTModel, T.DeiTConfig(image_size=32, patch_size=8, **SMALL), 32),
    "clip_vision": lambda: vision(T.CLIPVisionModel, T.CLIPVisionConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2,
        image_size=32, patch_size=8), 32),
    "swin": lambda: vision(T.SwinModel, T.SwinConfig(
        image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[1, 2],
        window_size=4), 32),
    "segformer": lambda: vision(T.SegformerModel, T.SegformerConfig(
        hidden_sizes=[16, 32, 48, 64], num_attention_heads=[1, 1, 2, 2], depths=[1, 1, 1, 1]), 64),
    "resnet": lambda: vision(T.ResNetModel, T.ResNetConfig(
        embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1]), 64),
    "convnext": lambda: vision(T.ConvNextModel, T.ConvNextConfig(hidden_sizes=[16, 32, 64, 128],
                                                                 depths=[1, 1, 1, 1]), 64),
}


def check(name: str, tessera: str, work: str) -> str:
  torch.manual_seed(0)
  module, example, names = MODELS[name]()
  path = os.path.join(work, f"{name}.onnx")
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch.onnx.export(module, example, path, input_names=names, output_names=["y"],
                      opset_version=17, dynamo=False)
  feeds = {n: t.numpy() for n, t in zip(names, example)}
  reference = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
  tess = os.path.join(work, f"{name}.tess")
  compiled = subprocess.run([tessera, "compile", path, "-o", tess], capture_output=True, text=True)
  if compiled.returncode:
    return "does not import: " + compiled.stderr.strip()
  inputs = []
  for n, value in feeds.items():
    np.save(os.path.join(work, f"{name}.{n}.npy"), value)
    inputs += ["--input", f"{n}={os.path.join(work, f'{name}.{n}.npy')}"]
  out_dir = os.path.join(work, f"{name}.out")
  ran = subprocess.run([tessera, "run", tess, *inputs, "--output-dir", out_dir, "--iterations",
                        "1"], capture_output=True, text=True)
  if ran.returncode:
    return "does not run: " + ran.stderr.strip()
  diff = float(np.abs(np.load(os.path.join(out_dir, "y.npy")) - reference).max())
  fused = compiled.stdout.count(" FusedAttention ")
  if not np.abs(reference).max() > 0:
    return "vacuous: ONNX Runtime's output is all zeros"
  verdict = "matches" if diff <= 1e-4 * (1 + float(np.abs(reference).max())) else "DIFFERS"
  return (f"{verdict} ONNX Runtime: max |diff| {diff:.2e} (max |ORT| "
          f"{float(np.abs(reference).max()):.2f}); {fused} attention(s) fused")


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  ap.add_argument("--tessera", required=True)
  ap.add_argument("--models", nargs="+", choices=sorted(MODELS), default=list(MODELS))
  args = ap.parse_args()
  failed = 0
  with tempfile.TemporaryDirectory() as work:
    for name in args.models:
      line = check(name, args.tessera, work)
      failed += not line.startswith("matches")
      print(f"{name:12s} {line}", flush=True)
  print(f"{len(args.models) - failed} of {len(args.models)} match ONNX Runtime")
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
