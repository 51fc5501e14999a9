// Accelerate's FullyShardedDataParallelPlugin: FSDP's settings for the ZeRO
// engine (docs/sharding.md). accelerate-cpp has no PyTorch FSDP; the
// sharding strategy picks the ZeRO stage that shards the same things, and
// the auto wrap policy picks stage 3's units (the modules whose parameters
// are gathered only while they run through accelerate::unit_forward):
//
//   Accelerator accelerator(AcceleratorOptions().fsdp_plugin(
//       FullyShardedDataParallelPlugin()
//           .auto_wrap_policy(FsdpAutoWrapPolicy::kTransformerBasedWrap)
//           .transformer_cls_names_to_wrap({"Block"})));
//
// `accelerate launch` builds the same plugin for the program from a config
// file's fsdp_config and the --fsdp_* flags, through the FSDP_* variables
// (docs/launching.md). Fields are named as Accelerate's keyword arguments.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "accelerate/common/arg.h"
#include "accelerate/detail/enum_names.h"
#include "accelerate/distributed/collective_dtype.h"

namespace accelerate {

// FSDP's sharding strategies, numbered as Accelerate and PyTorch number them
// (FSDP_SHARDING_STRATEGY may be written as the number). FULL_SHARD is ZeRO
// stage 3, SHARD_GRAD_OP stage 2, NO_SHARD stage 0 (data parallelism); the
// HYBRID ones shard within each machine and replicate across machines,
// which accelerate-cpp does not do (ConfigError).
enum class FsdpShardingStrategy {
  kFullShard = 1,
  kShardGradOp,
  kNoShard,
  kHybridShard,
  kHybridShardZero2
};

// The names of this header's enums as Accelerate writes them, and, as
// aliases, the numbers FSDP_* variables may use instead (PyTorch's, where
// Accelerate accepts them). Read in any case (src/common/settings.cpp).
namespace detail {
inline constexpr EnumName<FsdpShardingStrategy> kFsdpShardingStrategyNames[] = {
    {FsdpShardingStrategy::kFullShard, "FULL_SHARD", {"1"}},
    {FsdpShardingStrategy::kShardGradOp, "SHARD_GRAD_OP", {"2"}},
    {FsdpShardingStrategy::kNoShard, "NO_SHARD", {"3"}},
    {FsdpShardingStrategy::kHybridShard, "HYBRID_SHARD", {"4"}},
    {FsdpShardingStrategy::kHybridShardZero2, "HYBRID_SHARD_ZERO2", {"5"}}};
static_assert(names_are_distinct(kFsdpShardingStrategyNames));
}  // namespace detail

// "FULL_SHARD", ... as Accelerate writes them.
inline const char* to_string(FsdpShardingStrategy strategy) {
  return detail::enum_name(detail::kFsdpShardingStrategyNames, strategy, "?");
}

// Which modules become stage 3's units (src/sharding/unit_policy.h has the
// exact rules): the outermost modules of the named classes, the modules
// PyTorch's size_based_auto_wrap_policy would wrap, or none (the whole model
// is gathered at once, as FSDP without a policy wraps only the root).
enum class FsdpAutoWrapPolicy { kTransformerBasedWrap, kSizeBasedWrap, kNoWrap };

namespace detail {
inline constexpr EnumName<FsdpAutoWrapPolicy> kFsdpAutoWrapPolicyNames[] = {
    {FsdpAutoWrapPolicy::kTransformerBasedWrap, "TRANSFORMER_BASED_WRAP"},
    {FsdpAutoWrapPolicy::kSizeBasedWrap, "SIZE_BASED_WRAP"},
    {FsdpAutoWrapPolicy::kNoWrap, "NO_WRAP"}};
static_assert(names_are_distinct(kFsdpAutoWrapPolicyNames));
}  // namespace detail

inline const char* to_string(FsdpAutoWrapPolicy policy) {
  return detail::enum_name(detail::kFsdpAutoWrapPolicyNames, policy, "?");
}

// PyTorch's BackwardPrefetch (numbered as it is), and Accelerate's NO_PREFETCH.
enum class FsdpBackwardPrefetch { kBackwardPre = 1, kBackwardPost, kNoPrefetch };

// No number for NO_PREFETCH: Accelerate maps it to None before PyTorch's
// numbers apply.
namespace detail {
inline constexpr EnumName<FsdpBackwardPrefetch> kFsdpBackwardPrefetchNames[] = {
    {FsdpBackwardPrefetch::kBackwardPre, "BACKWARD_PRE", {"1"}},
    {FsdpBackwardPrefetch::kBackwardPost, "BACKWARD_POST", {"2"}},
    {FsdpBackwardPrefetch::kNoPrefetch, "NO_PREFETCH"}};
static_assert(names_are_distinct(kFsdpBackwardPrefetchNames));
}  // namespace detail

inline const char* to_string(FsdpBackwardPrefetch prefetch) {
  return detail::enum_name(detail::kFsdpBackwardPrefetchNames, prefetch, "?");
}

// PyTorch's StateDictType, numbered as it is.
enum class FsdpStateDictType { kFullStateDict = 1, kLocalStateDict, kShardedStateDict };

namespace detail {
inline constexpr EnumName<FsdpStateDictType> kFsdpStateDictTypeNames[] = {
    {FsdpStateDictType::kFullStateDict, "FULL_STATE_DICT", {"1"}},
    {FsdpStateDictType::kLocalStateDict, "LOCAL_STATE_DICT", {"2"}},
    {FsdpStateDictType::kShardedStateDict, "SHARDED_STATE_DICT", {"3"}}};
static_assert(names_are_distinct(kFsdpStateDictTypeNames));
}  // namespace detail

inline const char* to_string(FsdpStateDictType type) {
  return detail::enum_name(detail::kFsdpStateDictTypeNames, type, "?");
}

// FSDP's MixedPrecision as Accelerate passes it (mixed_precision_policy):
// the dtypes the sharded engine's collectives carry. Unset (the default,
// each field) is the tensors' own dtype: nothing is rounded, as before this
// policy existed. The weights, the gradients and the optimizer's master
// shards stay fp32 whatever is set; only what travels is rounded
// (docs/sharding.md, "Low-precision collectives").
//
//   FullyShardedDataParallelPlugin().mixed_precision_policy(
//       FsdpMixedPrecisionPolicy().param_dtype(CollectiveDtype::kBf16))
//
// Accelerate gives FSDP MixedPrecision(param_dtype=d, reduce_dtype=d,
// buffer_dtype=d) whenever mixed_precision is fp16/bf16 and no policy is
// set; accelerate-cpp does not (yet): an unset policy keeps every result
// bitwise what fp32 collectives give, and is asked for explicitly.
struct FsdpMixedPrecisionPolicy {
  // The parameters' all-gathers (after each step; FULL_SHARD's units too):
  // every process's shard is rounded to it and every process, its own part
  // included, holds the rounded whole weights.
  ACCELERATE_ARG(std::optional<CollectiveDtype>, param_dtype);
  // The gradients' reduce-scatters (stages 2-3): every process's gradients
  // are rounded to it and summed in fp32. Unset with param_dtype set:
  // param_dtype (PyTorch's rule for MixedPrecision).
  ACCELERATE_ARG(std::optional<CollectiveDtype>, reduce_dtype);
  // Accepted for Accelerate's sake; changes nothing: buffers travel once,
  // in their own dtype, when prepare() starts every process from the main
  // process's.
  ACCELERATE_ARG(std::optional<CollectiveDtype>, buffer_dtype);
};

struct FullyShardedDataParallelPlugin {
  // 1 or 2 (anything else is a ConfigError). The same engine runs both;
  // Accelerate's spellings differ only in the environment and config files.
  ACCELERATE_ARG(int, fsdp_version) = 1;
  // FULL_SHARD (Accelerate's default): ZeRO stage 3, each unit's parameters
  // gathered while it runs. SHARD_GRAD_OP: stage 2. NO_SHARD: stage 0.
  ACCELERATE_ARG(FsdpShardingStrategy, sharding_strategy) = FsdpShardingStrategy::kFullShard;
  // FSDP 2's spelling of the strategy: false keeps the parameters whole
  // between forward and backward, so FULL_SHARD with false is SHARD_GRAD_OP
  // (stage 2). Changes nothing for the other strategies.
  ACCELERATE_ARG(bool, reshard_after_forward) = true;
  // Stage 3's units. Default NO_WRAP, as Accelerate's: no units, so the
  // parameters are sharded as at stage 2 (gathered whole after every step).
  ACCELERATE_ARG(FsdpAutoWrapPolicy, auto_wrap_policy) = FsdpAutoWrapPolicy::kNoWrap;
  // TRANSFORMER_BASED_WRAP: the class names of the blocks, as LibTorch's
  // Module::name() gives them ("Block", "BlockImpl" or "gpt::BlockImpl").
  // Empty (the default) is a ConfigError at stage 3; a class that is not in
  // the model is one when prepare() sees the model.
  ACCELERATE_ARG(std::vector<std::string>, transformer_cls_names_to_wrap);
  // SIZE_BASED_WRAP: a module with this many parameter elements (outside the
  // units below it) becomes a unit. The default is PyTorch's and
  // `accelerate launch`'s 1e8; 0 drops the policy (no units), as
  // Accelerate's plugin does.
  ACCELERATE_ARG(int64_t, min_num_params) = 100000000;
  // FSDP 1 with FULL_SHARD: whether a unit's backward starts the previous
  // unit's gather (BACKWARD_PRE / BACKWARD_POST, both at the start of the
  // unit's backward), and a unit's forward the next one's. NO_PREFETCH, the
  // default (Accelerate's, which it passes to PyTorch as None; PyTorch's own
  // FSDP defaults to BACKWARD_PRE), also lets each unit's
  // reduce-scatter finish before the next unit's backward: one unit whole
  // at a time, the least memory, communication not overlapped
  // (docs/sharding.md). FSDP 2, like DeepSpeed, always prefetches one unit.
  ACCELERATE_ARG(FsdpBackwardPrefetch, backward_prefetch) = FsdpBackwardPrefetch::kNoPrefetch;
  ACCELERATE_ARG(bool, forward_prefetch) = false;
  // Offload to CPU memory: with FULL_SHARD the parameters' shards, and at
  // every strategy the gradient shards and the optimizer, which steps on the
  // CPU (docs/sharding.md, "CPU offloading"). Needs two processes or more;
  // on a CPU-only job everything is in CPU memory already (a note says so).
  ACCELERATE_ARG(bool, cpu_offload) = false;
  // With FULL_SHARD: how save_state writes the model: FULL_STATE_DICT one
  // whole file written unit by unit, SHARDED_STATE_DICT (and
  // LOCAL_STATE_DICT) each process's pieces plus an index (docs/sharding.md).
  ACCELERATE_ARG(FsdpStateDictType, state_dict_type) = FsdpStateDictType::kFullStateDict;
  // With FULL_SHARD: every process but the main one builds the model inside
  // accelerator.zero3_init() with no memory for its weights, and prepare()
  // gives each process its shard of the main process's weights
  // (docs/sharding.md).
  ACCELERATE_ARG(bool, cpu_ram_efficient_loading) = false;
  // prepare() always starts every process from the main process's weights;
  // false is accepted only without cpu_ram_efficient_loading (Accelerate's
  // rule).
  ACCELERATE_ARG(bool, sync_module_states) = true;
  // What the collectives carry (FsdpMixedPrecisionPolicy); program-only, as
  // in Accelerate, which has no variable or config key for it. Default: all
  // unset, fp32 on the wire.
  ACCELERATE_ARG(FsdpMixedPrecisionPolicy, mixed_precision_policy);
};

}  // namespace accelerate
