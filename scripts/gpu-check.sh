#!/usr/bin/env bash
# The one-call GPU check (docs/gpu.md): on a machine with a GPU, PyTorch 2.x
# (its LibTorch), CMake and nvcc, but no network and no Debian packages, it
# builds only what it runs and then
#   1. runs every GPU test (build-gpu/tests/gpu/gpu_test: NCCL collectives
#      through our Communicator, a Llama split by tensor parallelism over NCCL
#      with 2 GPUs or more, the reducer with CUDA buckets, CUDA autocast,
#      the GradScaler's fused kernels against the portable path, ZeRO-3 with
#      pinned CPU offload, pin_memory),
#   2. trains examples/mnist on the GPU in fp32, bf16 and fp16 (accuracy,
#      ms/step, skipped steps),
#   3. times the GPT example in bf16 against bench/gpt/gpt_twin.py on the same
#      GPU in the same run (tokens/s and their ratio),
#   4. ZeRO-3 with CPU offload against no offload: over NCCL with 2 GPUs; on
#      one GPU, the GPT example offloaded against its plain run,
# writing one summary file, and stops by itself before its time budget
# (GPU_CHECK_BUDGET seconds, default 510: inside the device tool's 9 minutes).
# Steps that do not fit in the time left, or cannot run here, are printed as
# skipped with the reason. Without a GPU it checks what it can (the
# toolchain, and configure with the compat probes when a CUDA LibTorch is
# found), says "no GPU" and exits 0.
#
# Usage:
#   bash scripts/gpu-check.sh --prepare   on a machine with the project's
#       Debian packages (scripts/install-deps.sh) and data (fetch-mnist.sh,
#       fetch-brown.sh): fills .gpu-deps/ (ignored) with the header-only
#       dependencies the GPU machine lacks: nlohmann-json, Gloo's headers
#       (PyPI's torch wheel ships none) and GoogleTest's sources.
#   bash scripts/gpu-check.sh             on the GPU machine, from the
#       checkout root, with .gpu-deps/, data/mnist and data/brown carried.
#
# Environment:
#   GPU_CHECK_BUDGET  seconds in all (default 510)
#   TORCH_PYTHON      a Python with torch (default: python3, else the CUDA
#                     leg's venv from scripts/install-torch-cuda.sh if present)
#   OUT               where the summary goes (default build-gpu/);
#                     the device tool sets it
set -uo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$repo_root"
deps=$repo_root/.gpu-deps
build=$repo_root/build-gpu
budget=${GPU_CHECK_BUDGET:-510}
# ---- --prepare: gather what the GPU machine lacks ---------------------------
if [[ "${1:-}" == --prepare ]]; then
  rm -rf "$deps"
  mkdir -p "$deps/include"
  for needed in /usr/include/nlohmann /usr/include/gloo /usr/src/googletest; do
    [[ -d "$needed" ]] || { echo "gpu-check: $needed missing: run scripts/install-deps.sh" >&2; exit 1; }
  done
  cp -r /usr/include/nlohmann /usr/include/gloo "$deps/include/"
  cp -r /usr/src/googletest "$deps/googletest"
  for data in data/mnist/train-images-idx3-ubyte data/brown/train.txt; do
    [[ -f "$data" ]] || echo "gpu-check: warning: $data missing (scripts/fetch-mnist.sh, fetch-brown.sh): its step will be skipped" >&2
  done
  echo "gpu-check: .gpu-deps/ ready ($(du -sh "$deps" | cut -f1)); carry .gpu-deps, data/mnist and data/brown"
  exit 0
fi

summary=${OUT:-$build}/gpu-check-summary.txt
mkdir -p "$(dirname "$summary")" "$build"
: >"$summary"

say() { printf '%s\n' "$*" | tee -a "$summary"; }
left() { echo $((budget - SECONDS)); }

# ---- the machine ----------------------------------------------------------------
python=${TORCH_PYTHON:-}
if [[ -z "$python" ]]; then
  if python3 -c 'import torch' 2>/dev/null; then
    python=python3
  else
    venv=$(ls -d /var/cache/accelerate-cpp/torch-cuda-*/ 2>/dev/null | head -n1)
    [[ -n "$venv" && -x "$venv/bin/python" ]] && python=$venv/bin/python
  fi
fi
say "gpu-check: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, budget ${budget}s"
gpus=0
if [[ -n "$python" ]]; then
  facts=$("$python" - <<'EOF' 2>&1
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "hip", getattr(torch.version, "hip", None))
n = torch.cuda.device_count() if torch.cuda.is_available() else 0
for i in range(n):
    p = torch.cuda.get_device_properties(i)
    print("device %d: %s, %.1f GiB, capability %d.%d" % (i, p.name, p.total_memory / 2**30, p.major, p.minor))
print("gpus", n)
EOF
  ) || facts="gpus 0"
  # stderr is kept (a torch that fails to import says why); NumPy's absence is noise
  facts=$(grep -v -e 'Failed to initialize NumPy' -e '_conversion_method_template' <<<"$facts")
  while read -r line; do [[ "$line" == gpus* ]] || say "  $line"; done <<<"$facts"
  gpus=$(sed -nE 's/^gpus ([0-9]+)$/\1/p' <<<"$facts" | tail -n1)
  gpus=${gpus:-0}
else
  say "  no Python with torch (set TORCH_PYTHON): cannot find LibTorch"
fi
for tool in cmake nvcc nvidia-smi; do
  if command -v "$tool" >/dev/null; then say "  $tool: $("$tool" --version 2>/dev/null | grep -m1 -iE 'version|release|NVIDIA' | sed 's/^ *//')"
  else say "  $tool: not found"; fi
done

# ---- configure (also without a GPU: the probes say what compiles) -----------------
configured=0
if [[ -n "$python" ]]; then
  torch_cmake=$("$python" -W ignore -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null)
  site=$(dirname "$(dirname "$(dirname "$torch_cmake")")")  # .../site-packages/torch/share/cmake
  cmake_args=(-S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DACCELERATE_BUILD_CLI=OFF
              -DACCELERATE_BUILD_BENCH=OFF -DACCELERATE_TEST_SHARDS=0)
  prefix=$torch_cmake
  if [[ -d "$deps" ]]; then
    # GoogleTest from its carried sources, once, into the build folder.
    if [[ ! -d "$build/_gtest/install" ]]; then
      timeout "$(left)" cmake -S "$deps/googletest" -B "$build/_gtest/build" -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_INSTALL_PREFIX="$build/_gtest/install" >"$build/gtest.log" 2>&1 &&
        timeout "$(left)" cmake --build "$build/_gtest/build" -j"$(nproc)" --target install >>"$build/gtest.log" 2>&1 ||
        say "  GoogleTest build failed ($build/gtest.log)"
    fi
    prefix="$prefix;$build/_gtest/install"
    cmake_args+=("-DCMAKE_CXX_FLAGS=-isystem $deps/include")
  fi
  # The wheel's CUDA pieces (nvidia/cu13, ...) when the machine's own nvcc is absent.
  if ! command -v nvcc >/dev/null; then
    nvcc=$(find "$site/nvidia" -path '*/bin/nvcc' -type f 2>/dev/null | head -n1)
    if [[ -n "$nvcc" ]]; then
      root=$(dirname "$(dirname "$nvcc")")
      cmake_args+=("-DCMAKE_CUDA_COMPILER=$nvcc" "-DCUDAToolkit_ROOT=$root" "-DCUDA_TOOLKIT_ROOT_DIR=$root")
    fi
  fi
  command -v ninja >/dev/null && cmake_args+=(-G Ninja)
  t0=$SECONDS
  if timeout "$(left)" cmake "${cmake_args[@]}" "-DCMAKE_PREFIX_PATH=$prefix" >"$build/configure.log" 2>&1; then
    configured=1
    say "configure: ok ($((SECONDS - t0)) s); probes:"
    grep '^#define ACCELERATE_COMPAT_' "$build/generated/accelerate_compat_config.h" | sed 's/^#define /  /' | tee -a "$summary"
  else
    say "configure: FAILED ($build/configure.log):"
    grep -m5 -E 'Error|error' "$build/configure.log" | tee -a "$summary"
  fi
fi

if ((gpus == 0)); then
  say "no GPU: nothing run (GPU tests, MNIST, GPT and ZeRO steps skipped)"
  exit 0
fi
((configured)) || { say "gpu-check: cannot build; stopping"; exit 1; }

# step NAME SECONDS CMD...: runs CMD with at most SECONDS (and never past the
# budget less 10 s for the summary); its output goes to build-gpu/NAME.log.
step() {
  local name=$1 cap=$2 avail rc=0
  shift 2
  avail=$(($(left) - 10))
  ((avail < cap)) && cap=$avail
  if ((cap < 20)); then say "$name: SKIPPED (out of time: $(left) s left)"; return 99; fi
  local t0=$SECONDS
  timeout "$cap" "$@" >"$build/$name.log" 2>&1 || rc=$?
  if ((rc == 124)); then say "$name: TIMED OUT after ${cap}s ($build/$name.log)"
  elif ((rc != 0)); then say "$name: FAILED with status $rc in $((SECONDS - t0)) s ($build/$name.log)"; tail -n 5 "$build/$name.log" | tee -a "$summary"
  else say "$name: ok ($((SECONDS - t0)) s)"; fi
  return "$rc"
}

# ---- build only what runs ---------------------------------------------------------
targets=(gpu_test mnist gpt)
step build 300 cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" || true

# ---- 1. the GPU tests -----------------------------------------------------------
if [[ -x "$build/tests/gpu/gpu_test" ]]; then
  step gpu-tests 120 "$build/tests/gpu/gpu_test" || true
  grep -E '^\[  (PASSED|FAILED|SKIPPED) \]' "$build/gpu-tests.log" | tee -a "$summary"
  ((gpus >= 2)) || say "  tensor parallelism over NCCL: SKIPPED (needs 2 GPUs; this machine has $gpus)"
  # LibTorch 2.x warns at exit about NCCL groups never shut down; ours are.
  if grep -q 'destroy_process_group() was not called' "$build/gpu-tests.log"; then
    say "gpu-tests: FAILED: an NCCL group was destroyed without shutdown (warning in $build/gpu-tests.log)"
  fi
else
  say "gpu-tests: SKIPPED (not built)"
fi

# ---- 2. MNIST on the GPU in fp32, bf16, fp16 --------------------------------------------
if [[ -x "$build/examples/mnist" && -f data/mnist/train-images-idx3-ubyte ]]; then
  for precision in no bf16 fp16; do
    if step "mnist-$precision" 60 env ACCELERATE_MIXED_PRECISION=$precision \
         "$build/examples/mnist" --data_dir data/mnist --epochs 2; then
      say "  mnist $precision: $(grep '^epoch' "$build/mnist-$precision.log" | tail -n1)"
    fi
  done
else
  say "mnist: SKIPPED (example not built or data/mnist not carried)"
fi

# ---- 3. GPT bf16: the C++ example against its Python twin on the same GPU ---------
# At 16 sequences per step (the CPU benches' batch), then 64, where the GPU
# is busier and per-step overheads weigh less. Sets cpp_tps (batch 16).
gpt_pair() {
  local batch=$1 suffix=$2 tps py
  common=(--preset small --vocab_size 8192 --per_device_train_batch_size "$batch"
          --per_device_eval_batch_size 16 --warmup_steps 10 --eval_strategy no --save_strategy no
          --max_eval_samples 128 --output_dir "$gpt_dir/out" --data_dir "$gpt_dir/data")
  step "gpt-cpp$suffix" 120 "$build/examples/gpt" "${common[@]}" --max_steps 60 --logging_steps 1 --bf16 ||
    return 1
  tps=$(awk '/^step [0-9]+: tokens\/s / { k = $2 + 0; if (k > 10) { s += $4; c++ } }
             END { if (c) printf "%.0f", s / c }' "$build/gpt-cpp$suffix.log")
  [[ -z "$suffix" ]] && cpp_tps=$tps
  train_tokens=$(ls "$gpt_dir"/data/cache/train.txt-*.tokens 2>/dev/null | head -n1)
  eval_tokens=$(ls "$gpt_dir"/data/cache/validation.txt-*.tokens 2>/dev/null | head -n1)
  say "  gpt C++ bf16, batch $batch: ${tps:-?} tokens/s (mean of steps 11-60)"
  [[ -n "$train_tokens" ]] || return 0
  step "gpt-python$suffix" 120 "$python" bench/gpt/gpt_twin.py --train "$train_tokens" \
    --validation "$eval_tokens" --preset small --device cuda --bf16 --max_steps 60 --skip 10 \
    --batch_size "$batch" --warmup_steps 10 --max_eval_samples 128 || return 0
  py=$(sed -nE 's/^result .*tokens_per_s=([0-9.]+).*/\1/p' "$build/gpt-python$suffix.log")
  say "  gpt Python twin bf16, batch $batch: ${py:-?} tokens/s; C++/Python $(awk -v a="${tps:-0}" -v b="${py:-0}" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "?" }')"
}
if [[ -x "$build/examples/gpt" && -f data/brown/train.txt ]]; then
  gpt_dir=$build/gpt-run
  mkdir -p "$gpt_dir/data" "$gpt_dir/out"
  for f in train.txt validation.txt; do ln -sf "$repo_root/data/brown/$f" "$gpt_dir/data/$f"; done
  gpt_pair 16 "" && gpt_pair 64 -b64
  # step 4 runs at batch 16
  common=(--preset small --vocab_size 8192 --per_device_train_batch_size 16
          --per_device_eval_batch_size 16 --warmup_steps 10 --eval_strategy no --save_strategy no
          --max_eval_samples 128 --output_dir "$gpt_dir/out" --data_dir "$gpt_dir/data")
else
  say "gpt: SKIPPED (example not built or data/brown not carried)"
fi

# ---- 4. ZeRO-3 with CPU offload -------------------------------------------------
# Two GPUs: the sharded offload tests over NCCL. One GPU: ZeRO-Offload as a
# single GPU uses it (its one process's shards are whole buckets): the GPT
# example at stage 3 with parameters and optimizer in host memory, against
# the plain bf16 run of step 3 (eval loss, tokens/s).
if ((gpus >= 2)); then
  step zero3-offload 120 "$build/tests/gpu/gpu_test" --gtest_filter='*Zero*:*Offload*' || true
  grep -E '^\[  (PASSED|FAILED|SKIPPED) \]' "$build/zero3-offload.log" | tee -a "$summary"
else
  say "zero3-offload: sharded over NCCL SKIPPED (needs 2 GPUs; this machine has $gpus); one-GPU offload tests ran in gpu-tests"
fi
if [[ -n "${cpp_tps:-}" ]] &&
   step gpt-zero3-offload 120 env ACCELERATE_USE_DEEPSPEED=true ACCELERATE_DEEPSPEED_ZERO_STAGE=3 \
     ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE=cpu ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE=cpu \
     "$build/examples/gpt" "${common[@]}" --max_steps 60 --logging_steps 1 --bf16; then
  offload_tps=$(awk '/^step [0-9]+: tokens\/s / { k = $2 + 0; if (k > 10) { s += $4; c++ } }
                     END { if (c) printf "%.0f", s / c }' "$build/gpt-zero3-offload.log")
  loss_of() { grep -oE "'eval_loss': '?[0-9.]*" "$1" | tail -n1 | cut -d' ' -f2 | tr -d "'"; }
  say "  gpt bf16 ZeRO-3, parameters and optimizer offloaded: ${offload_tps:-?} tokens/s (no offload: $cpp_tps);" \
      "eval_loss $(loss_of "$build/gpt-zero3-offload.log") (no offload: $(loss_of "$build/gpt-cpp.log"))"
fi

say "gpu-check: done in $SECONDS s; summary in $summary"
