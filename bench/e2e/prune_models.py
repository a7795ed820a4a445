#!/usr/bin/env python3
"""Magnitude pruning of an ONNX model's weights (issue 6; SparTA §5.1 prunes BERT in 32x32
blocks, ResNet-50 unstructured).

What is pruned: the constant weight of every Conv (input 1), Gemm (input 1) and MatMul whose
B is a constant initializer. What is not: biases, normalisation parameters, embedding tables
(an initializer any other op reads, e.g. Gather, is left alone even where a MatMul also reads
it), and depthwise convs (group == C_out with one input channel per group; --include-depthwise
prunes them too). Every weight is pruned on its own (per-layer ratio):

  unstructured  the `ratio` fraction of its elements with the smallest |w| becomes 0 (exactly
                round(ratio * size) of them; ties broken by position);
  block         the weight seen as [K, N] (MatMul B; Gemm B, transposed back when transB;
                Conv [C_out, C_in/g*kh*kw] transposed) is cut into BxB blocks (edge blocks
                smaller), and the round(ratio * blocks) blocks with the smallest L2 norm
                (per element, so edge blocks are not pruned first) become 0;
                --keep-unstructured P then restores the largest-|w| elements of the
                pruned blocks, P of the weight's elements (SparTA Fig. 16's "block +
                1% unstructured").

  .venv/bin/python bench/e2e/prune_models.py MODEL.onnx --mode unstructured --ratio 0.9 \\
      [--mode block --block 32 --keep-unstructured 0.01] [--include-depthwise] [-o OUT.onnx]

Writes out/pruned/<model>_<mode><ratio>.onnx by default (one file; a model over protobuf's
2 GB limit is refused) and prints one line per pruned weight. The function API
(prune_model) is what tests/conformance/test_pruned_models.py and compare_sparse.py use.
Needs numpy and onnx only.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODES = ("unstructured", "block")
PROTOBUF_LIMIT = 2**31 - 1


@dataclasses.dataclass
class PrunedWeight:
    name: str       # the initializer
    op_type: str    # Conv, Gemm or MatMul
    node: str       # the first node that reads it
    shape: tuple
    density: float  # nonzero fraction after pruning


@dataclasses.dataclass
class WeightUse:
    op_type: str
    node: str
    to_kn: object  # array -> its [K, N] view (a copy is fine: blocks are ranked, not written)


def _attr(node, name, default):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def prunable_weights(model: onnx.ModelProto, include_depthwise: bool = False) -> dict:
    """{initializer name: WeightUse} for the weights prune_model prunes (see the module doc)."""
    inits = {t.name: tuple(t.dims) for t in model.graph.initializer}
    candidates, other_uses = {}, set()
    for node in model.graph.node:
        for slot, name in enumerate(node.input):
            if name not in inits:
                continue
            dims = inits[name]
            use = None
            if slot == 1 and node.op_type == "Conv" and len(dims) >= 3:
                depthwise = _attr(node, "group", 1) > 1 and dims[1] == 1
                if include_depthwise or not depthwise:
                    use = WeightUse("Conv", node.name,
                                    lambda w: w.reshape(w.shape[0], -1).T)  # [Cin*kh*kw, Cout]
            elif slot == 1 and node.op_type == "Gemm" and len(dims) == 2:
                trans_b = _attr(node, "transB", 0)
                use = WeightUse("Gemm", node.name, (lambda w: w.T) if trans_b else (lambda w: w))
            elif slot == 1 and node.op_type == "MatMul" and len(dims) == 2:
                use = WeightUse("MatMul", node.name, lambda w: w)
            if use is None:
                other_uses.add(name)  # a bias, norm parameter, table, depthwise weight, ...
            else:
                candidates.setdefault(name, use)
    return {k: v for k, v in candidates.items() if k not in other_uses}


def prune_unstructured(w: np.ndarray, ratio: float) -> np.ndarray:
    """w with exactly round(ratio * size) of its smallest-|w| elements set to 0."""
    count = int(round(ratio * w.size))
    flat = w.astype(np.float32).ravel().copy()
    if count > 0:
        flat[np.argsort(np.abs(flat), kind="stable")[:count]] = 0.0
    return flat.reshape(w.shape)


def block_keep_mask(kn: np.ndarray, ratio: float, block: int) -> np.ndarray:
    """Keep-mask of a [K, N] matrix: all but round(ratio * blocks) lowest-L2-norm BxB blocks."""
    rows, cols = kn.shape
    br, bc = -(-rows // block), -(-cols // block)
    padded = np.zeros((br * block, bc * block), np.float64)
    padded[:rows, :cols] = kn
    # L2 norm over sqrt(element count): edge blocks (smaller) are ranked like full ones
    # instead of being pruned first; for full blocks this is the L2 ranking.
    sizes = np.outer(np.minimum(block, rows - block * np.arange(br)),
                     np.minimum(block, cols - block * np.arange(bc)))
    squares = (padded.reshape(br, block, bc, block) ** 2).sum(axis=(1, 3))
    norms = np.sqrt(squares / sizes).ravel()
    keep = np.ones(norms.size, bool)
    count = int(round(ratio * norms.size))
    if count > 0:
        keep[np.argsort(norms, kind="stable")[:count]] = False
    mask = np.repeat(np.repeat(keep.reshape(br, bc), block, axis=0), block, axis=1)
    return mask[:rows, :cols]


def prune_blocks(w: np.ndarray, to_kn, ratio: float, block: int = 32,
                 keep_unstructured: float = 0.0) -> np.ndarray:
    """w with its [K, N] view's lowest-norm blocks zeroed (see the module doc)."""
    w = w.astype(np.float32)
    index = np.arange(w.size).reshape(w.shape)  # maps the [K, N] view back onto w
    kn_index = np.ascontiguousarray(to_kn(index))
    keep_kn = block_keep_mask(np.asarray(to_kn(w)), ratio, block)
    keep = np.zeros(w.size, bool)
    keep[kn_index[keep_kn]] = True
    restore = int(round(keep_unstructured * w.size))
    if restore > 0:
        dropped = np.flatnonzero(~keep)
        order = np.argsort(-np.abs(w.ravel()[dropped]), kind="stable")
        keep[dropped[order[:restore]]] = True
    return np.where(keep.reshape(w.shape), w, np.float32(0.0)).astype(np.float32)


def prune_model(model: onnx.ModelProto, mode: str, ratio: float, block: int = 32,
                keep_unstructured: float = 0.0, include_depthwise: bool = False):
    """Prunes `model`'s weights in place; returns (model, [PrunedWeight, ...])."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: expected one of {', '.join(MODES)}")
    if not 0.0 <= ratio < 1.0:
        raise ValueError(f"ratio {ratio}: expected 0 <= ratio < 1")
    if block < 1:
        raise ValueError(f"block {block}: expected >= 1")
    if keep_unstructured and mode != "block":
        raise ValueError("keep_unstructured only applies to mode 'block'")
    uses = prunable_weights(model, include_depthwise)
    pruned = []
    for init in model.graph.initializer:
        use = uses.get(init.name)
        if use is None:
            continue
        w = numpy_helper.to_array(init)
        if w.dtype != np.float32:
            continue  # int8 / fp16 weights are not this script's business
        if mode == "unstructured":
            p = prune_unstructured(w, ratio)
        else:
            p = prune_blocks(w, use.to_kn, ratio, block, keep_unstructured)
        init.CopyFrom(numpy_helper.from_array(p, init.name))
        pruned.append(PrunedWeight(init.name, use.op_type, use.node, tuple(w.shape),
                                   float(np.count_nonzero(p)) / max(1, p.size)))
    return model, pruned


def default_output(model_path: str, mode: str, ratio: float, block: int,
                   keep_unstructured: float) -> str:
    stem = os.path.splitext(os.path.basename(model_path))[0]
    tag = f"unstructured{round(ratio * 100)}" if mode == "unstructured" else \
        f"block{block}x{block}_{round(ratio * 100)}"
    if keep_unstructured:
        tag += f"_keep{keep_unstructured * 100:g}"
    return os.path.join(ROOT, "out", "pruned", f"{stem}_{tag}.onnx")


def save(model: onnx.ModelProto, path: str):
    if model.ByteSize() > PROTOBUF_LIMIT:
        raise SystemExit(f"error: {path}: the pruned model is over protobuf's 2 GB limit; "
                         "this script writes single-file models only")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".partial"
    onnx.save(model, tmp)
    os.replace(tmp, path)


def prune_file(model_path: str, out_path: str | None, mode: str, ratio: float, block: int = 32,
               keep_unstructured: float = 0.0, include_depthwise: bool = False, quiet=False):
    """Prunes MODEL.onnx into out_path (default under out/pruned/) unless it is already there."""
    out_path = out_path or default_output(model_path, mode, ratio, block, keep_unstructured)
    if os.path.exists(out_path):
        return out_path, None
    model, pruned = prune_model(onnx.load(model_path), mode, ratio, block, keep_unstructured,
                                include_depthwise)
    save(model, out_path)
    if not quiet:
        for p in pruned:
            print(f"  {p.name:<48} {p.op_type:<6} {'x'.join(map(str, p.shape)):>16} "
                  f"density {p.density:.4f}")
    return out_path, pruned


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--mode", choices=MODES, required=True)
    ap.add_argument("--ratio", type=float, required=True, help="pruned fraction per layer")
    ap.add_argument("--block", type=int, default=32, help="block side for --mode block")
    ap.add_argument("--keep-unstructured", type=float, default=0.0,
                    help="fraction of each weight's elements kept back from its pruned blocks")
    ap.add_argument("--include-depthwise", action="store_true")
    ap.add_argument("-o", "--output", help="default: out/pruned/<model>_<mode><ratio>.onnx")
    ap.add_argument("--force", action="store_true", help="overwrite an existing output")
    args = ap.parse_args()
    out = args.output or default_output(args.model, args.mode, args.ratio, args.block,
                                        args.keep_unstructured)
    if args.force and os.path.exists(out):
        os.remove(out)
    try:
        path, pruned = prune_file(args.model, out, args.mode, args.ratio, args.block,
                                  args.keep_unstructured, args.include_depthwise)
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if pruned is None:
        print(f"{path} (already there; --force to redo)")
    else:
        total = sum(int(np.prod(p.shape)) for p in pruned)
        kept = sum(p.density * int(np.prod(p.shape)) for p in pruned)
        print(f"{path}: {len(pruned)} weights pruned, overall density {kept / max(1, total):.4f}")
    return 0


if __name__ == "__main__":
    sys.dont_write_bytecode = True
    sys.exit(main())
