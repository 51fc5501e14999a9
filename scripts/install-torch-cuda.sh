#!/usr/bin/env bash
# Installs the CUDA build of LibTorch that PyPI's torch wheel carries, with the
# CUDA compiler and headers CMake needs beside it, into a venv of the
# project's (never into the system), non-interactively. Versions come from
# scripts/torch-cuda-requirements.txt only; the venv is named after that
# file's hash, so it is made once and reused until the pins change.
#
# Usage:  scripts/install-torch-cuda.sh [--print-prefix]
#   prints, as its last lines, KEY=VALUE pairs the build needs:
#     TORCH_CUDA_VENV=...        the venv
#     TORCH_CMAKE_PREFIX=...     give to -DCMAKE_PREFIX_PATH
#     CUDA_TOOLKIT_ROOT=...      give to -DCUDAToolkit_ROOT
#     CUDA_NVCC=...              give to -DCMAKE_CUDA_COMPILER
# Environment:
#   ACCELERATE_CACHE_DIR   default /var/cache/accelerate-cpp
#   ACCELERATE_PYTHON      the interpreter to make the venv with
#                          (default /usr/bin/python3, Debian's 3.11)
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
requirements=$repo_root/scripts/torch-cuda-requirements.txt
cache_dir=${ACCELERATE_CACHE_DIR:-/var/cache/accelerate-cpp}
python=${ACCELERATE_PYTHON:-/usr/bin/python3}

say() { printf 'install-torch-cuda: %s\n' "$*" >&2; }
die() { printf 'install-torch-cuda: error: %s\n' "$*" >&2; exit 1; }

[[ -f "$requirements" ]] || die "$requirements not found"
[[ -x "$python" ]] || die "no Python interpreter at $python (set ACCELERATE_PYTHON)"

hash=$(sha256sum "$requirements" | cut -c1-12)
venv=$cache_dir/torch-cuda-$hash
stamp=$venv/.accelerate-installed

# One install at a time: two test runs started together would otherwise
# both empty and fill the same venv (one's rm -rf under the other's pip).
mkdir -p "$cache_dir"
exec 9>"$cache_dir/torch-cuda-$hash.lock"
flock 9 || die "could not lock $cache_dir/torch-cuda-$hash.lock"

if [[ ! -f "$stamp" || ! -x "$venv/bin/python" ]]; then
  say "installing $(grep -Ev '^\s*(#|$)' "$requirements" | tr '\n' ' ')into $venv"
  rm -rf -- "$venv"
  "$python" -m venv "$venv" ||
    die "could not make a venv with $python (Debian: apt-get install python3-venv)"
  t0=$SECONDS
  PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 \
    "$venv/bin/python" -m pip install -q --no-cache-dir -r "$requirements" </dev/null ||
    die "pip install -r $requirements failed"
  say "installed in $((SECONDS - t0)) s ($(du -sh "$venv" | cut -f1))"
  touch "$stamp"
fi

site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
prefix=$site/torch/share/cmake
[[ -f "$prefix/Torch/TorchConfig.cmake" ]] || die "no TorchConfig.cmake under $prefix"
# The CUDA pieces land in one folder (nvidia/cu13 for CUDA 13 wheels,
# nvidia/cuda_nvcc etc. for older ones): find nvcc and take its parent's parent.
nvcc=$(find "$site/nvidia" -path '*/bin/nvcc' -type f 2>/dev/null | head -n1)
[[ -n "$nvcc" ]] || die "nvcc not found under $site/nvidia (is cuda-toolkit[nvcc] pinned?)"
cuda_root=$(dirname "$(dirname "$nvcc")")
# The wheels ship only versioned libraries (libcudart.so.13); CMake's CUDA
# modules look for the development names (libcudart.so), as a toolkit
# install has them. Add those links inside the venv's CUDA folder.
for lib in "$cuda_root"/lib/lib*.so.*; do
  [[ -e "$lib" ]] || continue
  dev=${lib%%.so.*}.so
  [[ -e "$dev" ]] || ln -s "$(basename "$lib")" "$dev"
done

echo "TORCH_CUDA_VENV=$venv"
echo "TORCH_CMAKE_PREFIX=$prefix"
echo "CUDA_TOOLKIT_ROOT=$cuda_root"
echo "CUDA_NVCC=$nvcc"
