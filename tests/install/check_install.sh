#!/usr/bin/env bash
# Installs the built project into a temporary prefix, builds a separate
# consumer project with find_package(accelerate), and runs it.
# Usage: check_install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
source=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
assert_file() { test -e "$1" || { echo "FAIL: $1 was not installed"; exit 1; }; }
assert_file "$work/prefix/bin/accelerate"
assert_file "$work/prefix/include/accelerate/accelerate.h"
assert_file "$work/prefix/libexec/accelerate/accelerate-sanity-check"
# The installed `accelerate test` finds its sanity program and passes.
HF_HOME="$work" "$work/prefix/bin/accelerate" test --cpu --num_processes 2 --main_process_port 0 \
  | grep -q "Test is a success!" || { echo "FAIL: the installed 'accelerate test' did not succeed"; exit 1; }
# A CUDA LibTorch's CMake files need the CUDA toolkit the build used.
cuda_args=()
for var in CUDAToolkit_ROOT CUDA_TOOLKIT_ROOT_DIR CMAKE_CUDA_COMPILER; do
  value=$(sed -nE "s/^$var:[A-Z]+=(.+)$/\1/p" "$build/CMakeCache.txt" | head -n1)
  [[ -z "$value" || "$value" == *NOTFOUND ]] || cuda_args+=("-D$var=$value")
done
cmake -S "$source/tests/install/consumer" -B "$work/consumer" -G Ninja \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release "${cuda_args[@]}" >/dev/null
cmake --build "$work/consumer" >/dev/null
out=$(LD_LIBRARY_PATH="$work/prefix/lib:${LD_LIBRARY_PATH:-}" "$work/consumer/consumer")
echo "$out"
# assert: the consumer ran against the installed library
grep -q "consumer ok: 0.1.0 rank 0/1 .* rope llama3" <<<"$out" || { echo "FAIL: unexpected consumer output"; exit 1; }
