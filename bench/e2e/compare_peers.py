#!/usr/bin/env python3
"""Issue 5's comparison: median latency of each model in Tessera and its peers, in one run,
at each thread count: ONNX Runtime (all graph optimisations on), PyTorch eager, TorchScript
(torch.jit.trace + torch.jit.freeze) and Apache TVM (Relax, ONNX frontend, tvm.compile for
the native CPU, NO autotuning: TVM's untuned CPU schedules are naive loops, so its numbers
say what TVM gives without a tuning run, not what it can reach after one).

The models are exported from PyTorch's own modules (torch_models.py,
export_torch_models.py): torchvision CNNs and Hugging Face BERT / GPT-2 with random weights.
Tessera and ONNX Runtime run the same .onnx file; PyTorch and TorchScript run the module it
was exported from (same seed, same weights). Tessera's output is checked against ONNX
Runtime's (max abs difference over ORT's max abs output printed) and PyTorch's against ONNX Runtime's too.

  ./scripts/setup_bench.sh
  .venv-bench/bin/python bench/e2e/compare_peers.py --tessera build/bin/tessera \\
      [--models resnet50 mobilenetv2 vgg16 efficientnet_b0 yolo bert gpt2] [--threads 1 2] \\
      [--batch 1] [--seq 128] [--layers 12] [--iterations 10] [--warmup 2] \\
      [--peers tessera ort torch torchscript tvm] [--tvm-iterations 3] [--rounds 1] [--json FILE]

Each peer is timed in its own process (thread pools are per process and cannot be resized
in all of them), one after the other. Ratio columns = Tessera / peer: below 1 means Tessera
is faster.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import scratch  # noqa: E402

PEERS = ["tessera", "ort", "torch", "torchscript", "tvm"]


def median_ms(fn, iterations, warmup):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


# ---- one measurement, in a child process --------------------------------------------------

def measure_ort(spec, threads):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(spec["onnx"], opts, providers=["CPUExecutionProvider"])
    feeds = {k: np.load(v) for k, v in spec["inputs"].items()}
    out = sess.run(None, feeds)[0]
    return median_ms(lambda: sess.run(None, feeds), spec["iterations"], spec["warmup"]), out


def measure_torch(spec, threads, script):
    import torch
    import torch_models

    torch.set_num_threads(threads)
    module, inputs = torch_models.build(spec["model"], spec["batch"], spec["seq"], spec["layers"])
    args = tuple(torch.from_numpy(np.load(spec["inputs"][k])) for k in inputs)
    with torch.no_grad():
        if script:
            module = torch.jit.freeze(torch.jit.trace(module, args, check_trace=False).eval())
        out = module(*args).numpy()
        ms = median_ms(lambda: module(*args), spec["iterations"], spec["warmup"])
    return ms, out


def measure_tvm(spec, threads):
    del threads  # TVM_NUM_THREADS, set by the parent before this process started
    import onnx
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    feeds = {k: np.load(v) for k, v in spec["inputs"].items()}
    mod = from_onnx(onnx.load(spec["onnx"]), shape_dict={k: list(v.shape) for k, v in feeds.items()},
                    keep_params_in_input=False)
    cpu = tvm.target.codegen.llvm_get_system_cpu()
    target = {"kind": "llvm", "mcpu": cpu}
    # LLVM names the CPU by its model (znver4 on a Zen 4 guest), which implies AVX-512 even
    # where the hypervisor hides it: the code then dies of SIGILL. Follow the kernel's flags.
    with open("/proc/cpuinfo") as f:
        flags = f.read().split()
    if "avx512f" not in flags:
        target["mattr"] = ["-avx512f"]
    ex = tvm.compile(mod, target=tvm.target.Target(target))
    vm = relax.VirtualMachine(ex, tvm.cpu())
    args = [tvm.runtime.tensor(feeds[k]) for k in feeds]
    result = vm["main"](*args)
    out = (result[0] if not hasattr(result, "numpy") else result).numpy()
    ms = median_ms(lambda: vm["main"](*args), spec["tvm_iterations"], min(spec["warmup"], 1))
    return ms, out


def child(spec_path, peer, threads, out_path):
    with open(spec_path) as f:
        spec = json.load(f)
    if peer == "ort":
        ms, out = measure_ort(spec, threads)
    elif peer in ("torch", "torchscript"):
        ms, out = measure_torch(spec, threads, script=peer == "torchscript")
    elif peer == "tvm":
        ms, out = measure_tvm(spec, threads)
    else:
        raise ValueError(peer)
    np.save(out_path, np.asarray(out, dtype=np.float32))
    print(json.dumps({"median_ms": ms}))


# ---- the parent ---------------------------------------------------------------------------

def relative_difference(a, b):
    """max |a - b| / max |b|: random-weight CNNs can end in outputs of 1e-9, where an
    absolute difference says nothing."""
    scale = float(np.max(np.abs(b))) or 1.0
    return float(np.max(np.abs(a.astype(np.float64) - b))) / scale


def run_peer(spec_path, peer, threads, work):
    out_path = os.path.join(work, f"{peer}_t{threads}_out.npy")
    env = dict(os.environ, TVM_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", spec_path, peer,
                           str(threads), out_path], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return None, None, tail[:160]
    return json.loads(proc.stdout.strip().splitlines()[-1])["median_ms"], np.load(out_path), None


def run_tessera(args, spec, threads, work):
    tess = os.path.join(work, f"tessera_t{threads}.tess")
    compile_cmd = [args.tessera, "compile", spec["onnx"], "-o", tess, "--threads", str(threads),
                   "-q", *args.compile_args.split()]
    if not os.path.exists(tess):  # compiled once per thread count, then reused by every round
        proc = subprocess.run(compile_cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            return None, None, (proc.stderr.strip().splitlines() or ["compile failed"])[-1][:160]
    out_dir = os.path.join(work, f"tessera_t{threads}_out")
    inputs = [a for k, v in spec["inputs"].items() for a in ("--input", f"{k}={v}")]
    proc = subprocess.run([args.tessera, "run", tess, *inputs, "--threads", str(threads),
                           "--iterations", str(args.iterations), "--warmup", str(args.warmup),
                           "--output-dir", out_dir, "--json"], capture_output=True, text=True)
    if proc.returncode != 0:
        return None, None, (proc.stderr.strip().splitlines() or ["run failed"])[-1][:160]
    ms = json.loads(proc.stdout)["latency_ms"]["median"]
    outs = sorted(os.listdir(out_dir))
    return ms, np.load(os.path.join(out_dir, outs[0])), None


def main():
    if len(sys.argv) == 6 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
        return
    import export_torch_models
    import torch_models

    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "bin", "tessera"))
    ap.add_argument("--models", nargs="+", default=torch_models.MODELS, choices=torch_models.MODELS)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--opset", type=int, default=18)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--tvm-iterations", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=1,
                    help="time the peers alternately this many times; each keeps its best median "
                         "(damps a shared machine's noise)")
    ap.add_argument("--peers", nargs="+", default=PEERS, choices=PEERS)
    ap.add_argument("--compile-args", default="", help="extra `tessera compile` flags")
    ap.add_argument("--models-dir", default=os.path.join(ROOT, "out", "torch_models"))
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()

    import onnxruntime
    import torch

    # TVM is imported only when it is a peer: a machine without it (the lent 16-core one)
    # still compares the others.
    tvm_version = __import__("tvm").__version__ if "tvm" in args.peers else None
    os.makedirs(args.models_dir, exist_ok=True)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus; "
          f"ONNX Runtime {onnxruntime.__version__} (ORT_ENABLE_ALL), PyTorch {torch.__version__}, "
          + (f"TVM {tvm_version} (untuned); " if tvm_version else "no TVM; ") + f"batch {args.batch}, seq {args.seq}, "
          f"transformer layers {args.layers}; median of {args.iterations} "
          f"({args.tvm_iterations} for TVM), best of {args.rounds} alternating round(s)")
    others = [p for p in args.peers if p != "tessera"]
    header = f"{'model':<16} {'thr':>3} " + " ".join(f"{p + ' ms':>14}" for p in args.peers)
    if "tessera" in args.peers:
        header += " " + " ".join(f"{'/' + p:>9}" for p in others) + "  max|tessera-ort|/max|ort|"
    print(header)
    results = []
    for name in args.models:
        onnx_path, _ = export_torch_models.export(name, args.batch, args.seq, args.layers,
                                                  args.opset, "dynamo", args.models_dir)
        work = scratch.work_dir(f"tessera_peers_{name}_")
        _, example = torch_models.build(name, args.batch, args.seq, args.layers)
        inputs = {}
        for k, v in example.items():
            inputs[k] = os.path.join(work, f"{k}.npy")
            np.save(inputs[k], v.numpy())
        spec = {"model": name, "onnx": onnx_path, "inputs": inputs, "batch": args.batch,
                "seq": args.seq, "layers": args.layers, "iterations": args.iterations,
                "warmup": args.warmup, "tvm_iterations": args.tvm_iterations}
        spec_path = os.path.join(work, "spec.json")
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        for t in args.threads:
            row = {"model": name, "threads": t}
            outs = {}
            for _ in range(args.rounds):  # alternate the peers; each keeps its best median
                for peer in args.peers:
                    if row.get(peer + "_error"):
                        continue
                    if peer == "tessera":
                        ms, out, err = run_tessera(args, spec, t, work)
                    else:
                        ms, out, err = run_peer(spec_path, peer, t, work)
                    if err:
                        row[peer] = None
                        row[peer + "_error"] = err
                        print(f"  {name} t{t} {peer}: {err}", file=sys.stderr)
                        continue
                    row[peer] = ms if row.get(peer) is None else min(row[peer], ms)
                    outs[peer] = out
            if outs.get("tessera") is not None and outs.get("ort") is not None:
                row["rel_diff_vs_ort"] = relative_difference(outs["tessera"], outs["ort"])
            if outs.get("torch") is not None and outs.get("ort") is not None:
                row["torch_rel_diff_vs_ort"] = relative_difference(outs["torch"], outs["ort"])
            results.append(row)
            cells = " ".join(f"{row[p]:>14.2f}" if row.get(p) else f"{'-':>14}" for p in args.peers)
            line = f"{name:<16} {t:>3} {cells}"
            if "tessera" in args.peers:
                ratios = [f"{row['tessera'] / row[p]:>9.2f}" if row.get("tessera") and row.get(p)
                          else f"{'-':>9}" for p in others]
                diff = row.get("rel_diff_vs_ort")
                line += " " + " ".join(ratios) + (f"  {diff:.2e}" if diff is not None else "  -")
            print(line, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
