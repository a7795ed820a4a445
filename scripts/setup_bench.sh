#!/usr/bin/env bash
# Installs the peers the benchmarks compare against and that the tests do
# not need: PyTorch (eager and TorchScript), torchvision, Hugging Face
# transformers (BERT/GPT-2 modules), Apache TVM, plus the test oracles. They
# go into their own virtual environment, .venv-bench, because PyTorch's PyPI
# wheel pulls in several GiB of CUDA libraries that CI has no use for.
# Idempotent: a second run installs nothing.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/setup.sh"

venv="$root/.venv-bench"
python_packages=(numpy onnx onnxruntime onnxscript matplotlib torch torchvision transformers
                 apache-tvm)
if [ ! -x "$venv/bin/python" ]; then
  echo "setup_bench: creating $venv"
  /usr/bin/python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c "import numpy, onnx, onnxruntime, onnxscript, torch, torchvision, transformers, tvm" \
    >/dev/null 2>&1; then
  echo "setup_bench: installing Python packages: ${python_packages[*]}"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "${python_packages[@]}"
fi
