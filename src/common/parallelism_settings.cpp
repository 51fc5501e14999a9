// Accelerate 1.x's ParallelismConfig sizes, as its launcher passes them to
// the ranks (PARALLELISM_CONFIG_*).
// dp_replicate_size x dp_shard_size processes: shard groups of dp_shard_size
// consecutive ranks, replicated dp_replicate_size times (hybrid sharding,
// docs/sharding.md); sp_size ranks of each sequence-parallel group split
// every sequence between them (DeepSpeed Ulysses, docs/sequence-parallel.md);
// tp_size consecutive ranks split each layer of a model with a
// tensor-parallel plan (docs/tensor-parallel.md), with Megatron's sequence
// parallelism between the split layers when tp_sequence_parallel is true
// (an accelerate-cpp setting: Accelerate has none); cp_size is read so that a
// value above 1 is refused rather than ignored.
#include "common/settings.h"

#include <cctype>
#include <optional>
#include <string>
#include <string_view>

namespace accelerate::settings {
namespace {

// Accelerate's only sequence-parallel backend; any case, as Accelerate
// lower-cases it.
std::optional<std::string> parse_sp_backend(std::string_view text) {
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "deepspeed") return lower;
  return std::nullopt;
}

}  // namespace

const Setting<bool> kUseParallelismConfig{
    {"ACCELERATE_USE_PARALLELISM_CONFIG", "--use_parallelism_config / parallelism_config",
     kBoolExpectation, "false",
     "read the parallelism sizes (PARALLELISM_CONFIG_*): data parallel replicas x shards"},
    false,
    parse_bool,
    format_bool};

const Setting<int> kParallelismDpReplicateSize{
    {"PARALLELISM_CONFIG_DP_REPLICATE_SIZE",
     "--parallelism_config_dp_replicate_size / "
     "parallelism_config.parallelism_config_dp_replicate_size",
     kCountExpectation, "1", "copies of the model's shards (hybrid sharding across them)"},
    1,
    parse_count,
    format_int};

const Setting<int> kParallelismDpShardSize{
    {"PARALLELISM_CONFIG_DP_SHARD_SIZE",
     "--parallelism_config_dp_shard_size / parallelism_config.parallelism_config_dp_shard_size",
     kCountExpectation, "1", "processes each copy of the model is sharded over (with FSDP)"},
    1,
    parse_count,
    format_int};

const Setting<int> kParallelismSpSize{
    {"PARALLELISM_CONFIG_SP_SIZE",
     "--parallelism_config_sp_size / parallelism_config.parallelism_config_sp_size",
     kCountExpectation, "1",
     "sequence parallelism (DeepSpeed Ulysses): consecutive ranks that split each sequence"},
    1,
    parse_count,
    format_int};

const Setting<std::string> kParallelismSpBackend{
    {"PARALLELISM_CONFIG_SP_BACKEND",
     "--parallelism_config_sp_backend / parallelism_config.parallelism_config_sp_backend",
     "deepspeed", "deepspeed", "how sequences are split: only deepspeed (Ulysses all-to-all)"},
    "deepspeed",
    parse_sp_backend,
    format_text};

const Setting<int> kParallelismTpSize{
    {"PARALLELISM_CONFIG_TP_SIZE",
     "--parallelism_config_tp_size / parallelism_config.parallelism_config_tp_size",
     kCountExpectation, "1",
     "tensor parallelism: consecutive ranks that split each layer of the model"},
    1,
    parse_count,
    format_int};

const Setting<bool> kParallelismTpSequenceParallel{
    {"PARALLELISM_CONFIG_TP_SEQUENCE_PARALLEL",
     "--parallelism_config_tp_sequence_parallel / "
     "parallelism_config.parallelism_config_tp_sequence_parallel",
     kBoolExpectation, "false",
     "Megatron's sequence parallelism at tp_size above 1: norms and residuals on 1/tp of the "
     "tokens (Llama family, GPT-2, BERT)"},
    false,
    parse_bool,
    format_bool};

const Setting<int> kParallelismCpSize{
    {"PARALLELISM_CONFIG_CP_SIZE",
     "--parallelism_config_cp_size / parallelism_config.parallelism_config_cp_size",
     kCountExpectation, "1", "context parallelism: only 1 (accelerate-cpp has none)"},
    1,
    parse_count,
    format_int};

}  // namespace accelerate::settings
