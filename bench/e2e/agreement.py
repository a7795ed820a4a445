#!/usr/bin/env python3
"""Where Tessera's output departs from ONNX Runtime's, for one model: each thread count's
.tess (compiled for that count) on one random input, against ORT with all graph
optimisations on and with none, with the conformance test's tolerance
(max |tessera - ort| <= 1e-4 * (1 + max |ort|)) and the worst element's place; and the
model's op types with the attributes of its Resize / Upsample nodes, which exporters of
different PyTorch versions write differently. Written for the lent 16-core machine, where
the YOLO-style detector's output at 16 threads was 2.4e-4 of max |ort| away from ORT 1.30's
(session 31), while here every thread count agrees to 3e-7.

  python3 bench/e2e/agreement.py --tessera build/bin/tessera --model M.onnx [--threads 1 2 16]
"""
import argparse
import collections
import os
import re
import subprocess
import tempfile

import numpy as np
import onnx
import onnxruntime as ort


def ort_session(model, level):
    opts = ort.SessionOptions()
    opts.graph_optimization_level = level
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


def compare(got, ref):
    """(max |got - ref|, the conformance limit, the worst element's index)."""
    diff = np.abs(got.astype(np.float64) - ref)
    return diff.max(), 1e-4 * (1 + float(np.abs(ref).max())), np.unravel_index(
        int(diff.argmax()), diff.shape)


def tessera_outputs(tessera, model, work, tag, inputs, threads, flags, names):
    tess = os.path.join(work, f"t{tag}.tess")
    out_dir = os.path.join(work, f"out{tag}")
    report = subprocess.run([tessera, "compile", model, "-o", tess, "--threads", str(threads),
                             *flags], check=True, capture_output=True, text=True).stdout
    subprocess.run([tessera, "run", tess, *inputs, "--threads", str(threads), "--output-dir",
                    out_dir], check=True, capture_output=True)
    # run --output-dir's file names: characters other than [A-Za-z0-9_.-] become '_'
    files = [re.sub(r"[^A-Za-z0-9_.-]", "_", name) + ".npy" for name in names]
    return report, [np.load(os.path.join(out_dir, f)) for f in files]


def bisect(args, feeds, inputs, threads, flags, work, cuts):
    """Cuts the model after `cuts` node outputs spread over its topological order and
    compares Tessera with ORT (no graph optimisations) on each prefix."""
    import onnx.utils
    model = onnx.load(args.model)
    candidates = [n.output[0] for n in model.graph.node
                  if n.op_type not in ("Constant", "Shape", "Gather", "Unsqueeze")]
    step = max(1, len(candidates) // cuts)
    for tensor in candidates[step - 1::step]:
        sub = os.path.join(work, "cut.onnx")
        try:
            onnx.utils.extract_model(args.model, sub, list(feeds), [tensor])
            ref = ort_session(sub, ort.GraphOptimizationLevel.ORT_DISABLE_ALL).run(None, feeds)[0]
            _, (got,) = tessera_outputs(args.tessera, sub, work, "cut", inputs, threads, flags,
                                        [tensor])
        except Exception as e:  # a cut Tessera cannot take alone: say so and go on
            print(f"  cut at {tensor}: skipped ({str(e).splitlines()[0][:120]})")
            continue
        worst, limit, at = compare(got, ref)
        print(f"  cut at {tensor} {tuple(ref.shape)}: max diff {worst:.3g} "
              f"({worst / limit:.2f} of the limit) at {tuple(int(i) for i in at)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--also-no-winograd", action="store_true",
                    help="also run each thread count compiled with --no-winograd: whether a "
                    "disagreement comes from a Winograd variant the machine's costs chose")
    ap.add_argument("--bisect", type=int, default=0, metavar="N",
                    help="where a thread count is over tolerance, cut the model at N node "
                    "outputs spread over it and compare each cut: where the difference starts")
    args = ap.parse_args()

    model = onnx.load(args.model, load_external_data=False)
    print("ops:", dict(collections.Counter(n.op_type for n in model.graph.node)))
    for n in model.graph.node:
        if n.op_type in ("Resize", "Upsample"):
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
            print(f"{n.op_type} {n.name}: {attrs}")

    rng = np.random.default_rng(args.seed)
    sess = ort_session(args.model, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    names = [o.name for o in sess.get_outputs()]
    none = ort_session(args.model, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    refs = {"ort all": sess.run(None, feeds), "ort none": none.run(None, feeds)}

    with tempfile.TemporaryDirectory() as work:
        inputs = []
        for name, value in feeds.items():
            path = os.path.join(work, name + ".npy")
            np.save(path, value)
            inputs += ["--input", f"{name}={path}"]
        runs = [(t, []) for t in args.threads]
        if args.also_no_winograd:
            runs += [(t, ["--no-winograd"]) for t in args.threads]
        for threads, flags in runs:
            tag = f"{threads}{'nw' if flags else ''}"
            label = f"threads {threads:3d}{' ' + ' '.join(flags) if flags else ''}"
            report, outputs = tessera_outputs(args.tessera, args.model, work, tag, inputs,
                                              threads, flags, names)
            # The kernel choice can differ between machines (Winograd is kept by measured cost).
            for form in ("cpu.conv_winograd", "cpu.conv_winograd_2x2"):
                winograd = [line.split()[0] for line in report.splitlines()
                            if len(line.split()) > 2 and line.split()[2] == form]
                print(f"{label}: {form} on {' '.join(winograd) or 'none'}")
            over = False
            for name, got, *refs_k in zip(names, outputs, *refs.values()):
                for ref_name, ref in zip(refs, refs_k):
                    worst, limit, at = compare(got, ref)
                    over |= worst > limit
                    verdict = "ok" if worst <= limit else "OVER TOLERANCE"
                    print(f"{label} {name} vs {ref_name}: max diff {worst:.3g} "
                          f"(limit {limit:.3g}, {verdict}) at {tuple(int(i) for i in at)}: "
                          f"tessera {got[at]:.7g}, ort {ref[at]:.7g}")
            if over and args.bisect:
                bisect(args, feeds, inputs, threads, flags, work, args.bisect)

if __name__ == "__main__":
    main()
