// ZeRO stages 1 and 2 for a prepared model and optimizer (docs/sharding.md).
//
// The layout comes from the model's GradientReducer: its gradient buckets,
// padded to a multiple of the number of processes N, are the flat buffers
// that are sharded; process r owns elements [r*n, (r+1)*n) of each (a
// parameter may straddle two processes). ModelShards gives every bucket a
// flat parameter buffer of the same layout and makes the model's parameters
// views into it, so an all-gather of the buffers updates the model in place.
// ShardedOptimizer rewrites the optimizer's parameter groups so that they
// hold this process's runs of those buffers (a run: consecutive elements of
// one bucket that belong to one group); LibTorch's optimizers are
// elementwise, so a step on the runs is the step on the whole parameters,
// restricted to this shard, and the optimizer's state exists only for it.
//
// Internal to the library: the Accelerator builds these in prepare().
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include "accelerate/accelerator/optimizer.h"
#include "accelerate/distributed/communicator.h"
#include "accelerate/parallel/gradient_reducer.h"
#include "parallel/gradient_norm.h"
#include "sharding/quantized_collectives.h"
#include "sharding/shard_layout.h"

namespace accelerate::sharding {

// The parameters some bucket of `reducer` holds, by identity, with their
// index in reducer.parameters().
std::unordered_map<const c10::TensorImpl*, std::size_t> bucketed_parameters(
    const GradientReducer& reducer);

// Stage 3, before ModelShards: process 0's values, on every process, of
// everything of `module` that no bucket of `reducer` holds (buffers, frozen
// parameters); ModelShards brings the bucketed parameters.
void broadcast_unbucketed_state(Communicator& communicator, torch::nn::Module& module,
                                const GradientReducer& reducer);

// CPU offloading (DeepSpeed's offload_param_device / offload_optimizer_device
// "cpu", FSDP's cpu_offload). `optimizer`: the optimizer steps host copies of
// the shards (its state is created beside them, in host memory); the
// gradient shards are copied to the host after each synced backward pass and
// the stepped shards back before they are gathered. `parameters` (stage 3):
// a unit's shard lives in host memory only, and is copied to the device into
// its slot of the unit's buffer when the unit is gathered; the optimizer
// steps it where it is. The host copies are pinned memory when the shards
// are on CUDA; copies back to the device are synchronous.
struct Offload {
  bool parameters = false;
  bool optimizer = false;
};

class ModelShards {
 public:
  // stage 1: gradients all-reduced as usual; stage 2: reduce-scattered;
  // stage 3: reduce-scattered, the buckets laid out by `unit_of` (one entry
  // per reducer parameter: its unit, or -1) and each process's shard of the
  // parameters kept in a tensor of its own, so that a unit's full buffer can
  // be freed between uses (sharding/parameter_units.h). Sets the reducer's
  // partition, copies the parameters into flat buffers and rebinds them;
  // at stage 3 the buffers are filled from process 0's parameters (the
  // others' may be empty, empty_weights.h), and with `release_units` a
  // unit's buffer is freed as soon as this process has its shard, so no
  // process holds more than one bucket beyond its shards.
  // Before the first backward pass.
  // `offload`: see Offload (its `parameters` applies to stage-3 units).
  // `gather_dtype` (low-precision collectives, docs/sharding.md): what the
  // parameters' all-gathers carry; nullopt or the parameters' own dtype:
  // nothing rounded. Otherwise every bucket's shard has memory of its own
  // (the fp32 master the optimizer steps; stages 1-2 and stage 3's root
  // bucket included, whose shards are otherwise views of their buffers),
  // and the whole weights are the rounded masters from construction on.
  // `quantized_gather` (ZeRO++ qwZ): the gathers carry the shards as
  // quantized blocks instead (it takes the place of gather_dtype), with the
  // same fp32 masters; hpZ's secondary gathers then carry the kept,
  // already dequantized copies as they are (the same bits, no second loss).
  ModelShards(std::shared_ptr<Communicator> communicator, GradientReducer& reducer, int stage,
              const std::vector<int>& unit_of = {}, bool release_units = false,
              Offload offload = {}, std::optional<at::ScalarType> gather_dtype = std::nullopt,
              std::optional<QuantizedWire> quantized_gather = std::nullopt);

  GradientReducer& reducer() { return reducer_; }
  const GradientReducer& reducer() const { return reducer_; }
  int rank() const { return communicator_->rank(); }
  int world_size() const { return communicator_->world_size(); }
  // Bucket b's padded parameter buffer, and this process's shard of it (a
  // view into the buffer, except for a stage-3 unit's bucket: a tensor of
  // its own, since the buffer is freed between uses; in host memory when
  // its parameters are offloaded).
  const at::Tensor& parameter_buffer(std::size_t b) const { return buffers_.at(b); }
  const at::Tensor& parameter_shard(std::size_t b) const { return shards_.at(b); }
  std::int64_t shard_numel(std::size_t b) const;
  std::int64_t shard_begin(std::size_t b) const { return communicator_->rank() * shard_numel(b); }
  // All-gathers every bucket's shards into its buffer (every process calls
  // it), except buffers released at stage 3: their unit gathers them when it
  // next runs.
  void gather_parameters();
  // Stage 3: gives bucket b's buffer its memory back and all-gathers it
  // (every process calls it; waits for a gather start_gather began), or
  // frees the memory (after any gather in flight).
  void gather_bucket(std::size_t b);
  void release_bucket(std::size_t b);
  bool bucket_released(std::size_t b) const;
  // Stage 3 prefetch: gives a released buffer its memory and starts its
  // all-gather without waiting; gather_bucket(b) finishes it.
  void start_gather(std::size_t b);

  // Low-precision gathers: whether this model's gathers round (the shards
  // are then separate fp32 masters), and, while `exact` is set, gathers
  // carry the masters unrounded, so that saving reads them whole
  // (ShardedEngine::exact_weights). A gather_parameters() after switching
  // makes the whole buffers follow.
  bool rounds_gathers() const;
  void set_exact_gathers(bool exact) { exact_gathers_ = exact; }
  // After something wrote the whole weights of buckets that are not
  // stage-3 units (a checkpoint loaded at stage 1 or 2): their masters
  // take this process's part of them. Then gather_parameters().
  void adopt_whole_weights();
  // The same for every bucket whose buffer is gathered now, stage-3 units
  // included (a checkpoint loaded into the gathered weights at tensor
  // parallelism). No gather follows: the buffers hold the new weights.
  void adopt_gathered_weights();

  // ZeRO++ hpZ (docs/sharding.md): `group` is this process's group of
  // consecutive ranks (its size divides world_size()). Once a released
  // bucket's all-gather over communicator() completes, this process keeps
  // its 1/group-size part of the whole buffer (the secondary copy: elements
  // [g*m, (g+1)*m) for its rank g in `group`, m = padded numel / group
  // size), and the bucket's next gathers all-gather those parts within
  // `group` instead, until gather_parameters() (after every step, and
  // after a checkpoint loads into the shards) marks every copy stale: the
  // gather after it runs over communicator() again and refreshes the copy.
  // The copies are written from the gathered values, so both gathers give
  // the same bits. Before the first gather; every process of the job calls
  // it alike.
  void keep_secondary_copies(std::shared_ptr<Communicator> group);
  const std::shared_ptr<Communicator>& secondary_group() const { return secondary_group_; }
  // How many bucket gathers ran over communicator() (primary) and within
  // the hpZ group (secondary), on this process: for tests and diagnostics.
  struct GatherCounts {
    std::int64_t primary = 0;
    std::int64_t secondary = 0;
  };
  const GatherCounts& gather_counts() const { return gather_counts_; }

  // Offloading. Whether the optimizer steps bucket b in host memory, and
  // what it steps there: the shard itself (parameters offloaded) or a host
  // copy of it, with the host copy of the gradient shard; else the shard and
  // the reducer's gradient shard.
  bool offloaded(std::size_t b) const { return host_gradients_.at(b).defined(); }
  at::Tensor optimizer_shard(std::size_t b) const;
  at::Tensor optimizer_gradient(std::size_t b);
  // After a synced backward pass: the gradient shards to the host.
  void gradients_to_host();
  // Before each step: the host copies from the shards (so a load or a
  // program's write between steps is never lost; one copy per step).
  void parameters_to_host();
  // After a step: the stepped host copies back into the shards.
  void parameters_from_host();
  // zero_grad for the host gradient copies.
  void clear_host_gradients();

 private:
  // Whether bucket b's shard itself lives in host memory (parameters
  // offloaded), or the optimizer steps a host copy of it (mirrored).
  bool shard_in_host(std::size_t b) const;
  bool mirrored(std::size_t b) const;
  // The tensor bucket b's all-gather starts from: the shard, or its slot of
  // the buffer once the host shard is copied there.
  at::Tensor gather_source(std::size_t b);
  // hpZ: keeps bucket b's secondary copy from its freshly gathered buffer.
  void keep_secondary(std::size_t b);
  // The dtype bucket b's gathers carry now, or nullopt (plain gather).
  std::optional<at::ScalarType> wire(std::size_t b) const;
  // Whether gathers into a buffer of this dtype lose precision
  // (low-precision or quantized).
  bool lossy_gather(at::ScalarType buffer_dtype) const;
  // `secondary`: hpZ's gather of kept copies, never quantized again.
  PendingCollective gather_over(Communicator& communicator, std::size_t b, const at::Tensor& source,
                                const std::string& what, bool secondary = false);

  std::shared_ptr<Communicator> communicator_;
  GradientReducer& reducer_;
  int stage_;
  std::vector<at::Tensor> buffers_;           // per bucket, padded
  std::vector<at::Tensor> shards_;            // per bucket, this process's part
  std::vector<PendingCollective> gathering_;  // per bucket: start_gather's, until waited for
  // hpZ, per bucket: the secondary copy (undefined until first kept),
  // whether it holds the current parameters, and whether the gather in
  // flight runs over communicator_ (so that its end keeps a copy).
  std::shared_ptr<Communicator> secondary_group_;
  std::vector<at::Tensor> secondary_;
  std::vector<char> secondary_current_;
  std::vector<char> gathering_primary_;
  GatherCounts gather_counts_;
  std::optional<at::ScalarType> gather_dtype_;
  std::optional<QuantizedWire> quantized_gather_;
  bool exact_gathers_ = false;
  std::vector<char> separate_master_;  // per bucket: not a stage-3 unit, shard cloned
  // Offloading, per bucket (undefined where the bucket is not offloaded):
  std::vector<at::Tensor> host_parameters_;  // what the optimizer steps (may be shards_[b])
  std::vector<at::Tensor> host_gradients_;
};

class ShardedOptimizer : public OptimizerShardHooks {
 public:
  // Every parameter of `optimizer` that some model in `models` syncs is
  // replaced by this process's runs; others (frozen, or of no prepared
  // model) stay as they are. Throws ConfigError when the optimizer already
  // has state (it stepped before prepare) or is not elementwise (LBFGS).
  ShardedOptimizer(std::shared_ptr<Communicator> communicator, torch::optim::Optimizer& optimizer,
                   std::vector<std::shared_ptr<ModelShards>> models);
  ~ShardedOptimizer() override;

  // load_state of an optimizer saved sharded by `saved_world` processes
  // (rank k's archive at archive_of(k)), this or another number.
  void load_resharded(int saved_world, const std::string& manifest_path,
                      const std::function<std::string(int)>& archive_of);
  const ShardLayout& layout() const { return *layout_; }
  // load_state from `from`, whose from_parameters[m][j] (every element of
  // the layout's parameter j of model m, undefined where `from` holds none)
  // has the state: this process's elements of it, and from's group options.
  void load_parameter_states(const torch::optim::Optimizer& from,
                             const std::vector<std::vector<at::Tensor>>& from_parameters);

  // Before the optimizer's own step (only then: offloading refreshes the
  // host copies of the shards here).
  void before_step() override;
  // Each run's .grad: a view of its gradient shard (or of its host copy),
  // for what reads the gradients before a step (unscale_, clipping).
  void bind_gradients();
  void after_step(bool stepped) override;
  void zero_grad(bool set_to_none) override;

  // This process's shard of the gradients it steps (views: changing them
  // changes what the next step uses).
  std::vector<at::Tensor> shard_gradients();
  // The same cut where one model parameter ends and the next begins, each
  // piece with the parameter it is part of.
  struct GradientPiece {
    at::Tensor gradient;
    at::Tensor parameter;
  };
  std::vector<GradientPiece> shard_gradient_pieces();
  // Whether any of `parameters` is one of the model parameters it steps.
  bool covers_any(const std::vector<at::Tensor>& parameters) const;
  const torch::optim::Optimizer& optimizer() const { return optimizer_; }

 private:
  struct Run {
    std::size_t model;
    std::size_t bucket;
    std::int64_t begin;  // in the bucket
    std::int64_t numel;
    at::Tensor parameter;  // the view the optimizer steps
  };
  std::shared_ptr<Communicator> communicator_;
  torch::optim::Optimizer& optimizer_;
  std::vector<std::shared_ptr<ModelShards>> models_;
  std::unique_ptr<ShardLayout> layout_;
  std::vector<Run> runs_;
  std::vector<at::Tensor> model_parameters_;  // the ones this optimizer had
};

// The pieces of the gradient norm for ZeRO (the model's own .grad are
// released at stage 2, and hold other processes' scaled values under fp16
// at stage 1): every optimizer's shard gradients, each piece classed by the
// parameter it belongs to, combined over `communicator` with one all-reduce
// (in double). clip_grad_norm_ scales every shard gradient by
// clip_coefficient(norm, max_norm) (scale_shard_gradients).
GradientNormParts shard_gradient_norm_parts(Communicator& communicator,
                                            const std::vector<ShardedOptimizer*>& optimizers,
                                            double norm_type, const IsTensorParallelPart& is_part);
void scale_shard_gradients(const std::vector<ShardedOptimizer*>& optimizers, double factor);
// clip_grad_value_ for ZeRO: clamps every shard gradient to ±clip_value.
void clip_grad_value(const std::vector<ShardedOptimizer*>& optimizers, double clip_value);

}  // namespace accelerate::sharding
