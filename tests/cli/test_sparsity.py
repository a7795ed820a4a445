#!/usr/bin/env python3
"""`tessera compile --sparsity auto|FILE.json`: TeSA propagation end to end.

Checks, on a small CNN whose first conv has a pruned output channel (weights and bias 0):
  (a) --sparsity auto prints the before/after table; the second conv's weights go from 0%
      to exactly 25% pruned (its input channel 1 of 4 is Relu(0) = 0, so w2[:, 1] is dead);
  (b) the outputs are unchanged: the propagated model's outputs equal those compiled without
      --sparsity and ONNX Runtime's;
  (c) an annotation file (magnitude pruning of the classifier, a .npy keep-mask on conv2)
      prunes what it says: the outputs match ONNX Runtime on the same pruning done in numpy;
  (d) bad annotation files (missing, not JSON, unknown tensor, activation tensor, bad
      pattern, bad ratio, missing / garbage / wrong-shape mask) fail with one "error:" line;
  (e) the kernel choice sees propagated zeros: a MatMul whose weight rows propagation zeroes
      goes from a dense kernel to cpu.matmul_sparse, and still matches ONNX Runtime;
  (f) "bits": 8 on a MatMul / Gemm / Conv weight picks cpu.matmul_int8 / cpu.gemm_int8 /
      cpu.conv_int8 (on CPUs with AVX-512 VNNI or AVX2; elsewhere the report must not) and the
      outputs stay within int8_error_bound (gemm_int8.hpp) of ONNX Runtime's float32 ones,
      element by element, while the unannotated MatMul stays float;
  (g) a conv whose density lies between cpu.conv_sparse's NCHW and NHWC crossovers runs sparse
      with NHWC activations and dense with --layout nchw (the choice sees the layout it runs in).
Prints `N passed, M failed`; exits 1 if M > 0.

    test_sparsity.py --tessera PATH --work-dir DIR
"""
import json
import os
import re
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.dont_write_bytecode = True
from cli_common import cli_args, finish, run  # noqa: E402


def make_model(weights):
  inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()]
  nodes = [
      helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", kernel_shape=[3, 3],
                       pads=[1, 1, 1, 1]),
      helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
      helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", kernel_shape=[1, 1]),
      helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
      helper.make_node("GlobalAveragePool", ["r2"], ["gap"], name="gap"),
      helper.make_node("Flatten", ["gap"], ["flat"], name="flatten", axis=1),
      helper.make_node("Gemm", ["flat", "fc.weight", "fc.bias"], ["logits"], name="fc", transB=1),
  ]
  graph = helper.make_graph(nodes, "sparse_cnn",
                            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                            [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 5])],
                            inits)
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
  model.ir_version = 8
  onnx.checker.check_model(model)
  return model


def tessera_outputs(tessera, tess, x_path, out_dir):
  os.makedirs(out_dir, exist_ok=True)
  run([tessera, "run", tess, "--input", f"x={x_path}", "--output-dir", out_dir, "--iterations", 1,
       "--warmup", 0])
  return np.load(os.path.join(out_dir, "logits.npy"))


def ort_outputs(model, x):
  sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
  return sess.run(None, {"x": x})[0]


def close(a, b):
  return a.shape == b.shape and np.allclose(a, b, rtol=1e-4, atol=1e-5)


def main() -> int:
  args = cli_args()
  work = args.work_dir
  os.makedirs(work, exist_ok=True)
  rng = np.random.default_rng(611)
  weights = {
      "w1": rng.standard_normal([4, 3, 3, 3]), "b1": rng.standard_normal([4]),
      "w2": rng.standard_normal([6, 4, 1, 1]), "b2": rng.standard_normal([6]),
      "fc.weight": rng.standard_normal([5, 6]), "fc.bias": rng.standard_normal([5]),
  }
  weights["w1"][1] = 0.0
  weights["b1"][1] = 0.0
  model = make_model(weights)
  onnx_path = os.path.join(work, "sparse_cnn.onnx")
  onnx.save(model, onnx_path)
  x = rng.standard_normal([1, 3, 8, 8]).astype(np.float32)
  x_path = os.path.join(work, "x.npy")
  np.save(x_path, x)
  passed, failures = 0, []

  def check(ok, what):
    nonlocal passed
    if ok:
      passed += 1
    else:
      failures.append(what)

  # (a) the report
  auto_tess = os.path.join(work, "auto.tess")
  report = run([args.tessera, "compile", onnx_path, "-o", auto_tess, "--sparsity", "auto"]).stdout
  check("sparsity (--sparsity auto)" in report, "no sparsity summary line in the report")
  rows = {m[0]: (m[1], float(m[2]), float(m[3])) for m in re.findall(
      r"^\s+(\S+)\s+(?:weight|activation)\s+(\S+)\s+\d+\s+([0-9.]+)%\s+([0-9.]+)%\s+\d+$", report,
      re.MULTILINE)}
  check(rows.get("w2", (None, -1, -1))[1:] == (0.0, 25.0),
        f"w2 before/after {rows.get('w2')}, expected 0.0% -> 25.0%")
  check(rows.get("w1", (None, -1, -1))[1:] == (25.0, 25.0),
        f"w1 before/after {rows.get('w1')}, expected 25.0% -> 25.0%")

  # (b) outputs unchanged
  plain_tess = os.path.join(work, "plain.tess")
  run([args.tessera, "compile", onnx_path, "-o", plain_tess, "-q"])
  plain = tessera_outputs(args.tessera, plain_tess, x_path, os.path.join(work, "out_plain"))
  auto = tessera_outputs(args.tessera, auto_tess, x_path, os.path.join(work, "out_auto"))
  reference = ort_outputs(model, x)
  check(close(auto, plain), f"--sparsity auto changed the outputs: {auto} vs {plain}")
  check(close(auto, reference), f"--sparsity auto differs from ONNX Runtime: {auto} vs {reference}")

  # (c) an annotation file
  keep = (rng.random([6, 4, 1, 1]) < 0.5).astype(np.float32)
  np.save(os.path.join(work, "keep_w2.npy"), keep)
  ann = os.path.join(work, "ann.json")
  with open(ann, "w") as f:
    json.dump({"tensors": [{"tensor": "fc.weight", "pruned": "magnitude:0.5", "bits": 16},
                           {"tensor": "w2", "pruned": "mask:keep_w2.npy"}]}, f)
  ann_tess = os.path.join(work, "ann.tess")
  report = run([args.tessera, "compile", onnx_path, "-o", ann_tess, "--sparsity", ann]).stdout
  check(re.search(r"^\s+fc\.weight\s+weight\s+\S+\s+30\s+50\.0%\s+[0-9.]+%\s+16$", report,
                  re.MULTILINE) is not None, "fc.weight row: expected 50.0% before, 16 bits")
  pruned = dict(weights)
  fc = pruned["fc.weight"].astype(np.float32).copy().reshape(-1)
  fc[np.argsort(np.abs(fc), kind="stable")[:15]] = 0.0
  pruned["fc.weight"] = fc.reshape(5, 6)
  pruned["w2"] = pruned["w2"] * keep
  got = tessera_outputs(args.tessera, ann_tess, x_path, os.path.join(work, "out_ann"))
  want = ort_outputs(make_model(pruned), x)
  check(close(got, want), f"annotated model differs from ONNX Runtime: {got} vs {want}")

  # (e) the kernel choice sees the propagated zeros: 95% of mm1's output columns are zero
  # weights, Relu keeps them zero, so mm2's matching rows are dead and zeroed — dense before,
  # 5% density after, where the sparse MatMul applies.
  w1 = rng.standard_normal([64, 256]).astype(np.float32)
  w1[:, rng.permutation(256)[:243]] = 0.0
  w2 = rng.standard_normal([256, 64]).astype(np.float32)
  mm = helper.make_model(helper.make_graph(
      [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
       helper.make_node("Relu", ["h"], ["r"], name="relu"),
       helper.make_node("MatMul", ["r", "w2"], ["y"], name="mm2")], "chain",
      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 64])],
      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 64])],
      [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")]),
      opset_imports=[helper.make_opsetid("", 13)])
  mm.ir_version = 8
  mm_path = os.path.join(work, "chain.onnx")
  onnx.save(mm, mm_path)
  kernels = {}
  for flag in ([], ["--sparsity", "auto"]):
    out = run([args.tessera, "compile", mm_path, "-o", os.path.join(work, "chain.tess")] + flag).stdout
    found = re.search(r"^\s+mm2\s+MatMul\s+(\S+)", out, re.MULTILINE)
    kernels[bool(flag)] = found.group(1) if found else None
  check(kernels[False] != "cpu.matmul_sparse" and kernels[True] == "cpu.matmul_sparse",
        f"mm2 kernels without/with --sparsity auto: {kernels}, expected dense then cpu.matmul_sparse")
  x_mm = rng.standard_normal([16, 64]).astype(np.float32)
  np.save(os.path.join(work, "x_mm.npy"), x_mm)
  out_dir = os.path.join(work, "out_chain")
  os.makedirs(out_dir, exist_ok=True)
  run([args.tessera, "run", os.path.join(work, "chain.tess"), "--input",
       f"x={os.path.join(work, 'x_mm.npy')}", "--output-dir", out_dir, "--iterations", 1,
       "--warmup", 0])
  got = np.load(os.path.join(out_dir, "y.npy"))
  want = ort.InferenceSession(mm.SerializeToString(), providers=["CPUExecutionProvider"]).run(
      None, {"x": x_mm})[0]
  check(close(got, want), "the propagated sparse MatMul chain differs from ONNX Runtime")

  # (f) bit rounding: int8 where the annotation allows it
  w3 = rng.standard_normal([96, 48]).astype(np.float32)
  w4 = rng.standard_normal([48, 40]).astype(np.float32)
  w5 = rng.standard_normal([24, 48]).astype(np.float32)
  c5 = rng.standard_normal([24]).astype(np.float32)
  w6 = np.zeros([96, 64], np.float32)  # 2 of its 3 x 2 blocks of 32 x 32 hold values
  w6[0:32, 0:32] = rng.standard_normal([32, 32])
  w6[64:96, 32:64] = rng.standard_normal([32, 32])
  w7 = rng.standard_normal([24, 16, 3, 3]).astype(np.float32)
  q = helper.make_model(helper.make_graph(
      [helper.make_node("MatMul", ["x", "w3"], ["h"], name="mm_int8"),
       helper.make_node("MatMul", ["x2", "w4"], ["y2"], name="mm_float"),
       helper.make_node("Gemm", ["x2", "w5", "c5"], ["g"], name="gemm_int8", transB=1,
                        alpha=0.5),
       helper.make_node("MatMul", ["x", "w6"], ["hb"], name="mm_blocks"),
       helper.make_node("Conv", ["xc", "w7"], ["yc"], name="conv_int8", pads=[1, 1, 1, 1],
                        strides=[2, 2])],
      "int8",
      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 7, 96]),
       helper.make_tensor_value_info("x2", TensorProto.FLOAT, [5, 48]),
       helper.make_tensor_value_info("xc", TensorProto.FLOAT, [1, 16, 9, 9])],
      [helper.make_tensor_value_info("h", TensorProto.FLOAT, [2, 7, 48]),
       helper.make_tensor_value_info("y2", TensorProto.FLOAT, [5, 40]),
       helper.make_tensor_value_info("g", TensorProto.FLOAT, [5, 24]),
       helper.make_tensor_value_info("hb", TensorProto.FLOAT, [2, 7, 64]),
       helper.make_tensor_value_info("yc", TensorProto.FLOAT, [1, 24, 5, 5])],
      [numpy_helper.from_array(w3, "w3"), numpy_helper.from_array(w4, "w4"),
       numpy_helper.from_array(w5, "w5"), numpy_helper.from_array(c5, "c5"),
       numpy_helper.from_array(w6, "w6"), numpy_helper.from_array(w7, "w7")]),
      opset_imports=[helper.make_opsetid("", 13)])
  q.ir_version = 8
  q_path = os.path.join(work, "int8.onnx")
  onnx.save(q, q_path)
  bits = os.path.join(work, "bits.json")
  with open(bits, "w") as f:
    json.dump([{"tensor": "w3", "bits": 8}, {"tensor": "w5", "bits": 8},
               {"tensor": "w6", "bits": 8}, {"tensor": "w7", "bits": 8}], f)
  out = run([args.tessera, "compile", q_path, "-o", os.path.join(work, "int8.tess"), "--sparsity",
             bits]).stdout
  chosen = dict(re.findall(
      r"^\s+(mm_int8|mm_float|gemm_int8|mm_blocks|conv_int8)\s+(?:MatMul|Gemm|Conv)\s+(\S+)", out,
      re.MULTILINE))
  flags = open("/proc/cpuinfo").read().split()
  # The int8 kernels run with AVX-512 VNNI or AVX2 + FMA (gemm_int8.hpp).
  int8_cpu = "avx512_vnni" in flags or ("avx2" in flags and "fma" in flags)
  check(chosen.get("mm_float") not in (None, "cpu.matmul_int8"),
        f"the unannotated MatMul got {chosen.get('mm_float')}")
  check((chosen.get("mm_int8") == "cpu.matmul_int8") == int8_cpu,
        f"the 8-bit MatMul got {chosen.get('mm_int8')} on a CPU with{'' if int8_cpu else 'out'} VNNI or AVX2")
  check((chosen.get("mm_blocks") == "cpu.matmul_int8_blocks") == int8_cpu,
        f"the 8-bit block-pruned MatMul got {chosen.get('mm_blocks')}")
  check((chosen.get("gemm_int8") == "cpu.gemm_int8") == int8_cpu,
        f"the 8-bit Gemm got {chosen.get('gemm_int8')} on a CPU with{'' if int8_cpu else 'out'} VNNI or AVX2")
  check((chosen.get("conv_int8") == "cpu.conv_int8") == int8_cpu,
        f"the 8-bit Conv got {chosen.get('conv_int8')} on a CPU with{'' if int8_cpu else 'out'} VNNI or AVX2")
  xq = rng.standard_normal([2, 7, 96]).astype(np.float32)
  x2 = rng.standard_normal([5, 48]).astype(np.float32)
  xc = rng.standard_normal([1, 16, 9, 9]).astype(np.float32)
  np.save(os.path.join(work, "xq.npy"), xq)
  np.save(os.path.join(work, "x2.npy"), x2)
  np.save(os.path.join(work, "xc.npy"), xc)
  out_dir = os.path.join(work, "out_int8")
  os.makedirs(out_dir, exist_ok=True)
  run([args.tessera, "run", os.path.join(work, "int8.tess"), "--input",
       f"x={os.path.join(work, 'xq.npy')}", "--input", f"x2={os.path.join(work, 'x2.npy')}",
       "--input", f"xc={os.path.join(work, 'xc.npy')}", "--output-dir", out_dir, "--iterations", 1,
       "--warmup", 0])
  h = np.load(os.path.join(out_dir, "h.npy")).reshape(14, 48).astype(np.float64)
  want_h, want_y2, want_g, want_hb, want_yc = ort.InferenceSession(
      q.SerializeToString(), providers=["CPUExecutionProvider"]).run(
          None, {"x": xq, "x2": x2, "xc": xc})
  def int8_bound(a, b):  # int8_error_bound() of gemm_int8.hpp, for every element of a @ b
    a, b = np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64))
    ea = a.max(axis=1, keepdims=True) / 127 / 2
    eb = b.max(axis=0, keepdims=True) / 127 / 2
    return (a.sum(axis=1, keepdims=True) * eb + b.sum(axis=0, keepdims=True) * ea +
            a.shape[1] * ea * eb +
            1e-5 * (a @ b + a.sum(axis=1, keepdims=True) * b.max(axis=0, keepdims=True) +
                    b.sum(axis=0, keepdims=True) * a.max(axis=1, keepdims=True)))

  g = np.load(os.path.join(out_dir, "g.npy")).astype(np.float64)
  hb = np.load(os.path.join(out_dir, "hb.npy")).reshape(14, 64).astype(np.float64)
  # The conv's patches [25 pixels, (c, kh, kw)], zero-padded, stride 2 (never Winograd's),
  # against W [24, 144]^T.
  padded = np.pad(xc[0], ((0, 0), (1, 1), (1, 1)))
  patches = np.stack([padded[:, 2 * i:2 * i + 3, 2 * j:2 * j + 3].reshape(-1)
                      for i in range(5) for j in range(5)])
  yc = np.load(os.path.join(out_dir, "yc.npy")).reshape(24, 25).T.astype(np.float64)
  for name, err, bound in (
      ("MatMul", np.abs(h - want_h.reshape(14, 48)), int8_bound(xq.reshape(14, 96), w3)),
      ("Gemm", np.abs(g - want_g), int8_bound(x2, 0.5 * w5.T)),
      ("block MatMul", np.abs(hb - want_hb.reshape(14, 64)), int8_bound(xq.reshape(14, 96), w6)),
      ("Conv", np.abs(yc - want_yc.reshape(24, 25).T), int8_bound(patches, w7.reshape(24, -1).T))):
    check(bool(np.all(err <= bound)), f"int8 {name} error {err.max():.3g} exceeds its bound")
    if int8_cpu:  # int8 really ran: not bit-equal to float32
      check(err.max() > 0, f"the int8 {name} equals float32 exactly: quantization did not run")
  check(close(np.load(os.path.join(out_dir, "y2.npy")), want_y2),
        "the float MatMul beside the int8 one differs from ONNX Runtime")

  # (d) bad files
  def write(name, text):
    path = os.path.join(work, name)
    with open(path, "w") as f:
      f.write(text)
    return path

  with open(os.path.join(work, "garbage.npy"), "wb") as f:
    f.write(b"\x93NUMPY garbage")
  np.save(os.path.join(work, "wrong_shape.npy"), np.ones([3, 3], np.float32))
  bad = {
      "missing file": os.path.join(work, "no_such.json"),
      "not JSON": write("bad1.json", "{\"tensors\": [}"),
      "unknown tensor": write("bad2.json", '[{"tensor": "w9", "pruned": "zeros"}]'),
      "activation": write("bad3.json", '[{"tensor": "r1", "pruned": "zeros"}]'),
      "bad pattern": write("bad4.json", '[{"tensor": "w2", "pruned": "blocks:4x4"}]'),
      "bad ratio": write("bad5.json", '[{"tensor": "w2", "pruned": "magnitude:2"}]'),
      "missing mask": write("bad6.json", '[{"tensor": "w2", "pruned": "mask:none.npy"}]'),
      "garbage mask": write("bad7.json", '[{"tensor": "w2", "pruned": "mask:garbage.npy"}]'),
      "wrong-shape mask": write("bad8.json", '[{"tensor": "w2", "pruned": "mask:wrong_shape.npy"}]'),
      "unknown key": write("bad9.json", '[{"tensor": "w2", "prune": "zeros"}]'),
  }
  for what, path in bad.items():
    r = run([args.tessera, "compile", onnx_path, "-o", os.path.join(work, "bad.tess"),
             "--sparsity", path], check=False)
    lines = r.stderr.strip().splitlines()
    check(0 < r.returncode < 128 and len(lines) == 1 and lines[0].startswith("error:"),
          f"{what}: exit {r.returncode}, stderr {r.stderr!r}")

  # (g) the kernel choice sees the layout the conv will run in: a 3x3 conv at 25% density, 14x14
  # (no Winograd), sits between cpu.conv_sparse's NCHW bound against cpu.conv_gemm (20%) and
  # its NHWC one (30%): sparse with NHWC activations, dense with --layout nchw, same outputs.
  wl = rng.standard_normal([16, 16, 3, 3]).astype(np.float32)
  wl[rng.random(wl.shape) >= 0.25] = 0.0
  layout_nodes = [
      helper.make_node("Conv", ["x", "wa"], ["ca"], name="conv_a", kernel_shape=[1, 1]),
      helper.make_node("Relu", ["ca"], ["ra"], name="relu_a"),
      helper.make_node("Conv", ["ra", "wl"], ["cl"], name="conv_pruned", kernel_shape=[3, 3],
                       pads=[1, 1, 1, 1]),
      helper.make_node("Relu", ["cl"], ["rl"], name="relu_l"),
      helper.make_node("Conv", ["rl", "wb"], ["y"], name="conv_b", kernel_shape=[1, 1]),
  ]
  layout_model = helper.make_model(
      helper.make_graph(layout_nodes, "layout_choice",
                        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 14, 14])],
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 14, 14])],
                        [numpy_helper.from_array(rng.standard_normal([16, 3, 1, 1]).astype(np.float32), "wa"),
                         numpy_helper.from_array(wl, "wl"),
                         numpy_helper.from_array(rng.standard_normal([8, 16, 1, 1]).astype(np.float32), "wb")]),
      opset_imports=[helper.make_opsetid("", 13)])
  layout_model.ir_version = 8
  layout_path = os.path.join(work, "layout_choice.onnx")
  onnx.save(layout_model, layout_path)
  xl = rng.standard_normal([1, 3, 14, 14]).astype(np.float32)
  xl_path = os.path.join(work, "xl.npy")
  np.save(xl_path, xl)
  want = ort.InferenceSession(layout_model.SerializeToString(),
                              providers=["CPUExecutionProvider"]).run(None, {"x": xl})[0]
  for layout, kernel in (("auto", "cpu.conv_sparse"), ("nchw", "cpu.conv_gemm")):
    tess = os.path.join(work, f"layout_{layout}.tess")
    report = run([args.tessera, "compile", layout_path, "-o", tess, "--sparsity", "auto",
                  "--layout", layout]).stdout
    chosen = re.search(r"^\s+conv_pruned\s+Conv\s+(\S+)", report, re.MULTILINE)
    check(chosen is not None and chosen.group(1) == kernel,
          f"--layout {layout}: conv_pruned ran {chosen.group(1) if chosen else '?'}, want {kernel}")
    out_dir = os.path.join(work, f"out_layout_{layout}")
    os.makedirs(out_dir, exist_ok=True)
    run([args.tessera, "run", tess, "--input", f"x={xl_path}", "--output-dir", out_dir,
         "--iterations", 1, "--warmup", 0])
    got = np.load(os.path.join(out_dir, "y.npy"))
    check(got.shape == want.shape and np.allclose(got, want, rtol=1e-4, atol=1e-4),
          f"--layout {layout}: outputs differ from ONNX Runtime by "
          f"{np.abs(got - want).max() if got.shape == want.shape else got.shape}")

  return finish(failures, f"{passed} passed, {len(failures)} failed")


if __name__ == "__main__":
  sys.exit(main())
