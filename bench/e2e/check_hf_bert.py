#!/usr/bin/env python3
"""A Hugging Face BERT export (transformers' BertModel, random weights, input_ids only) through
Tessera, against ONNX Runtime on the same file: checks that what users export from the Hub's
most common architecture imports (the export picks its token_type_ids buffer with a
GatherElements of constants, folded at import), and times both. Needs .venv-bench
(scripts/setup_bench.sh: torch and transformers).

  .venv-bench/bin/python bench/e2e/check_hf_bert.py --tessera build/bin/tessera [--layers 2]
      [--hidden 768] [--seq 128] [--threads 1 2]

An export with attention_mask does not import yet: its mask path runs on bool tensors at run time
(Cast of the int64 mask, GatherND, And, Where). The dynamo exporter's softmax NaN guard
(Where(IsNaN(p), 0, p)) imports, but keeps the attention from fusing.
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


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  ap.add_argument("--tessera", required=True)
  ap.add_argument("--layers", type=int, default=2)
  ap.add_argument("--hidden", type=int, default=768)
  ap.add_argument("--seq", type=int, default=128)
  ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
  ap.add_argument("--iterations", type=int, default=20)
  args = ap.parse_args()
  torch.manual_seed(0)
  config = BertConfig(num_hidden_layers=args.layers, hidden_size=args.hidden,
                      num_attention_heads=args.hidden // 64, intermediate_size=4 * args.hidden)
  with tempfile.TemporaryDirectory() as work:
    onnx_path = os.path.join(work, "bert.onnx")
    ids = torch.randint(0, config.vocab_size, (1, args.seq))
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      torch.onnx.export(IdsOnly(BertModel(config).eval()), (ids,), onnx_path,
                        input_names=["input_ids"], output_names=["y"], opset_version=17,
                        dynamo=False)
    ids_np = ids.numpy().astype(np.int64)
    np.save(os.path.join(work, "ids.npy"), ids_np)
    print(f"transformers BertModel: {args.layers} layers, hidden {args.hidden}, seq {args.seq}")
    print("threads  tessera ms    ort ms   ratio   max |diff|")
    for threads in args.threads:
      tess = os.path.join(work, f"bert_t{threads}.tess")
      subprocess.run([args.tessera, "compile", onnx_path, "-o", tess, "--threads", str(threads),
                      "-q"], check=True)
      out_dir = os.path.join(work, f"out{threads}")
      run = subprocess.run([args.tessera, "run", tess, "--threads", str(threads), "--iterations",
                            str(args.iterations), "--input", f"input_ids={work}/ids.npy",
                            "--output-dir", out_dir], check=True, capture_output=True, text=True)
      median = float(run.stdout.split("median")[1].split()[0])
      options = ort.SessionOptions()
      options.intra_op_num_threads = threads
      session = ort.InferenceSession(onnx_path, options, providers=["CPUExecutionProvider"])
      reference = session.run(None, {"input_ids": ids_np})[0]
      times = []
      for _ in range(args.iterations):
        t0 = time.perf_counter()
        session.run(None, {"input_ids": ids_np})
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
