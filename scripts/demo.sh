#!/usr/bin/env bash
# The main job: set up, build (Release), make a small CNN as ONNX, compile it
# with `tessera compile`, run it with `tessera run`, and check it against ONNX
# Runtime.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
"$root/scripts/build.sh" release --target tessera classify_image
out="$root/out/demo"
mkdir -p "$out"
py="$root/.venv/bin/python"
"$py" "$root/scripts/make_demo_model.py" --output "$out/small_cnn.onnx" --input-npy "$out/input.npy"
echo
build/bin/tessera compile "$out/small_cnn.onnx" -o "$out/small_cnn.tess"
echo
build/bin/tessera run "$out/small_cnn.tess" --input "input=$out/input.npy" \
  --output-dir "$out/outputs" --iterations 50 --warmup 5
echo
"$py" "$root/scripts/check_against_ort.py" "$out/small_cnn.onnx" "$out/input.npy" "$out/outputs"
echo
build/bin/classify_image "$out/small_cnn.tess"
