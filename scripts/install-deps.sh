#!/usr/bin/env bash
# Installs the Debian 12 packages accelerate-cpp needs to build, test and
# cross-check. Idempotent: when everything is already installed it only asks
# dpkg (no network, well under a second); otherwise it runs `apt-get update`
# and installs what is missing, non-interactively.
#
# Usage: scripts/install-deps.sh        (as root, or with sudo available)
set -euo pipefail

packages=(
  g++ cmake ninja-build ccache lld         # toolchain (lld: fast links)
  clang                                    # tests: -Wthread-safety check (habits.thread_safety)
  clang-format                             # tests: every C++ file as .clang-format writes it (habits.format)
  libtorch-dev libgloo-dev                 # LibTorch 1.13 with c10d/Gloo
  libopenblas0-pthread                     # BLAS that torch uses at run time
  libgtest-dev libgmock-dev                # tests (GoogleTest + GoogleMock)
  python3 python3-torch                    # Python cross-checks and baselines
  python3-venv                             # the CUDA leg's venv (scripts/install-torch-cuda.sh)
  procps iproute2                          # ps/pkill/ss/ip netns used by tests
  libyaml-cpp-dev                          # CLI: config files (YAML)
  nlohmann-json3-dev                       # header-only JSON (safetensors headers, JSONL)
  libprotobuf-dev protobuf-compiler        # TensorBoard event files
  python3-protobuf python3-yaml            # tests: independent TensorBoard reader; PyYAML cross-check
  tmux                                     # tests: the config questionnaire in a real terminal
  slurm-wlm openmpi-bin                    # tests: Slurm and mpirun launches
)

say() { printf 'install-deps: %s\n' "$*"; }
die() { printf 'install-deps: error: %s\n' "$*" >&2; exit 1; }

is_installed() {
  [[ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null)" == ii* ]]
}

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  die "this script needs a Debian system (dpkg-query and apt-get not found)"
fi

missing=()
for p in "${packages[@]}"; do
  is_installed "$p" || missing+=("$p")
done
# npm only matters as a command; any npm on PATH (nodesource, nvm, ...) will do.
if ! command -v npm >/dev/null 2>&1 && ! is_installed npm; then
  missing+=(npm)
fi

if ((${#missing[@]})); then
  sudo=()
  if ((EUID != 0)); then
    command -v sudo >/dev/null 2>&1 ||
      die "missing packages (${missing[*]}) and not root: rerun as root"
    sudo=(sudo -n)
  fi
  say "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q </dev/null ||
    die "apt-get update failed"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null ||
    die "apt-get install failed for: ${missing[*]}"
else
  say "all packages present"
fi

torch_config=/usr/lib/x86_64-linux-gnu/cmake/Torch/TorchConfig.cmake
[[ -f "$torch_config" ]] ||
  die "$torch_config not found after installing libtorch-dev: LibTorch's CMake package is missing"
