#!/usr/bin/env python3
"""A Hugging Face BERT export (transformers' BertModel, random weights) through Tessera, against
ONNX Runtime on the same file: checks that what users export from the Hub's most common
architecture imports (the export picks its token_type_ids buffer with a GatherElements of
constants, folded at import), and times both. Needs .venv-bench (scripts/setup_bench.sh: torch and
transformers).

  .venv-bench/bin/python bench/e2e/check_hf_bert.py --tessera build/bin/tessera [--layers 2]
      [--hidden 768] [--seq 128] [--threads 1 2] [--mask] [--exporter legacy|dynamo]

--mask exports input_ids and attention_mask (the last quarter of the tokens padding): the mask
path runs at run time (Cast of the int64 mask to bool, Gather or GatherND, And, Where), and the
softmax NaN guard Where(IsNaN(p), 0, p) both exporters then write fuses into the attention.
--exporter dynamo uses torch.onnx's dynamo exporter (opset 18) instead of the legacy one (17).
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np
import onnxruntime as ort
import torch
from transformers import BertConfig, BertModel


class IdsOnly(torch.nn.Module):
  def __init__(self, model):
    super().__init__()
    self.model = model

  def forward(self, ids):
    return self.model(input_ids=ids).last_hidden_state


class IdsAndMask(IdsOnly):
  def forward(self, ids, mask):
    return self.model(input_ids=ids, attention_mask=mask).last_hidden_state


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  ap.add_argument("--tessera", required=True)
  ap.add_argument("--layers", type=int, default=2)
  ap.add_argument("--hidden", type=int, default=768)
  ap.add_argument("--seq", type=int, default=128)
  ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
  ap.add_argument("--iterations", type=int, default=20)
  ap.add_argument("--mask", action="store_true", help="export and feed attention_mask too")
  ap.add_argument("--exporter", choices=["legacy", "dynamo"], default="legacy")
  args = ap.parse_args()
  torch.manual_seed(0)
  config = BertConfig(num_hidden_layers=args.layers, hidden_size=args.hidden,
                      num_attention_heads=args.hidden // 64, intermediate_size=4 * args.hidden)
  with tempfile.TemporaryDirectory() as work:
    onnx_path = os.path.join(work, "bert.onnx")
    ids = torch.randint(0, config.vocab_size, (1, args.seq))
    mask = torch.ones(1, args.seq, dtype=torch.int64)
    mask[:, args.seq - args.seq // 4:] = 0
    bert = BertModel(config).eval()
    module, example, names = ((IdsAndMask(bert), (ids, mask), ["input_ids", "attention_mask"])
                              if args.mask else (IdsOnly(bert), (ids,), ["input_ids"]))
    dynamo = args.exporter == "dynamo"
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      torch.onnx.export(module, example, onnx_path, input_names=names, output_names=["y"],
                        opset_version=18 if dynamo else 17, dynamo=dynamo)
    feeds = {name: t.numpy().astype(np.int64) for name, t in zip(names, example)}
    input_args = []
    for name, value in feeds.items():
      np.save(os.path.join(work, f"{name}.npy"), value)
      input_args += ["--input", f"{name}={work}/{name}.npy"]
    print(f"transformers BertModel: {args.layers} layers, hidden {args.hidden}, seq {args.seq}, "
          f"{args.exporter} exporter, inputs {', '.join(names)}")
    print("threads  tessera ms    ort ms   ratio   max |diff|")
    for threads in args.threads:
      tess = os.path.join(work, f"bert_t{threads}.tess")
      subprocess.run([args.tessera, "compile", onnx_path, "-o", tess, "--threads", str(threads),
                      "-q"], check=True)
      out_dir = os.path.join(work, f"out{threads}")
      run = subprocess.run([args.tessera, "run", tess, "--threads", str(threads), "--iterations",
                            str(args.iterations), *input_args, "--output-dir", out_dir], check=True, capture_output=True, text=True)
      median = float(run.stdout.split("median")[1].split()[0])
      options = ort.SessionOptions()
      options.intra_op_num_threads = threads
      session = ort.InferenceSession(onnx_path, options, providers=["CPUExecutionProvider"])
      reference = session.run(None, feeds)[0]
      times = []
      for _ in range(args.iterations):
        t0 = time.perf_counter()
        session.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1e3)
      ort_ms = float(np.median(times))
      diff = float(np.abs(np.load(os.path.join(out_dir, "y.npy")) - reference).max())
      print(f"{threads:7d} {median:11.3f} {ort_ms:9.3f} {median / ort_ms:7.2f}   {diff:.2e}")
      if not diff < 1e-3:
        print("output differs from ONNX Runtime's")
        return 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
