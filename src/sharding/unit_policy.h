// Which modules of a model are the units of ZeRO stage 3 / FSDP FULL_SHARD:
// the parameters of a unit are gathered only while that unit runs, so the
// units bound the memory a process needs beyond its shard. prepare() finds
// them from Accelerate's FSDP settings (fsdp_auto_wrap_policy,
// fsdp_transformer_layer_cls_to_wrap, fsdp_min_num_params), or, for
// DeepSpeed ZeRO-3, which has no such setting, from the model's repeated
// blocks.
//
// Units never nest (a unit's descendants are not units) and the root is
// never one: what no unit holds stays with the root, which FSDP wraps
// itself. Units come in registration (pre-)order; a unit's path is its
// dotted name as named_modules() writes it ("h.3").
//
// The rules, per policy:
//  - TRANSFORMER_BASED_WRAP: every outermost module whose class is one of
//    layer_classes. A class name matches LibTorch's Module::name() (the
//    demangled C++ type, e.g. "gpt::BlockImpl") when both are equal after
//    dropping a trailing "Impl", or when it is the end of that name after a
//    "::": "Block", "BlockImpl" and "gpt::BlockImpl" all match. A class that
//    matches no module of the model (the root included, as in Accelerate's
//    lookup) is a ConfigError, as is an empty list.
//  - SIZE_BASED_WRAP: PyTorch's size_based_auto_wrap_policy run by
//    _recursive_wrap. Bottom-up, a non-root module becomes a unit when the
//    parameter elements of its subtree that no unit below it holds number
//    at least min_num_params. Only modules whose whole subtree holds at
//    least min_num_params are looked into (a smaller one cannot qualify).
//    As in PyTorch, a ModuleList or ModuleDict never becomes a unit (its
//    parameters count for its parent), and a MultiheadAttention is not
//    looked into, so neither it nor anything inside it becomes a unit.
//    Where PyTorch nests one wrapped module in another (the outer one's
//    leftover alone reaches the threshold), only the inner one is a unit:
//    the outer one's leftover stays outside the units, gathered as it is
//    for the outer module's whole forward under FSDP. min_num_params <= 0
//    gives no units: Accelerate then drops the policy.
//  - NO_WRAP: no units; the whole model is one unit, the root's.
//  - kRepeatedBlocks (DeepSpeed ZeRO-3): among the modules with at least
//    two direct children of one type that hold parameters, the one with the
//    most such children; each of them is a unit (a transformer's blocks).
//    Groups of the model's own classes win over groups of layers
//    (LibTorch's torch::nn ones, accelerate::ParallelLinear and
//    ParallelEmbedding: so two blocks beat the two embeddings beside them,
//    or the four Linear layers inside each); then the larger group; then
//    the first in pre-order. No such group: no units.
//
// Parameters are counted by numel, a tied parameter (one tensor registered
// under several names, or views of the same memory) once. find_units
// leaves a unit that shares a parameter with another unit or with the
// rest of the model as it is; shared_parameter_names() lists those
// parameters, which stage 3 keeps outside the units.
//
// Internal to the library.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace accelerate::sharding {

// kRepeatedBlocks has no Accelerate spelling: DeepSpeed decides by itself.
enum class AutoWrapPolicy { kTransformerBased, kSizeBased, kNoWrap, kRepeatedBlocks };

// fsdp_auto_wrap_policy's value: TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP or
// NO_WRAP. Accelerate upper-cases the value before comparing, so
// "size_based_wrap" is accepted too. Anything else throws ConfigError.
AutoWrapPolicy parse_auto_wrap_policy(const std::string& value);

// Accelerate's spelling; "REPEATED_BLOCKS" for kRepeatedBlocks.
const char* to_string(AutoWrapPolicy policy);

// fsdp_transformer_layer_cls_to_wrap: comma-separated class names, each
// trimmed of spaces, empty ones dropped ("Block, ,Mlp" -> Block, Mlp).
std::vector<std::string> parse_layer_classes(const std::string& value);

struct UnitPolicy {
  AutoWrapPolicy policy = AutoWrapPolicy::kNoWrap;  // Accelerate's default
  std::vector<std::string> layer_classes;           // TRANSFORMER_BASED_WRAP only
  int64_t min_num_params = 100000000;               // SIZE_BASED_WRAP only; fsdp_min_num_params
};

struct Unit {
  std::string path;                     // "h.3"
  torch::nn::Module* module = nullptr;  // owned by the model
  int64_t num_params = 0;               // elements in its subtree, tied ones once
};

// The units of `root` under `policy` (see the rules above). Throws
// ConfigError for TRANSFORMER_BASED_WRAP with no classes or a class the
// model lacks.
std::vector<Unit> find_units(torch::nn::Module& root, const UnitPolicy& policy);

// Every dotted name (as named_parameters() writes it) of each parameter
// that lies in more than one unit, or in a unit and outside all units, in
// named_parameters() order.
std::vector<std::string> shared_parameter_names(torch::nn::Module& root,
                                                const std::vector<Unit>& units);

}  // namespace accelerate::sharding
