#!/usr/bin/env python3
"""Compares `tessera run` outputs (DIR/NAME.npy) with ONNX Runtime on the same
model and input; exits non-zero when any output is outside the tolerance
max|err| <= 1e-4 * (1 + max|reference|)."""
import re
import sys

import numpy as np
import onnxruntime as ort


def main():
    model, input_npy, out_dir = sys.argv[1:4]
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    x = np.load(input_npy)
    refs = sess.run(None, {sess.get_inputs()[0].name: x})
    ok = True
    for meta, ref in zip(sess.get_outputs(), refs):
        got = np.load(f"{out_dir}/{re.sub(r'[^A-Za-z0-9_.-]', '_', meta.name)}.npy")
        err = float(np.max(np.abs(got - ref))) if ref.size else 0.0
        tol = 1e-4 * (1 + float(np.max(np.abs(ref))) if ref.size else 1.0)
        good = got.shape == ref.shape and err <= tol
        ok &= good
        print(f"check vs ONNX Runtime: output {meta.name} {list(ref.shape)}: max abs error {err:.3g} "
              f"(tolerance {tol:.3g}) {'OK' if good else 'MISMATCH'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
