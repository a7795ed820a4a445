#!/usr/bin/env python3
"""Co-execution of two different models in one engine vs one after the other
(ASPEN §5), for the dataflow executor and the operator-with-barriers baseline,
in the same run. By default model A is the demo CNN (scripts/make_demo_model.py)
and model B a small MLP (256 -> 512 -> 512 -> 10, ReLU), both tiny, so the
figure is mostly scheduling; --models A.onnx B.onnx co-executes two real
models instead (e.g. MobileNetV2 and ResNet-50 from make_cnn_models.py).
Inputs are random. The driver is bench/e2e/coexec.cpp (target bench_coexec).

  .venv/bin/python bench/e2e/coexec.py [--threads 1 2] [--iterations 20] [--rounds 3] \\
      [--models A.onnx B.onnx] \\
      [--build build]      # the build folder holding bin/tessera and bin/bench_coexec
"""
import argparse
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import scratch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def make_mlp(path, seed=3, sizes=(256, 512, 512, 10)):
    rng = np.random.default_rng(seed)
    nodes, inits, x = [], [], "input"
    for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
        w = (rng.standard_normal([n_in, n_out]) * (2.0 / n_in) ** 0.5).astype(np.float32)
        b = (rng.standard_normal([n_out]) * 0.01).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"fc{i}.w"), numpy_helper.from_array(b, f"fc{i}.b")]
        nodes.append(helper.make_node("Gemm", [x, f"fc{i}.w", f"fc{i}.b"], [f"fc{i}"], name=f"fc{i}"))
        x = f"fc{i}"
        if i + 2 < len(sizes):
            nodes.append(helper.make_node("Relu", [x], [f"relu{i}"], name=f"relu{i}"))
            x = f"relu{i}"
    nodes.append(helper.make_node("Identity", [x], ["output"], name="output"))
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, sizes[0]])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, sizes[-1]])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--models", nargs=2, metavar=("A.onnx", "B.onnx"),
                    help="co-execute these two models instead of the demo CNN and the MLP")
    args = ap.parse_args()
    tessera = os.path.join(args.build, "bin", "tessera")
    driver = os.path.join(args.build, "bin", "bench_coexec")
    for exe in (tessera, driver):
        if not os.access(exe, os.X_OK):
            sys.exit(f"error: {exe} is missing (build the targets tessera and bench_coexec)")
    work = scratch.work_dir("tessera_coexec_")
    if args.models:
        for path in args.models:
            if not os.path.isfile(path):
                sys.exit(f"error: model {path} not found")
        models = list(args.models)
    else:
        models = [os.path.join(work, "demo_cnn.onnx"), os.path.join(work, "mlp.onnx")]
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make_demo_model.py"),
                        "--output", models[0], "--input-npy", os.path.join(work, "unused.npy")],
                       check=True, stdout=subprocess.DEVNULL)
        make_mlp(models[1])
    for t in args.threads:
        compiled = []
        for i, onnx_path in enumerate(models):
            stem = os.path.splitext(os.path.basename(onnx_path))[0]
            tess = os.path.join(work, f"{i}_{stem}_t{t}.tess")
            subprocess.run([tessera, "compile", onnx_path, "-o", tess, "--threads", str(t), "-q"],
                           check=True)
            compiled.append(tess)
        print(f"--- {t} thread(s)", flush=True)
        subprocess.run([driver, *compiled, "--threads", str(t), "--iterations",
                        str(args.iterations), "--warmup", str(args.warmup), "--rounds",
                        str(args.rounds), "--executor", "both"], check=True)


if __name__ == "__main__":
    main()
