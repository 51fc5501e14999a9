#include "cli/training_estimate.h"

#include <algorithm>

namespace accelerate::cli {
namespace {

constexpr double kFloat = 4;  // bytes of a float32 element

// accelerate-cpp's per-process bytes for Ψ parameters that are sharded as
// `stage` says (a unit's at stage 3, the rest at most as at stage 2).
void add_state(ModelStateBytes& out, double psi, int stage, bool unit, const TrainingSetup& setup) {
  const double s = setup.shard_processes();
  const double weights = kFloat * psi;
  if (stage == 0) {
    out.parameters_device += weights;
    out.gradients_device += weights;
    out.optimizer_device += 2 * weights;
    return;
  }
  const bool shard_in_host = unit && stage == 3 && setup.offload_param;
  // Offloading steps the optimizer on host copies of the shards.
  const bool stepped_in_host = shard_in_host || setup.offload_optimizer;
  if (shard_in_host) {
    out.parameters_host += weights / s;
  } else {
    out.parameters_device += unit && stage == 3 ? weights / s : weights;
    if (stepped_in_host) out.parameters_host += weights / s;  // the host mirror
  }
  // Stage 1 all-reduces whole gradient buckets; stages 2-3 keep a shard.
  out.gradients_device += stage == 1 ? weights : weights / s;
  if (stepped_in_host) out.gradients_host += weights / s;
  (stepped_in_host ? out.optimizer_host : out.optimizer_device) += 2 * weights / s;
}

}  // namespace

ModelStateBytes model_state_per_process(double parameters, double outside_units,
                                        const TrainingSetup& setup) {
  ModelStateBytes out;
  const int stage = setup.effective_stage();
  if (stage == 3) {
    add_state(out, parameters - outside_units, 3, /*unit=*/true, setup);
    add_state(out, outside_units, 3, /*unit=*/false, setup);
  } else {
    add_state(out, parameters, stage, /*unit=*/false, setup);
  }
  return out;
}

double gathered_unit_bytes(double unit_parameters, const TrainingSetup& setup) {
  return setup.effective_stage() == 3 ? 2 * kFloat * unit_parameters : 0;
}

std::optional<DeepSpeedEstimate> deepspeed_estimate(double total_params,
                                                    std::optional<double> largest_layer_params,
                                                    const TrainingSetup& setup) {
  // DeepSpeed's names: GPUs per node and nodes; its host figure is per node.
  const double per_node = setup.processes_per_node();
  const double nodes = setup.num_nodes;
  const double total_gpus = per_node * nodes;
  const double factor = 1.5;  // additional_buffer_factor
  DeepSpeedEstimate estimate;
  if (setup.zero_stage == 1 || setup.zero_stage == 2) {
    if (setup.offload_optimizer) {
      estimate.device_per_process = 2 * total_params;
      estimate.host_per_node = total_params * std::max(4 * total_gpus, 16.0) * factor;
    } else {
      estimate.device_per_process =
          4 * total_params +
          static_cast<double>(static_cast<int64_t>(16 * total_params / total_gpus));
      estimate.host_per_node = total_params * 4 * per_node * factor;
    }
    return estimate;
  }
  if (setup.zero_stage != 3 || !largest_layer_params) return std::nullopt;
  const double largest_layer_memory = 4 * *largest_layer_params;
  const double gpus_factor = 1 / nodes;
  if (setup.offload_optimizer && setup.offload_param) {
    estimate.device_per_process = largest_layer_memory;
    estimate.host_per_node = total_params * 18 * gpus_factor * factor;
  } else if (setup.offload_optimizer) {
    estimate.device_per_process =
        largest_layer_memory +
        static_cast<double>(static_cast<int64_t>(2 * total_params / total_gpus));
    estimate.host_per_node = total_params * 16 * gpus_factor * factor;
  } else {
    // DeepSpeed's function has no parameter offload without optimizer
    // offload; its no-offload branch stands for both.
    estimate.device_per_process =
        largest_layer_memory +
        static_cast<double>(static_cast<int64_t>(18 * total_params / total_gpus));
    estimate.host_per_node = *largest_layer_params * 4 * per_node * factor;
  }
  return estimate;
}

namespace {

// Sizes of one micro-batch's tensors in bytes (float32; the causal mask is
// bool, one byte an element, shared by the batch and heads).
struct Sizes {
  double bt, a, i, s, l, mask, stats, kv, rope;
  double pooled;  // one vector of the width per sequence (BERT's pooler)
};

Sizes sizes_of(const TransformerShape& shape, const ActivationOptions& options) {
  const double bt = static_cast<double>(options.micro_batch) * static_cast<double>(options.seq_len);
  const double t = static_cast<double>(options.seq_len);
  Sizes z;
  z.bt = bt;
  z.a = kFloat * bt * shape.hidden;
  z.pooled = kFloat * static_cast<double>(options.micro_batch) * shape.hidden;
  z.i = kFloat * bt * shape.intermediate;
  z.s = kFloat * options.micro_batch * shape.heads * t * t;
  // BERT trains as a sequence classifier (the library's BERT head): no
  // vocabulary-wide logits.
  z.l = shape.family == TransformerFamily::kBert ? 0 : kFloat * bt * shape.vocab;
  z.mask = shape.causal ? t * t : 0;
  z.stats = kFloat * bt;  // one float per token (a norm's mean or 1/std)
  z.kv = z.a * static_cast<double>(shape.kv_heads) / static_cast<double>(shape.heads);
  // Llama's rotary cos and sin tables, [T, head_dim] each, live all pass.
  z.rope = shape.family == TransformerFamily::kLlama
               ? 2 * kFloat * t * static_cast<double>(shape.hidden / shape.heads)
               : 0;
  return z;
}

// What one block saves for backward, its output included.
double block_held(const TransformerShape& shape, const Sizes& z) {
  switch (shape.family) {
    case TransformerFamily::kGpt2:
      // ln_1 out, q k v (views of c_attn's output, or their copies for
      // batched matmul), softmax out, attention out, the residual h, ln_2
      // out, c_fc out, GELU out, the block output; mask; 2 LayerNorms'
      // mean and 1/std.
      return 8 * z.a + 2 * z.i + z.s + z.mask + 4 * z.stats;
    case TransformerFamily::kBert:
      // The same tensors in post-norm order, without a causal mask.
      return 8 * z.a + 2 * z.i + z.s + 4 * z.stats;
    case TransformerFamily::kLlama: {
      // RMSNorm outs (2) and their normalised inputs before the weight (2:
      // the weight's gradient needs them), q before and after rotary,
      // attention out, h, the output; k before and after rotary and v at
      // key/value width (and repeated to every head when grouped); gate,
      // up, SiLU(gate), their product; 2 RMSNorms' 1/rms.
      const double repeated = shape.kv_heads < shape.heads ? 2 * z.a : 0;
      return 9 * z.a + 3 * z.kv + repeated + 4 * z.i + z.s + z.mask + 2 * z.stats;
    }
  }
  return 0;
}

// What the embeddings leave before the first block, its input included:
// BERT's embedding LayerNorm also keeps its input (the sum of the three
// embeddings) and statistics; Llama's rotary tables.
double embedded(const TransformerShape& shape, const Sizes& z) {
  return shape.family == TransformerFamily::kBert ? 2 * z.a + 2 * z.stats : z.a + z.rope;
}

// The head. GPT-2: the final LayerNorm's output and statistics; Llama: the
// final RMSNorm's output, its normalised input and 1/rms; then
// log_softmax's output over the vocabulary (what cross-entropy saves).
// BERT (a sequence classifier): the pooler's dense and tanh outputs of the
// first token, B·C each.
double head_held(const TransformerShape& shape, const Sizes& z) {
  switch (shape.family) {
    case TransformerFamily::kGpt2:
      return z.a + 2 * z.stats + z.l;
    case TransformerFamily::kLlama:
      return 2 * z.a + z.stats + z.l;
    case TransformerFamily::kBert:
      return 2 * z.pooled;
  }
  return 0;
}

// What the end of the forward pass adds for a moment beside everything
// held: the logits beside log_softmax's output; BERT's last LayerNorm's
// temporaries (one activation).
double head_forward_transient(const TransformerShape& shape, const Sizes& z) {
  return shape.family == TransformerFamily::kBert ? z.a : z.l;
}

// Tensors of a block's MLP and attention output that its backward frees
// before it reaches the attention scores (Llama: its post-attention
// RMSNorm's two too).
double freed_before_scores(const TransformerShape& shape, const Sizes& z) {
  return shape.family == TransformerFamily::kLlama ? 4 * z.i + 4 * z.a : 2 * z.i + 3 * z.a;
}

// Parameters whose gradients a checkpointed block returns at once (its
// MLP and attention output projection have theirs when the scores' backward
// runs).
double mlp_and_out_projection(const TransformerShape& shape) {
  const double c = shape.hidden, i = shape.intermediate;
  const double mlp = shape.family == TransformerFamily::kLlama ? 3 * c * i : 2 * c * i;
  return kFloat * (mlp + c * c);
}

// A tied head's weight gradient waits in the embedding's gradient
// accumulator until the embedding's backward, the last of the pass, so it is
// live through every block's backward.
double tied_gradient(const TransformerShape& shape, const Sizes& /*z*/) {
  return shape.tied_embeddings && shape.family != TransformerFamily::kBert
             ? kFloat * static_cast<double>(shape.vocab) * static_cast<double>(shape.hidden)
             : 0;
}

// The GPT-2 family under bf16 autocast, as measured on LibTorch's CPU
// autocast (docs/cli.md): the linears' inputs are saved as their bf16 casts
// (half of a) and their outputs are bf16, the residual stream and the
// LayerNorms stay fp32, and each linear saves its weight's bf16 cast.
ActivationBytes bf16_activation_bytes(const TransformerShape& shape, const Sizes& z,
                                      const ActivationOptions& options) {
  const double layers = static_cast<double>(shape.layers);
  // ln_1's and ln_2's outputs as bf16 casts, q k v, attention out and its
  // projection's input (a/2 each); h and the block output in fp32 (a
  // each); c_fc out and GELU out (i/2 each); softmax out (s/2); mask; stats.
  const double block = 5.5 * z.a + z.i + z.s / 2 + z.mask + 4 * z.stats;
  // The block's weights cast to bf16, saved by its linears (not under a
  // checkpointed block's no-grad forward).
  const double weights = 2 * static_cast<double>(block_parameters(shape));
  const double head_weight = 2 * static_cast<double>(shape.vocab) * shape.hidden;
  // ln_f's output as the head's bf16 input, its statistics, log_softmax's
  // fp32 output; the head's weight cast.
  const double head = z.a / 2 + 2 * z.stats + z.l + head_weight;
  // The logits in bf16 and their fp32 cast beside everything held.
  const double head_transient = 1.5 * z.l;
  const double scores_transient = 2 * z.a + z.s + z.mask;
  // What a block's backward frees before its scores: c_fc's output, the
  // MLP's and ln_2's bf16 inputs.
  const double freed = z.i + 1.5 * z.a;
  ActivationBytes out;
  if (!options.checkpointing) {
    const double before_last = z.a + (layers - 1) * (block + weights);
    out.held = z.a + layers * (block + weights) + head;
    out.forward_peak = std::max(out.held + head_transient, before_last + scores_transient);
    // The residual's gradient (fp32), q k v's (bf16), the scores' twice (bf16).
    const double scores_backward =
        before_last + block + weights - freed + 1.5 * z.a + z.s + tied_gradient(shape, z);
    out.backward_peak = std::max(out.held + 2 * z.l, scores_backward);
    return out;
  }
  const double inputs = layers * z.a;
  out.held = inputs + z.a + head;
  out.forward_peak = std::max(out.held + head_transient, inputs + scores_transient + weights);
  // The recomputed block as above; its parameter gradients come out in
  // bf16 (half of fp32's) before they are added to the fp32 .grad.
  const double recompute = inputs + z.a + block + weights - freed + z.a + 1.5 * z.a + z.s +
                           mlp_and_out_projection(shape) / 2 + tied_gradient(shape, z);
  out.backward_peak = std::max(out.held + 2 * z.l, recompute);
  return out;
}

}  // namespace

ActivationBytes activation_bytes(const TransformerShape& shape, const ActivationOptions& options) {
  const Sizes z = sizes_of(shape, options);
  if (options.bf16) return bf16_activation_bytes(shape, z, options);
  const double layers = static_cast<double>(shape.layers);
  const double block = block_held(shape, z);
  // Every block input (the embedding's output first) is also the previous
  // block's output, counted once.
  const double before_blocks = embedded(shape, z);
  const double head = head_held(shape, z);
  const double head_transient = head_forward_transient(shape, z);
  // Inside the last block's attention, forward holds its norm's output and
  // q k v (4a) while the scores exist twice (scaled and masked, or masked
  // and softmaxed) beside the mask.
  const double scores_transient = 4 * z.a + 2 * z.s + z.mask;
  // The head's transients: the logits beside log_softmax's output (forward),
  // and the two vocabulary-wide gradients as log_softmax's backward runs.
  ActivationBytes out;
  if (!options.checkpointing) {
    const double before_last = before_blocks + (layers - 1) * block;
    out.held = before_blocks + layers * block + head;
    out.forward_peak = std::max(out.held + head_transient, before_last + scores_transient);
    // The last block's softmax backward: its saved tensors less those of the
    // MLP already done, the residual's gradient, q k v's gradient so far
    // (3a), and the scores' gradient twice.
    const double scores_backward = before_last + block - freed_before_scores(shape, z) -
                                   z.a /* block output */ + z.a + 3 * z.a + 2 * z.s;
    out.backward_peak = std::max(out.held + 2 * z.l, scores_backward + tied_gradient(shape, z));
    return out;
  }
  // Checkpointed: forward keeps each block's input and runs it without
  // saving; backward recomputes one block at a time.
  const double inputs = before_blocks + (layers - 1) * z.a;
  out.held = inputs + z.a /* last output */ + head;
  out.forward_peak = std::max(out.held + head_transient, inputs + scores_transient);
  // The recomputed block's softmax backward: the saved inputs, the incoming
  // gradient, the recomputed block (its output kept as the root), the
  // residual's and q k v's gradients, the scores' gradient twice, and the
  // parameter gradients returned so far.
  const double recompute = inputs + z.a + block - freed_before_scores(shape, z) + z.a + 3 * z.a +
                           2 * z.s + mlp_and_out_projection(shape) + tied_gradient(shape, z);
  out.backward_peak = std::max(out.held + 2 * z.l, recompute);
  return out;
}

}  // namespace accelerate::cli
