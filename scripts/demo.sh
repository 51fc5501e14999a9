#!/usr/bin/env bash
# The README's demo command: installs what is missing, fetches real MNIST
# digits, builds, and trains the seed's MNIST example for 3 epochs on two CPU
# processes through our launcher (prints per-epoch test accuracy).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/install-deps.sh
bash scripts/fetch-mnist.sh
export CCACHE_DIR=${CCACHE_DIR:-/var/cache/accelerate-cpp/ccache}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target accelerate_cli mnist
echo "+ build/bin/accelerate launch --cpu --num_processes 2 build/examples/mnist --epochs 3"
exec build/bin/accelerate launch --cpu --num_processes 2 build/examples/mnist --epochs 3
