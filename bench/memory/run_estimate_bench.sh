#!/usr/bin/env bash
# `accelerate estimate-memory` against what training allocates (issue 35):
#
#   model state  zero_training_bench --gpt small (the GPT example's small
#                preset, vocab 4096, context 256, fp32 AdamW) counts each
#                process's parameters, gradients and Adam states between steps
#                at stages 0-3; estimate-memory gpt-small --zero_stage S
#                --num_processes N prints its "model state between steps"
#                (device + host). Goal: within 2%.
#   offloading   the same with --offload optimizer (stages 1-3), param and
#   and hybrid   both (stage 3), and hybrid sharding (--ranks 4 --hybrid 2:
#                shard groups of 2, replicated twice; stages 2 and 3, without
#                and with FSDP's cpu_offload) against estimate-memory's device
#                and host columns for the same settings (--offload_optimizer,
#                --offload_param, --num_nodes 2 --fsdp_sharding_strategy
#                HYBRID_SHARD[_ZERO2]). The bench keeps the offload copies on
#                this CPU job (ACCELERATE_OFFLOAD_ON_CPU_JOB) and counts them
#                as host. Goal: each column within 2%.
#   activations  gpt_activation_peak_bench (the same preset, one process, the
#                counting allocator) measures the bytes held after forward and
#                the peak above the model state at each T, with and without
#                activation checkpointing; estimate-memory gpt-small --seq_len T
#                prints the same two figures, also under bf16 autocast
#                (--mixed_precision bf16, at BF16_SEQ_LENS). Goal: the peak
#                within 10%.
#
#   configs      transformer_activation_bench (Llama as LlamaForCausalLM and
#                BERT as BertForSequenceClassification from accelerate::models,
#                built from bench/memory/configs/*.json) against
#                estimate-memory CONFIG --seq_len T, the same two figures.
#
#   bench/memory/run_estimate_bench.sh [BUILD_DIR]
#   RANKS=2 SEQ_LENS="256 1024 4096" BATCH=1 HYBRID_RANKS=4 HYBRID_GROUP=2 \
#     CONFIG_SEQ_LENS="256 1024" PARTS="state placement activations configs" \
#     bench/memory/run_estimate_bench.sh
#
# HYBRID_RANKS=0 leaves hybrid sharding out (4 processes on a 2-core machine
# take a while).
#
# One table per part, every ratio estimate / measured. T = 4096 needs about
# 4 GB and a minute on a 2-core machine.
set -euo pipefail
build=${1:-build}
ranks=${RANKS:-2}
seq_lens=${SEQ_LENS:-256 1024 4096}
batch=${BATCH:-1}
hybrid_ranks=${HYBRID_RANKS:-4}
hybrid_group=${HYBRID_GROUP:-2}
config_seq_lens=${CONFIG_SEQ_LENS:-256 1024}
parts=" ${PARTS:-state placement activations configs} "
here=$(cd "$(dirname "$0")" && pwd)
configs=${CONFIGS:-$here/configs/llama-bench.json $here/configs/bert-bench.json}
accelerate=$build/bin/accelerate
zero_bench=$(find "$build" -name zero_training_bench -type f -perm -u+x | head -1)
act_bench=$(find "$build" -name gpt_activation_peak_bench -type f -perm -u+x | head -1)
config_bench=$(find "$build" -name transformer_activation_bench -type f -perm -u+x | head -1)
for tool in "$accelerate" "$zero_bench" "$act_bench" "$config_bench"; do
  [[ -x $tool ]] || { echo "run_estimate_bench: build accelerate_cli, zero_training_bench, gpt_activation_peak_bench and transformer_activation_bench first" >&2; exit 2; }
done

# Bytes from estimate-memory's table cell ("97.17 MB", powers of 1024).
to_bytes() {
  awk -v text="$1" 'BEGIN { split(text, p, " "); u["bytes"] = 1; u["KB"] = 2^10; u["MB"] = 2^20;
                            u["GB"] = 2^30; u["TB"] = 2^40; printf "%.0f", p[1] * u[p[2]] }'
}
# The device and host cells of the row whose first cell starts with $2.
row_cells() {
  grep -F "$2" <<<"$1" | head -1 | awk -F'│' '{ gsub(/^ +| +$/, "", $3); gsub(/^ +| +$/, "", $4); print $3 "|" $4 }'
}

if [[ $parts == *" state "* ]]; then
echo "== model state per process: zero_training_bench --gpt small --ranks $ranks vs estimate-memory gpt-small =="
out=$("$zero_bench" --gpt small --ranks "$ranks" --batch 1 --steps 2 --stages 0,1,2,3)
printf '%-8s %-7s %16s %16s %8s\n' processes stage measured estimate ratio
for stage in 0 1 2 3; do
  measured_mb=$(grep -E "^ranks=$ranks stage $stage  memory" <<<"$out" | sed -E 's/.*state +([0-9.]+) MB.*/\1/')
  table=$("$accelerate" estimate-memory gpt-small --num_processes "$ranks" --zero_stage "$stage")
  cells=$(row_cells "$table" "model state between steps")
  estimate=$(( $(to_bytes "${cells%%|*}") + $(to_bytes "${cells##*|}") ))
  awk -v n="$ranks" -v s="$stage" -v m="$measured_mb" -v e="$estimate" \
    'BEGIN { printf "%-8s %-7s %13.2f MB %13.2f MB %8.4f\n", n, s, m, e / 1e6, e / (m * 1e6) }'
done

fi

if [[ $parts == *" placement "* ]]; then
echo
echo "== model state per process, device and host: zero_training_bench --gpt small --offload/--hybrid vs estimate-memory gpt-small =="
printf '%-9s %-5s %-9s %13s %13s %7s %13s %13s %7s\n' processes stage offload "device meas." "device est." ratio "host meas." "host est." ratio
# One bench run ($1 processes, $2 stages, $3 --offload, $4 hybrid group or 0),
# one row per stage.
placement_rows() {
  local n=$1 stages=$2 offload=$3 group=$4
  local flags=(--gpt small --ranks "$n" --batch 1 --steps 2 --stages "$stages" --offload "$offload")
  ((group > 0)) && flags+=(--hybrid "$group")
  local out
  out=$("$zero_bench" "${flags[@]}" 2>/dev/null)
  for stage in ${stages//,/ }; do
    local line device_mb host_mb est=(--num_processes "$n") label=$n
    line=$(grep -E "^ranks=$n stage $stage  where" <<<"$out")
    device_mb=$(sed -E 's/.*device +([0-9.]+) MB.*/\1/' <<<"$line")
    host_mb=$(sed -E 's/.*host +([0-9.]+) MB:.*/\1/' <<<"$line")
    if ((group > 0 && stage > 0)); then
      label="$n ($((n / group))x$group)"
      est+=(--num_nodes $((n / group)) --fsdp_sharding_strategy)
      if ((stage == 3)); then est+=(HYBRID_SHARD); else est+=(HYBRID_SHARD_ZERO2); fi
    else
      est+=(--zero_stage "$stage")
    fi
    # What the bench's --offload runs at this stage (FSDP's cpu_offload,
    # "both", offloads the optimizer only at stage 2; stage 0 offloads nothing).
    if ((stage > 0)) && [[ $offload == optimizer || $offload == both ]]; then est+=(--offload_optimizer); fi
    if ((stage == 3)) && [[ $offload == param || $offload == both ]]; then est+=(--offload_param); fi
    local cells
    cells=$(row_cells "$("$accelerate" estimate-memory gpt-small "${est[@]}")" "model state between steps")
    awk -v n="$label" -v s="$stage" -v o="$offload" -v dm="$device_mb" -v hm="$host_mb" \
      -v de="$(to_bytes "${cells%%|*}")" -v he="$(to_bytes "${cells##*|}")" \
      'function ratio(e, m) { return m > 0 ? sprintf("%7.4f", e / (m * 1e6)) : (e > 0 ? "    inf" : "      -") }
       BEGIN { printf "%-9s %-5s %-9s %10.2f MB %10.2f MB %s %10.2f MB %10.2f MB %s\n",
               n, s, o, dm, de / 1e6, ratio(de, dm), hm, he / 1e6, ratio(he, hm) }'
  done
}
placement_rows "$ranks" 1,2,3 optimizer 0
placement_rows "$ranks" 3 param 0
placement_rows "$ranks" 3 both 0
# One process offloads too (its shards are whole buckets).
placement_rows 1 1,2,3 optimizer 0
placement_rows 1 3 both 0
if ((hybrid_ranks > 0)); then
  placement_rows "$hybrid_ranks" 2,3 none "$hybrid_group"
  placement_rows "$hybrid_ranks" 2,3 both "$hybrid_group"
fi

fi

# One table row per bench line ($1: the estimate-memory model argument, $2: T).
activation_rows() {
  local model=$1 t=$2 line ckpt precision held peak flags table est_held est_peak
  while read -r line; do
    ckpt=$(awk '{ for (i = 1; i < NF; ++i) if ($i == "checkpointing") print $(i + 1) }' <<<"$line")
    precision=$(awk '{ p = "no"; for (i = 1; i < NF; ++i) if ($i == "mixed_precision") p = $(i + 1); print p }' <<<"$line")
    held=$(awk '{ for (i = 1; i < NF; ++i) if ($i == "held") print $(i + 1) }' <<<"$line")
    peak=$(awk '{ for (i = 1; i < NF; ++i) if ($i == "peak") print $(i + 1) }' <<<"$line")
    flags=(--seq_len "$t" --micro_batch_size "$batch" --zero_stage 0)
    [[ $ckpt == on ]] && flags+=(--activation_checkpointing)
    [[ $precision != no ]] && flags+=(--mixed_precision "$precision")
    table=$("$accelerate" estimate-memory "$model" "${flags[@]}")
    est_held=$(to_bytes "$(row_cells "$table" "activations held" | cut -d'|' -f1)")
    est_peak=$(to_bytes "$(row_cells "$table" "activation peak" | cut -d'|' -f1)")
    awk -v t="$t" -v m="$precision" -v c="$ckpt" -v h="$held" -v eh="$est_held" -v p="$peak" -v ep="$est_peak" \
      'BEGIN { printf "%-6s %-9s %-14s %11.2f MB %11.2f MB %7.3f %11.2f MB %11.2f MB %7.3f\n",
               t, m, c, h / 1e6, eh / 1e6, eh / h, p / 1e6, ep / 1e6, ep / p }'
  done
}

if [[ $parts == *" activations "* ]]; then
echo
echo "== activations: gpt_activation_peak_bench --preset small --batch $batch vs estimate-memory gpt-small --seq_len T =="
printf '%-6s %-9s %-14s %14s %14s %7s %14s %14s %7s\n' T precision checkpointing "held meas." "held est." ratio "peak meas." "peak est." ratio
for t in $seq_lens; do
  activation_rows gpt-small "$t" < <("$act_bench" --preset small --vocab 4096 --seq_len "$t" --batch "$batch" --steps 1)
done
# bf16 autocast (CPU), at the lengths of BF16_SEQ_LENS.
for t in ${BF16_SEQ_LENS:-256 1024}; do
  activation_rows gpt-small "$t" < <("$act_bench" --preset small --vocab 4096 --seq_len "$t" --batch "$batch" --steps 1 --mixed_precision bf16)
done
fi

if [[ $parts == *" configs "* ]]; then
for config in $configs; do
  echo
  echo "== activations: transformer_activation_bench --config $(basename "$config") --batch $batch vs estimate-memory $(basename "$config") --seq_len T =="
  printf '%-6s %-9s %-14s %14s %14s %7s %14s %14s %7s\n' T precision checkpointing "held meas." "held est." ratio "peak meas." "peak est." ratio
  for t in $config_seq_lens; do
    activation_rows "$config" "$t" < <("$config_bench" --config "$config" --seq_len "$t" --batch "$batch" --steps 1)
  done
done
fi
