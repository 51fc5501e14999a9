// GradientReducer: data-parallel gradient synchronisation (the role DDP's
// reducer plays in PyTorch), written on public LibTorch APIs.
//
// Gradients are averaged over the job's processes in buckets: parameters are
// grouped, in reverse registration order (the order backward produces their
// gradients), into flat buffers of at most bucket_cap_mb. A hook on each
// parameter's gradient accumulator notices when its gradient is final; once a
// whole bucket is final it is copied into its buffer and an asynchronous SUM
// all-reduce starts, while backward is still computing earlier layers.
// finalize_backward(), called right after backward returns, starts whatever
// is left, waits, divides by the number of processes and writes the averages
// back into each parameter's .grad. See docs/gradient-sync.md.
//
// Every process must build its reducer from the same parameters (same count,
// shapes, dtypes and requires_grad, in the same order); the constructor checks
// this with one collective and throws Error on a mismatch.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "accelerate/common/arg.h"
#include "accelerate/distributed/communicator.h"

namespace torch {
namespace nn {
class Module;
}  // namespace nn
}  // namespace torch

namespace accelerate {
namespace detail {
struct ShardedGradients;
}  // namespace detail

// DDP's built-in communication hooks (Accelerate's DDPCommunicationHookType).
enum class CommHook {
  kNone,  // gradients travel in their own dtype (bf16/fp16 ones as float32)
  // float32 gradients travel as fp16 / bf16: half the bytes, fewer bits.
  // As DDP's fp16_compress_hook, each process divides by the number of
  // processes before compressing, so the sum cannot overflow. bf16 needs a
  // backend that reduces bf16 (NCCL); Gloo cannot, and the reducer refuses.
  kFp16,
  kBf16,
};

// Accelerate's DistributedDataParallelKwargs, the subset this reducer honours.
struct GradientSyncOptions {
  // Largest bucket, in MiB of data sent (float32 for bf16/fp16 gradients).
  // A single parameter larger than this gets a bucket of its own.
  ACCELERATE_ARG(double, bucket_cap_mb) = 25.0;
  // Cap of the first bucket of each dtype: the last layers' gradients, ready
  // first, so a small bucket lets communication start early (DDP uses 1 MiB).
  ACCELERATE_ARG(double, first_bucket_cap_mb) = 1.0;
  // false: a parameter that gets no gradient in a synced step is averaged as
  // zero and a warning (once) suggests setting this.
  // true: no warning; parameters that got no gradient on ANY process since
  // the last sync keep their .grad untouched (an undefined .grad stays
  // undefined, so optimizers skip them), at the cost of one small extra
  // all-reduce per synced step; and prepare_for_backward() finds parameters
  // the coming backward cannot reach, so their buckets need not wait for
  // finalize_backward().
  ACCELERATE_ARG(bool, find_unused_parameters) = false;
  // Whether broadcast_buffers() copies process 0's buffers to everyone
  // (DDP does it before every forward; the Accelerator calls
  // broadcast_buffers_after_backward() after synced backward passes).
  ACCELERATE_ARG(bool, broadcast_buffers) = true;
  // Gradient compression for the all-reduce; off by default.
  ACCELERATE_ARG(CommHook, comm_hook) = CommHook::kNone;
  // DDP's gradient_as_bucket_view (on by default here; DDP's default is off):
  // at the first synced step each parameter's .grad becomes a view into its
  // bucket buffer, so later backward passes accumulate straight into the
  // buffer that is all-reduced. That saves copying gradients in, and one
  // gradient-sized buffer per model. The values are the same either way.
  // Applies to buckets whose gradients travel uncompressed in their own dtype
  // on their own device, and not with find_unused_parameters (whose unused
  // .grads must stay untouched by the in-place all-reduce). A .grad replaced
  // or reset by the user (zero_grad(set_to_none)) is copied in and rebound.
  ACCELERATE_ARG(bool, gradient_as_bucket_view) = true;
};

// How buckets are laid out for sharded training (ZeRO, docs/sharding.md).
enum class GradientPartition {
  kNone,        // data parallelism: every process averages every gradient
  kReplicated,  // ZeRO stage 1: averaged as usual; buckets padded so each process owns a shard
  kSharded,     // ZeRO stage 2: each bucket reduce-scattered; a process averages only its shard
};

// One bucket: which parameters (indices into the constructor's list) share
// one flat buffer and one all-reduce.
struct GradientBucket {
  std::vector<std::size_t> parameter_indices;   // in buffer order
  std::int64_t bytes = 0;                       // size of the buffer sent
  at::ScalarType gradient_dtype = at::kFloat;   // the parameters' dtype
  at::ScalarType wire_dtype = at::kFloat;       // the buffer's dtype
  bool compressed = false;                      // comm_hook lowered the dtype
  c10::Device device = c10::Device(c10::kCPU);  // where the buffer lives
  // Elements: the parameters' (each starts where the previous ends, in
  // parameter_indices order), and the buffer's (padded to a multiple of the
  // number of processes when partitioned; process r's shard is elements
  // [r*n, (r+1)*n) with n = padded_numel / processes).
  std::int64_t numel = 0;
  std::int64_t padded_numel = 0;
};

// What the last synced step's communication cost and how much of it ran while
// backward was still computing.
struct GradientSyncStats {
  std::int64_t synced_steps = 0;  // finalize_backward() calls that synced
  int bucket_count = 0;
  // Buckets whose all-reduce started before finalize_backward(), i.e. from
  // the gradient hooks, overlapping backward.
  int buckets_launched_during_backward = 0;
  // From the first all-reduce's start to the end of the last wait: how long
  // communication was in flight (an upper bound of the pure transfer time).
  double communication_seconds = 0;
  // Time finalize_backward() spent blocked waiting for all-reduces (and,
  // when sharded, backward waiting for a bucket's reduce-scatter before it
  // could free that bucket's buffer).
  double exposed_wait_seconds = 0;
  // Whole finalize_backward(): launches, waits, division and copies back.
  double finalize_seconds = 0;
  // Share of the in-flight time that overlapped backward:
  // 1 - exposed_wait / communication (0 when nothing was sent). An upper
  // bound of the communication hidden: in-flight time includes idle gaps
  // between buckets. bench/gradient_sync measures the step-time saving.
  double hidden_fraction() const;
};

class GradientReducer {
 public:
  // `parameters` in registration order (Module::parameters()); those that do
  // not require grad are never synced. `buffers` are what broadcast_buffers()
  // sends. Hooks are installed only when the job has more than one process.
  GradientReducer(std::shared_ptr<Communicator> communicator, std::vector<at::Tensor> parameters,
                  GradientSyncOptions options = {}, std::vector<at::Tensor> buffers = {});
  // The same for a module's parameters and buffers (recursively).
  static std::unique_ptr<GradientReducer> for_module(std::shared_ptr<Communicator> communicator,
                                                     torch::nn::Module& module,
                                                     GradientSyncOptions options = {});
  // Removes the hooks. Must not run while a backward pass is in progress.
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Optional, before backward; acts only with find_unused_parameters: walks
  // the autograd graph from `outputs` and marks parameters it cannot reach as
  // ready, so their buckets start during backward.
  void prepare_for_backward(const std::vector<at::Tensor>& outputs);

  // Right after backward returns: starts the buckets still waiting (a
  // parameter without a gradient counts as zero, or as its .grad accumulated
  // in no_sync steps), waits for all, and writes the average into every
  // synced parameter's .grad (creating it where undefined). Does nothing
  // when sync is disabled or the job has one process.
  void finalize_backward();

  // no_sync / gradient accumulation: while disabled, the hooks do nothing,
  // gradients accumulate locally and finalize_backward() is a no-op; the
  // next synced step averages the accumulated gradients.
  void set_sync_enabled(bool enabled);
  bool sync_enabled() const;

  // Overwrites every buffer with process 0's (one coalesced broadcast) when
  // options().broadcast_buffers(); returns whether it did. Every process must
  // call it at the same point.
  bool broadcast_buffers();
  // broadcast_buffers(), after a synced backward, when the backward that
  // finalize_backward() last ended reached this model's parameters on every
  // process (agreed in one small all-reduce); returns whether it did. A
  // model's buffers are safe to overwrite then: the graph that its forward
  // saved them in was consumed. A model that backward did not reach (a GAN's
  // generator while the discriminator alone steps) may have a live graph
  // that saved its buffers (BatchNorm's running statistics), which an
  // in-place overwrite would invalidate; its buffers travel after the
  // backward that reaches it. DDP broadcasts before each forward instead,
  // which LibTorch modules give no hook for. Nothing (no collective) when
  // the model has no buffers or options().broadcast_buffers() is false.
  bool broadcast_buffers_after_backward();

  const std::vector<at::Tensor>& parameters() const;

  const GradientSyncOptions& options() const;
  // Buckets in launch order (the same on every process).
  const std::vector<GradientBucket>& buckets() const;
  GradientSyncStats last_step_stats() const;
  // How many times the unused-parameter warning was printed (0 or 1).
  int unused_parameter_warnings() const;

 private:
  struct State;  // src/parallel/reducer_state.h
  // Sharded training's access (ZeRO: how buckets are partitioned and
  // reduce-scattered) goes through detail::ShardedGradients
  // (src/parallel/sharded_gradients.h), not through programs.
  friend struct detail::ShardedGradients;
  // The constructor's second half: checks every process registered the same
  // parameters, then hooks each one's gradient accumulator.
  void install_hooks();
  // kSharded: how one bucket's reduce-scatter runs: `shard` (fp32) gets the
  // sum over `communicator`'s processes of row rank() of each one's
  // `buffer`. Unset: the Communicator's reduce_scatter_sum_async.
  using ShardedReduceScatter =
      std::function<PendingCollective(Communicator& communicator, const at::Tensor& buffer,
                                      at::Tensor& shard, const std::string& what)>;
  // Before the first backward (ZeRO++ qgZ sets a quantized one); an empty
  // function restores the plain reduce-scatter. set_reduce_scatter_wire is
  // this with the Communicator's low-precision form.
  void set_reduce_scatter(ShardedReduceScatter reduce_scatter);
  // Sharded training (src/sharding calls it, before the first backward):
  // pads every bucket to a multiple of the number of processes. kReplicated
  // forces gradient_as_bucket_view, so each bucket buffer holds the averaged
  // gradients. kSharded reduce-scatters each bucket instead of all-reducing
  // it: after a synced backward only gradient_shard(b) holds averages (this
  // process's shard), and the synced parameters' .grad are released (left
  // undefined), which is what saves the memory. ConfigError with comm_hook
  // or find_unused_parameters (not supported with sharding yet).
  // `unit_of` (ZeRO stage 3, kSharded only): one entry per parameter, the
  // unit it belongs to or -1; the buckets are laid out again so that each
  // unit's parameters fill buckets of their own (src/parallel/bucket_assignment.h).
  void partition_buckets(GradientPartition partition, const std::vector<int>& unit_of = {});
  GradientPartition partition() const;
  // Where parameter `index`'s gradient starts in its bucket (-1: frozen).
  std::int64_t offset_in_bucket(std::size_t parameter_index) const;
  // This process's shard of bucket b's averaged gradients (n elements; valid
  // after a synced backward): a view into the bucket buffer (kReplicated) or
  // its own tensor (kSharded).
  at::Tensor gradient_shard(std::size_t bucket);
  // kSharded, before the backward pass of the parameters in `bucket` (ZeRO
  // stage 3 calls it as a unit's backward begins): allocates the bucket's
  // reduce-scatter buffer now and makes their .grad views into it, so that
  // autograd adds the gradients in place instead of beside the buffer (one
  // unit's gradients fewer alive at a time). Gradients accumulated in
  // no_sync steps are copied in first. Nothing when sync is disabled, the
  // bucket has launched, or it sends another dtype than it computes.
  void begin_bucket_gradients(std::size_t bucket);
  // kSharded: whether a bucket's reduce-scatter may run on while the next
  // bucket's gradients are computed (default true). false waits for each as
  // it launches: one bucket buffer alive at a time, communication exposed.
  void set_overlap_reduce_scatter(bool overlap);
  // ZeRO offloading in a job of one process: the reducer works as in a job
  // of many (hooks, buckets, shards that are whole buckets), though it has
  // nobody to reduce with, because the offloaded optimizer steps the
  // buckets' gradients. A reducer of one process is otherwise inert.
  void reduce_alone();
  // kSharded, hybrid sharding (before the first backward): `replicas` joins
  // this process with those holding the same shard in the other groups of
  // the job. After each bucket's reduce-scatter in this reducer's group, its
  // shard is summed across them, and the average is over every process of
  // the job.
  void set_replica_communicator(std::shared_ptr<Communicator> replicas);
  // kSharded (before the first backward): each bucket's reduce-scatter
  // carries `wire` (bf16/fp16): every process's gradients are rounded to it
  // and the shard is their fp32 sum (Communicator's low-precision form).
  // nullopt (the default): the gradients' own dtype.
  void set_reduce_scatter_wire(std::optional<at::ScalarType> wire);
  // kSharded: zero_grad for the shards. Until it is called, each synced
  // backward adds its averaged shard to them, as LibTorch adds a backward
  // pass's gradients to .grad (several backward passes before one step).
  void clear_gradient_shards();

  std::unique_ptr<State> state_;
};

// Overwrites every parameter (and, with include_buffers, every buffer) of
// `module` with process 0's, without recording autograd history. Every
// process must call it; module structures must match.
void broadcast_module_state(Communicator& communicator, torch::nn::Module& module,
                            bool include_buffers = true);

}  // namespace accelerate
