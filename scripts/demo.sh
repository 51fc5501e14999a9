#!/usr/bin/env bash
# The README's demo command: installs what is missing, builds, and runs the
# main demo on two CPU processes through our launcher.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/install-deps.sh
export CCACHE_DIR=${CCACHE_DIR:-/var/cache/accelerate-cpp/ccache}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target accelerate_cli hello_distributed
echo "+ build/bin/accelerate launch --cpu --num_processes 2 build/examples/hello_distributed"
exec build/bin/accelerate launch --cpu --num_processes 2 build/examples/hello_distributed
