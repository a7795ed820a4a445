#!/usr/bin/env python3
"""End-to-end latency of a BERT-base encoder and a GPT-2-small decoder (random weights) in
Tessera vs ONNX Runtime on the same .onnx file, in one run, at each thread count; checks that
Tessera's output matches ORT's on the same token ids and summarises the kernels chosen.

The graphs are built with onnx.helper in the structure torch.onnx.export emits for Hugging
Face's BertModel / GPT2LMHeadModel (the same builders as the tiny models of
tests/conformance/gen_transformer_models.py, at full size): token/position/type embeddings
(Gather), LayerNormalization (opset 17) or its ReduceMean/Sub/Pow/Sqrt/Div decomposition
(opset 13), Q/K/V MatMul+Add, Reshape/Transpose to heads, scaled MatMul, additive mask or
causal Where, Softmax, Erf-GELU (BERT) or Tanh-GELU (GPT-2).

  .venv/bin/python bench/e2e/compare_transformers.py --tessera build/bin/tessera \\
      [--models bert gpt2] [--seq 128] [--batch 1] [--layers 12] [--threads 1 2] \\
      [--iterations 10] [--warmup 2] [--opset 17] [--models-dir out/transformers]

PyTorch (eager, TorchScript) and TVM are not in the project's environment: they are not
compared here (say so when quoting these numbers). Ratio = Tessera / ORT median latency.
"""
import argparse
import collections
import json
import os
import subprocess
import sys

import numpy as np
import onnx

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "conformance"))
from compare_cnns import parse_compile_report, summarise_kernels, tessera_median_ms  # noqa: E402
from compare_ort import ort_median_ms  # noqa: E402
import gen_models as gm  # noqa: E402
import gen_transformer_models as tm  # noqa: E402


def gpt2(rng, opset, batch, seq, layers, hidden=768, heads=12, vocab=50257, max_positions=1024):
  """GPT-2 small: `layers` pre-LayerNorm blocks, causal Where mask, tied LM head."""
  b = gm.GraphBuilder(rng)
  head_dim = hidden // heads
  ids = tm.int_input(b, [batch, seq], vocab, "input_ids")
  wte = b.weight([vocab, hidden], fan_in=1)
  x = b.node("Gather", [wte, ids], axis=0)
  positions = b.node("Range", [tm.i64(b, 0), tm.i64(b, seq), tm.i64(b, 1)])
  x = b.node("Add", [x, b.node("Gather", [b.weight([max_positions, hidden], fan_in=1),
                                          positions], axis=0)])
  bias = b.const(np.tril(np.ones((max_positions, max_positions), bool))[None, None], "attn_bias")
  causal = b.node("Slice", [bias, tm.i64(b, [0, 0]), tm.i64(b, [seq, seq]), tm.i64(b, [2, 3])])
  for _ in range(layers):
    h = tm.layer_norm(b, x, hidden, opset, eps=1e-5)
    qkv = tm.linear(b, h, hidden, 3 * hidden)
    q, k, v = [tm.split_heads(b, b.node("Slice", [qkv, tm.i64(b, [i * hidden]),
                                                  tm.i64(b, [(i + 1) * hidden]), tm.i64(b, [2])]),
                              heads, head_dim, opset) for i in range(3)]
    scores = b.node("MatMul", [q, b.node("Transpose", [k], perm=[0, 1, 3, 2])])
    scores = b.node("Div", [scores, tm.f32(b, float(np.sqrt(head_dim)))])
    scores = b.node("Where", [causal, scores, tm.f32(b, -3.4028234663852886e38)])
    context = tm.merge_heads(b, b.node("MatMul", [b.node("Softmax", [scores], axis=-1), v]),
                             hidden)
    x = b.node("Add", [x, tm.linear(b, context, hidden, hidden)])
    h = tm.layer_norm(b, x, hidden, opset, eps=1e-5)
    x = b.node("Add", [x, tm.linear(b, tm.gelu_tanh(b, tm.linear(b, h, hidden, 4 * hidden)),
                                    4 * hidden, hidden)])
  x = tm.layer_norm(b, x, hidden, opset, eps=1e-5)
  logits = b.node("MatMul", [x, b.node("Transpose", [wte], perm=[1, 0])])
  return b.model([logits], opset, "gpt2"), b.input_values


def bert(rng, opset, batch, seq, layers):
  case = tm.bert_encoder(rng, opset, batch=batch, seq=seq, hidden=768, heads=12, layers=layers,
                         vocab=30522)
  return case.model, case.inputs


BUILDERS = {"bert": bert, "gpt2": gpt2}


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "bin", "tessera"))
  ap.add_argument("--models", nargs="+", choices=sorted(BUILDERS), default=["bert", "gpt2"])
  ap.add_argument("--seq", type=int, default=128)
  ap.add_argument("--batch", type=int, default=1)
  ap.add_argument("--layers", type=int, default=12)
  ap.add_argument("--opset", type=int, default=17)
  ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
  ap.add_argument("--iterations", type=int, default=10)
  ap.add_argument("--warmup", type=int, default=2)
  ap.add_argument("--models-dir", default=os.path.join(ROOT, "out", "transformers"))
  args = ap.parse_args()
  sys.stdout.reconfigure(line_buffering=True)
  os.makedirs(args.models_dir, exist_ok=True)

  print(f"{'model':<28} {'threads':>7} {'tessera ms':>11} {'ORT ms':>9} {'ratio':>7}")
  for name in args.models:
    tag = f"{name}_l{args.layers}_s{args.seq}_n{args.batch}_op{args.opset}"
    onnx_path = os.path.join(args.models_dir, tag + ".onnx")
    model, inputs = BUILDERS[name](np.random.default_rng(0), args.opset, args.batch, args.seq,
                                   args.layers)
    onnx.save(model, onnx_path)
    tess = os.path.join(args.models_dir, tag + ".tess")
    report = subprocess.run([args.tessera, "compile", onnx_path, "-o", tess,
                             "--threads", str(max(args.threads))],
                            check=True, capture_output=True, text=True).stdout
    input_args, feeds = [], {}
    for input_name, value in inputs.items():
      path = os.path.join(args.models_dir, f"{tag}_{input_name}.npy")
      np.save(path, value)
      input_args += ["--input", f"{input_name}={path}"]
      feeds[input_name] = value

    # Same ids through both runtimes: the outputs must agree.
    out_dir = os.path.join(args.models_dir, tag + "_out")
    os.makedirs(out_dir, exist_ok=True)
    subprocess.run([args.tessera, "run", tess, *input_args, "--iterations", "1", "--warmup", "0",
                    "--output-dir", out_dir], check=True, capture_output=True)
    import onnxruntime as ort
    sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    worst = 0.0
    for output, ref in zip(sess.get_outputs(), sess.run(None, feeds)):
      got = np.load(os.path.join(out_dir, output.name + ".npy"))
      worst = max(worst, float(np.max(np.abs(got - ref))) / (1e-4 * (1 + float(np.max(np.abs(ref))))))
    print(f"# {tag}: outputs vs ORT: worst error {worst:.3f} of the conformance tolerance; "
          f"{summarise_kernels(parse_compile_report(report))}")
    # No ORT session (its thread pool, its GBs of tensors) stays alive while Tessera is timed.
    del sess

    for threads in args.threads:
      ours = tessera_median_ms(args.tessera, tess, input_args, threads, args.iterations,
                               args.warmup)
      theirs = ort_median_ms(onnx_path, feeds, threads, args.iterations, args.warmup)
      print(f"{tag:<28} {threads:>7} {ours:>11.2f} {theirs:>9.2f} {ours / theirs:>7.2f}")


if __name__ == "__main__":
  main()
