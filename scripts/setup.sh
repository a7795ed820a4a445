#!/usr/bin/env bash
# Installs everything Tessera needs to build and test. Idempotent: a second
# run installs nothing and returns quickly.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

debian_packages=(
  build-essential cmake ninja-build pkg-config git
  libtbb-dev libhwloc-dev libxsimd-dev
  libflatbuffers-dev flatbuffers-compiler
  doctest-dev libcli11-dev libbenchmark-dev nlohmann-json3-dev
  libprotobuf-dev protobuf-compiler libonnx-dev libdnnl-dev
  opencl-headers ocl-icd-opencl-dev pocl-opencl-icd
  python3 python3-venv
)

missing=()
for p in "${debian_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Python test oracles live in a project-local virtual environment.
venv="$root/.venv"
python_packages=(numpy onnx onnxruntime matplotlib)
if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating $venv"
  /usr/bin/python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c "import numpy, onnx, onnxruntime, matplotlib" >/dev/null 2>&1; then
  echo "setup: installing Python packages: ${python_packages[*]}"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "${python_packages[@]}"
fi
