// `accelerate estimate-memory`'s training section: accelerate-cpp's model
// state per stage, offload and hybrid sharding (against the ZeRO formulas
// written out here), DeepSpeed's published estimator (computed here from its
// definition), the GPT activation terms, config.json parsing for the three
// families (against the published parameter counts of GPT-2, BERT-base and
// Llama-2-7B), and the command's errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "accelerate/common/errors.h"
#include "cli/cli_test_support.h"
#include "cli/training_estimate.h"
#include "cli/transformer_shape.h"

namespace accelerate::cli {
namespace {

using testing::run_accelerate;
using testing::TemporaryFolder;
using testing::write_file;

constexpr double kPsi = 1'000'000;

TrainingSetup setup_of(int stage, int processes, int nodes = 1, bool hybrid = false) {
  TrainingSetup setup;
  setup.zero_stage = stage;
  setup.num_processes = processes;
  setup.num_nodes = nodes;
  setup.hybrid = hybrid;
  return setup;
}

TEST(ModelStateEstimate, EachStageHoldsItsZeroFormula) {
  const double n = 4;
  const auto total = [](const ModelStateBytes& b) { return b.device() + b.host(); };
  EXPECT_DOUBLE_EQ(total(model_state_per_process(kPsi, 0, setup_of(0, 4))), 16 * kPsi);
  EXPECT_DOUBLE_EQ(total(model_state_per_process(kPsi, 0, setup_of(1, 4))),
                   8 * kPsi + 8 * kPsi / n);
  EXPECT_DOUBLE_EQ(total(model_state_per_process(kPsi, 0, setup_of(2, 4))),
                   4 * kPsi + 12 * kPsi / n);
  // Stage 3: the units sharded, what lies outside them whole with its
  // gradients and Adam states sharded (as at stage 2).
  const double root = 200'000, units = kPsi - root;
  const ModelStateBytes three = model_state_per_process(kPsi, root, setup_of(3, 4));
  EXPECT_DOUBLE_EQ(three.device(), 16 * units / n + 4 * root + 12 * root / n);
  EXPECT_DOUBLE_EQ(three.host(), 0);
  EXPECT_DOUBLE_EQ(three.parameters_device, 4 * units / n + 4 * root);
}

TEST(ModelStateEstimate, OptimizerOffloadMovesAdamAndShardCopiesToTheHost) {
  const double n = 4;
  TrainingSetup setup = setup_of(2, 4);
  setup.offload_optimizer = true;
  const ModelStateBytes two = model_state_per_process(kPsi, 0, setup);
  // The device keeps the whole weights and its gradient shard; the host a
  // copy of the parameter shard, of the gradient shard and Adam's moments.
  EXPECT_DOUBLE_EQ(two.device(), 4 * kPsi + 4 * kPsi / n);
  EXPECT_DOUBLE_EQ(two.host(), 16 * kPsi / n);
  EXPECT_DOUBLE_EQ(two.optimizer_device, 0);
  setup.zero_stage = 1;
  const ModelStateBytes one = model_state_per_process(kPsi, 0, setup);
  EXPECT_DOUBLE_EQ(one.device(), 8 * kPsi);  // stage 1 all-reduces whole gradients
  EXPECT_DOUBLE_EQ(one.host(), 16 * kPsi / n);
}

TEST(ModelStateEstimate, ParameterOffloadKeepsOnlyGradientShardsOfUnitsOnTheDevice) {
  const double n = 2, root = 100'000, units = kPsi - root;
  TrainingSetup setup = setup_of(3, 2);
  setup.offload_param = true;
  const ModelStateBytes param_only = model_state_per_process(kPsi, root, setup);
  // Units: shard, its gradient copy and Adam on the host, the reducer's
  // gradient shard on the device. The rest: as stage 2 without offload.
  EXPECT_DOUBLE_EQ(param_only.host(), 16 * units / n);
  EXPECT_DOUBLE_EQ(param_only.device(), 4 * units / n + 4 * root + 12 * root / n);
  setup.offload_optimizer = true;
  const ModelStateBytes both = model_state_per_process(kPsi, root, setup);
  EXPECT_DOUBLE_EQ(both.host(), 16 * kPsi / n);
  EXPECT_DOUBLE_EQ(both.device(), 4 * kPsi / n + 4 * root);
}

TEST(ModelStateEstimate, HybridShardsOverOneNodesProcesses) {
  const ModelStateBytes hybrid =
      model_state_per_process(kPsi, 0, setup_of(3, 8, /*nodes=*/2, /*hybrid=*/true));
  EXPECT_DOUBLE_EQ(hybrid.device(), 16 * kPsi / 4);
  const ModelStateBytes full = model_state_per_process(kPsi, 0, setup_of(3, 8, 2));
  EXPECT_DOUBLE_EQ(full.device(), 16 * kPsi / 8);
  // One process a node (or a job of one): data parallelism, nothing offloaded.
  TrainingSetup single = setup_of(3, 2, 2, true);
  single.offload_optimizer = true;
  EXPECT_EQ(single.effective_stage(), 0);
  EXPECT_DOUBLE_EQ(model_state_per_process(kPsi, 0, single).device(), 16 * kPsi);
  EXPECT_DOUBLE_EQ(model_state_per_process(kPsi, 0, single).host(), 0);
}

// A job of one process offloads (ZeRO-Offload on one GPU): its shards are
// whole buckets, so the stage's formulas hold with N = 1; without
// offloading it trains as data parallelism.
TEST(ModelStateEstimate, AJobOfOneProcessOffloadsAtItsStage) {
  TrainingSetup alone = setup_of(3, 1);
  EXPECT_EQ(alone.effective_stage(), 0);
  alone.offload_optimizer = true;
  alone.offload_param = true;
  EXPECT_EQ(alone.effective_stage(), 3);
  const ModelStateBytes offloaded = model_state_per_process(kPsi, 0, alone);
  EXPECT_GT(offloaded.host(), 0);
  EXPECT_LT(offloaded.device(), 16 * kPsi);
}

TEST(ModelStateEstimate, StageThreeGathersTwoUnitsDuringAStep) {
  EXPECT_DOUBLE_EQ(gathered_unit_bytes(1000, setup_of(3, 4)), 2 * 4 * 1000);
  EXPECT_DOUBLE_EQ(gathered_unit_bytes(1000, setup_of(2, 4)), 0);
}

// DeepSpeed's functions, written from their documented definitions: GPUs
// per node g, nodes m, total G = g m, buffer factor 1.5.
TEST(DeepSpeedEstimate, MatchesItsZero2AndZero3Formulas) {
  const double psi = 7e9, largest = 131e6, g = 8, m = 2, total = g * m;
  TrainingSetup setup = setup_of(2, 16, 2);
  auto zero2 = deepspeed_estimate(psi, std::nullopt, setup);
  ASSERT_TRUE(zero2);
  EXPECT_DOUBLE_EQ(zero2->device_per_process, 4 * psi + std::floor(16 * psi / total));
  EXPECT_DOUBLE_EQ(zero2->host_per_node, psi * 4 * g * 1.5);
  setup.offload_optimizer = true;
  zero2 = deepspeed_estimate(psi, std::nullopt, setup);
  EXPECT_DOUBLE_EQ(zero2->device_per_process, 2 * psi);
  EXPECT_DOUBLE_EQ(zero2->host_per_node, psi * std::max(4 * total, 16.0) * 1.5);

  setup = setup_of(3, 16, 2);
  EXPECT_FALSE(deepspeed_estimate(psi, std::nullopt, setup).has_value());
  auto zero3 = deepspeed_estimate(psi, largest, setup);
  EXPECT_DOUBLE_EQ(zero3->device_per_process, 4 * largest + std::floor(18 * psi / total));
  EXPECT_DOUBLE_EQ(zero3->host_per_node, largest * 4 * g * 1.5);
  setup.offload_optimizer = true;
  zero3 = deepspeed_estimate(psi, largest, setup);
  EXPECT_DOUBLE_EQ(zero3->device_per_process, 4 * largest + std::floor(2 * psi / total));
  EXPECT_DOUBLE_EQ(zero3->host_per_node, psi * 16 / m * 1.5);
  setup.offload_param = true;
  zero3 = deepspeed_estimate(psi, largest, setup);
  EXPECT_DOUBLE_EQ(zero3->device_per_process, 4 * largest);
  EXPECT_DOUBLE_EQ(zero3->host_per_node, psi * 18 / m * 1.5);
  EXPECT_FALSE(deepspeed_estimate(psi, largest, setup_of(0, 16, 2)).has_value());
}

// The GPT example's small preset: L = 6, C = 384, H = 6, I = 4C, V = 4096.
struct GptTerms {
  double a, s, l, m, st;
  GptTerms(double batch, double t) {
    a = 4 * batch * t * 384, s = 4 * batch * 6 * t * t, l = 4 * batch * t * 4096, m = t * t;
    st = 4 * batch * t;
  }
};

TEST(ActivationEstimate, GptBlockHoldsSixteenWidthsScoresAndMask) {
  const TransformerShape small = gpt_preset("small", 4096);
  for (double t : {256.0, 4096.0}) {
    const GptTerms z(2, t);
    const ActivationBytes plain = activation_bytes(small, {static_cast<int64_t>(t), 2, false});
    const double block = 16 * z.a + z.s + z.m + 4 * z.st;
    EXPECT_DOUBLE_EQ(plain.held, z.a + 6 * block + z.a + 2 * z.st + z.l) << t;
    EXPECT_GE(plain.forward_peak, plain.held + z.l);
    // Backward: log_softmax's two vocabulary-wide gradients, or the last
    // block's scores' gradient twice beside its saved tensors.
    const double scores = z.a + 5 * block + 8 * z.a + 3 * z.s + z.m + 4 * z.st + 4 * 4096 * 384;
    EXPECT_DOUBLE_EQ(plain.backward_peak, std::max(plain.held + 2 * z.l, scores)) << t;
    const ActivationBytes ckpt = activation_bytes(small, {static_cast<int64_t>(t), 2, true});
    EXPECT_DOUBLE_EQ(ckpt.held, 6 * z.a + 2 * z.a + 2 * z.st + z.l) << t;
    const double recompute =
        6 * z.a + 10 * z.a + 3 * z.s + z.m + 4 * z.st + 4 * 9 * 384 * 384 + 4 * 4096 * 384;
    EXPECT_DOUBLE_EQ(ckpt.backward_peak, std::max(ckpt.held + 2 * z.l, recompute)) << t;
  }
}

// Under bf16 autocast the linears keep bf16 inputs, outputs and weight
// casts, the residual stream and LayerNorms stay fp32: per block 5.5a + i +
// s/2 + mask + stats and its weights at 2 bytes; the head keeps its bf16
// input, fp32 log_softmax and its weight's cast. A checkpointed block's
// no-grad forward saves no weight casts.
TEST(ActivationEstimate, Bf16AutocastHalvesTheMatmulTensorsAndKeepsWeightCasts) {
  const TransformerShape small = gpt_preset("small", 4096);
  for (double t : {256.0, 1024.0}) {
    const GptTerms z(1, t);
    const double i = 4 * t * 1536, weights = 2.0 * block_parameters(small);
    const double head = z.a / 2 + 2 * z.st + z.l + 2 * 4096 * 384;
    const double block = 5.5 * z.a + i + z.s / 2 + z.m + 4 * z.st;
    ActivationOptions options{static_cast<int64_t>(t), 1, false};
    options.bf16 = true;
    const ActivationBytes plain = activation_bytes(small, options);
    EXPECT_DOUBLE_EQ(plain.held, z.a + 6 * (block + weights) + head) << t;
    EXPECT_DOUBLE_EQ(plain.forward_peak, plain.held + 1.5 * z.l) << t;
    options.checkpointing = true;
    const ActivationBytes ckpt = activation_bytes(small, options);
    EXPECT_DOUBLE_EQ(ckpt.held, 7 * z.a + head) << t;
    EXPECT_LT(plain.held, activation_bytes(small, {static_cast<int64_t>(t), 1, false}).held * 1.1);
  }
}

TEST(ActivationEstimate, CheckpointingHoldsLessAndScoresGrowWithTheSquareOfT) {
  const TransformerShape small = gpt_preset("small", 4096);
  const ActivationBytes plain = activation_bytes(small, {1024, 1, false});
  const ActivationBytes ckpt = activation_bytes(small, {1024, 1, true});
  EXPECT_LT(ckpt.held, plain.held / 5);
  EXPECT_LT(ckpt.peak(), plain.peak());
  const double s1 = activation_bytes(small, {2048, 1, false}).held;
  const double s2 = activation_bytes(small, {4096, 1, false}).held;
  // Between the widths' 2x and the T x T scores' 4x, nearer the scores'.
  EXPECT_GT(s2 / s1, 3.0);
  EXPECT_LT(s2 / s1, 4.0);
}

// bench/memory/configs/llama-bench.json: L = 4, C = 256, H = 8, 4 key/value
// heads, I = 688, V = 4096, untied; measured by transformer_activation_bench.
TransformerShape llama_bench_shape() {
  TransformerShape shape;
  shape.family = TransformerFamily::kLlama;
  shape.layers = 4, shape.hidden = 256, shape.heads = 8, shape.kv_heads = 4;
  shape.intermediate = 688, shape.vocab = 4096, shape.positions = 4096;
  shape.tied_embeddings = false, shape.attention_bias = false, shape.mlp_bias = false;
  return shape;
}

TEST(ActivationEstimate, LlamaCountsEachRmsNormsNormalisedInputAndTheRotaryTables) {
  const TransformerShape llama = llama_bench_shape();
  for (double t : {256.0, 1024.0}) {
    const double a = 4 * 2 * t * 256, kv = a / 2, i = 4 * 2 * t * 688, s = 4 * 2 * 8 * t * t;
    const double m = t * t, st = 4 * 2 * t, l = 4 * 2 * t * 4096, rope = 2 * 4 * t * 32;
    // Per block: two RMSNorms' outputs and normalised inputs, q twice,
    // attention out, h, output (9a); k twice and v at key/value width, k
    // and v repeated to every head; the SwiGLU's four; scores, mask, 1/rms.
    const double block = 9 * a + 3 * kv + 2 * a + 4 * i + s + m + 2 * st;
    const ActivationBytes plain = activation_bytes(llama, {static_cast<int64_t>(t), 2, false});
    EXPECT_DOUBLE_EQ(plain.held, a + rope + 4 * block + 2 * a + st + l) << t;
    const ActivationBytes ckpt = activation_bytes(llama, {static_cast<int64_t>(t), 2, true});
    EXPECT_DOUBLE_EQ(ckpt.held, a + rope + 3 * a + a + 2 * a + st + l) << t;
  }
}

// bench/memory/configs/bert-bench.json: L = 4, C = 256, H = 8, I = 1024, a
// sequence classifier (the library's BERT head).
TEST(ActivationEstimate, BertIsASequenceClassifierWithoutVocabularyLogits) {
  TransformerShape bert;
  bert.family = TransformerFamily::kBert;
  bert.layers = 4, bert.hidden = 256, bert.heads = 8, bert.kv_heads = 8;
  bert.intermediate = 1024, bert.vocab = 4096, bert.positions = 4096, bert.causal = false;
  for (double t : {256.0, 1024.0}) {
    const double a = 4 * 2 * t * 256, i = 4 * 2 * t * 1024, s = 4 * 2 * 8 * t * t;
    const double st = 4 * 2 * t, pooled = 4 * 2 * 256;
    const double block = 8 * a + 2 * i + s + 4 * st;
    // The embeddings' LayerNorm keeps its input too; the head, the pooler's
    // dense and tanh outputs of the first token.
    const ActivationBytes plain = activation_bytes(bert, {static_cast<int64_t>(t), 2, false});
    EXPECT_DOUBLE_EQ(plain.held, 2 * a + 2 * st + 4 * block + 2 * pooled) << t;
    const ActivationBytes ckpt = activation_bytes(bert, {static_cast<int64_t>(t), 2, true});
    EXPECT_DOUBLE_EQ(ckpt.held, 2 * a + 2 * st + 3 * a + a + 2 * pooled) << t;
    // Nothing scales with the vocabulary.
    TransformerShape bigger = bert;
    bigger.vocab = 8 * bert.vocab;
    const ActivationBytes big = activation_bytes(bigger, {static_cast<int64_t>(t), 2, false});
    EXPECT_DOUBLE_EQ(big.peak(), plain.peak()) << t;
  }
}

TEST(TransformerShape, PresetsMatchTheGptExample) {
  // examples/gpt: "small" is ~14M parameters at vocab 8192.
  const TransformerShape small = gpt_preset("small", 8192);
  EXPECT_EQ(block_parameters(small), 12 * 384 * 384 + 13 * 384);
  EXPECT_EQ(total_parameters(small), 6 * block_parameters(small) + 8192 * 384 + 256 * 384 + 768);
  std::string name;
  EXPECT_TRUE(is_gpt_preset_name("gpt-tiny", &name));
  EXPECT_EQ(name, "tiny");
  EXPECT_FALSE(is_gpt_preset_name("gpt-large", &name));
}

TEST(TransformerShape, ReadsTheThreeFamiliesWithTheirPublishedCounts) {
  TemporaryFolder folder;
  const std::string gpt2 = folder.path() + "/gpt2.json";
  write_file(gpt2,
             R"({"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12,
                 "n_inner": null, "n_positions": 1024, "vocab_size": 50257})");
  const TransformerShape g = transformer_from_config_json(gpt2);
  EXPECT_EQ(g.family, TransformerFamily::kGpt2);
  EXPECT_EQ(g.intermediate, 4 * 768);
  EXPECT_EQ(total_parameters(g), 124'439'808);  // GPT2Model, the head tied
  EXPECT_EQ(largest_layer_parameters(g), 50257 * 768);

  const std::string bert = folder.path() + "/bert.json";
  write_file(bert, R"({"model_type": "bert", "num_hidden_layers": 12, "hidden_size": 768,
                       "num_attention_heads": 12, "intermediate_size": 3072,
                       "max_position_embeddings": 512, "type_vocab_size": 2,
                       "vocab_size": 30522})");
  const TransformerShape b = transformer_from_config_json(bert);
  EXPECT_FALSE(b.causal);
  EXPECT_EQ(total_parameters(b), 109'482'240);  // bert-base-uncased's BertModel

  const std::string llama = folder.path() + "/llama.json";
  write_file(llama, R"({"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
                        "num_attention_heads": 32, "num_key_value_heads": 32,
                        "intermediate_size": 11008, "max_position_embeddings": 4096,
                        "vocab_size": 32000, "tie_word_embeddings": false})");
  const TransformerShape l = transformer_from_config_json(llama);
  EXPECT_EQ(total_parameters(l), 6'738'415'616);  // Llama-2-7B
  EXPECT_FALSE(l.attention_bias);
}

TEST(TransformerShape, GroupedQueryAttentionShrinksKeyAndValue) {
  TemporaryFolder folder;
  const std::string path = folder.path() + "/config.json";
  write_file(path, R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
                       "num_attention_heads": 8, "num_key_value_heads": 2,
                       "intermediate_size": 128, "vocab_size": 100})");
  const TransformerShape shape = transformer_from_config_json(path);
  // q and o 64x64, k and v 64x16, three MLP matrices, two norms.
  EXPECT_EQ(block_parameters(shape), 2 * 64 * 64 + 2 * 64 * 16 + 3 * 64 * 128 + 2 * 64);
  EXPECT_EQ(shape.positions, 0);
}

TEST(TransformerShape, BadConfigsAreOneLineNamingTheKey) {
  TemporaryFolder folder;
  const std::string path = folder.path() + "/config.json";
  const auto message = [&](const std::string& json) {
    write_file(path, json);
    try {
      transformer_from_config_json(path);
    } catch (const ConfigError& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(R"({"model_type": "t5"})").find("model_type 't5'"), std::string::npos);
  EXPECT_NE(
      message(R"({"model_type": "gpt2", "n_layer": 2})").find("\"n_embd\" or \"hidden_size\""),
      std::string::npos);
  EXPECT_NE(message(R"({"n_layer": 2, "n_embd": 0})").find("\"n_embd\" must be"),
            std::string::npos);
  EXPECT_NE(message(R"({"model_type": "gpt2", "n_layer": 2, "n_embd": 10, "n_head": 3,
                        "vocab_size": 5, "n_positions": 8})")
                .find("not a multiple"),
            std::string::npos);
  EXPECT_NE(message("{oops").find("not valid JSON"), std::string::npos);
}

TEST(EstimateMemoryTraining, OldInvocationsPrintNoTrainingSection) {
  const auto old = run_accelerate({"estimate-memory", "1e9", "--num_processes", "2"});
  ASSERT_EQ(old.exit_code, 0) << old.err;
  EXPECT_EQ(old.out.find("Training memory per process"), std::string::npos);
  const auto extended =
      run_accelerate({"estimate-memory", "1e9", "--num_processes", "2", "--zero_stage", "2"});
  ASSERT_EQ(extended.exit_code, 0) << extended.err;
  // The old output unchanged, the new section after it.
  EXPECT_EQ(extended.out.rfind(old.out, 0), 0u) << extended.out;
  EXPECT_NE(extended.out.find("Training memory per process (accelerate-cpp): ZeRO stage 2 on 2"),
            std::string::npos);
  EXPECT_NE(extended.out.find("estimate_zero2_model_states_mem_needs"), std::string::npos);
}

TEST(EstimateMemoryTraining, PresetPrintsActivationRows) {
  const auto result = run_accelerate({"estimate-memory", "gpt-small", "--seq_len", "1024",
                                      "--activation_checkpointing", "--num_processes", "2",
                                      "--fsdp_sharding_strategy", "FULL_SHARD"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("activations held for backward (T=1024, micro-batch 1, checkpointed)"),
            std::string::npos)
      << result.out;
  EXPECT_NE(result.out.find("2 gathered blocks"), std::string::npos);
}

// bf16 autocast (measured for the GPT-2 family): the preset prints its
// activation rows; Llama and BERT are refused with the activation flags and
// print no activation rows without them.
TEST(EstimateMemoryTraining, Bf16ActivationsForGptOnly) {
  const auto gpt = run_accelerate(
      {"estimate-memory", "gpt-small", "--seq_len", "256", "--mixed_precision", "bf16"});
  ASSERT_EQ(gpt.exit_code, 0) << gpt.err;
  EXPECT_NE(gpt.out.find("activations held for backward (T=256, micro-batch 1, bf16 autocast)"),
            std::string::npos)
      << gpt.out;
  TemporaryFolder folder;
  const std::string llama = folder.path() + "/config.json";
  write_file(llama, R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
                        "num_attention_heads": 4, "intermediate_size": 128,
                        "max_position_embeddings": 256, "vocab_size": 1000})");
  const auto refused =
      run_accelerate({"estimate-memory", llama, "--seq_len", "128", "--mixed_precision", "bf16"});
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("estimated for GPT-2-style models only"), std::string::npos)
      << refused.err;
  const auto quiet =
      run_accelerate({"estimate-memory", llama, "--zero_stage", "0", "--mixed_precision", "bf16"});
  ASSERT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_EQ(quiet.out.find("activations held"), std::string::npos) << quiet.out;
}

TEST(EstimateMemoryTraining, BadValuesAreOneLineWithExitCodeTwo) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"1e9", "--zero_stage", "4"}, "--zero_stage expects 0, 1, 2 or 3, got '4'"},
      {{"1e9", "--zero_stage", "2", "--offload_param"}, "--offload_param needs ZeRO stage 3"},
      {{"1e9", "--offload_optimizer"}, "--offload_optimizer needs ZeRO stage 1, 2 or 3"},
      {{"1e9", "--num_processes", "4", "--num_nodes", "3"}, "--num_nodes 3 does not divide"},
      {{"1e9", "--seq_len", "128"}, "need a transformer's shape"},
      {{"gpt-small", "--seq_len", "0"}, "--seq_len expects a whole number >= 1, got '0'"},
      {{"1e9", "--mixed_precision", "fp8"}, "--mixed_precision expects one of no, fp16, bf16"},
      {{"1e9", "--fsdp_sharding_strategy", "SHARD"}, "--fsdp_sharding_strategy expects one of"},
      {{"1e9", "--zero_stage", "3", "--fsdp_sharding_strategy", "FULL_SHARD"}, "not both"},
      {{"1e9", "--vocab_size", "100"}, "--vocab_size applies to the GPT presets"},
      {{"gpt-small", "--seq_len", "64", "--mixed_precision", "fp16"},
       "activations under fp16 autocast are not estimated"},
      {{"gpt-small", "--num_processes", "4", "--parallelism_config_tp_size", "3"},
       "--parallelism_config_tp_size 3 does not divide --num_processes 4"},
      {{"gpt-small", "--parallelism_config_tp_size", "2"},
       "--parallelism_config_tp_size 2 does not divide --num_processes 1"},
      {{"1e9", "--num_processes", "2", "--parallelism_config_tp_size", "2"},
       "--parallelism_config_tp_size needs a transformer's shape"},
      {{"gpt-small", "--num_processes", "2", "--parallelism_config_tp_size", "2", "--seq_len",
        "64"},
       "activations at tensor parallelism are not estimated yet"},
  };
  for (const auto& [args, expected] : cases) {
    std::vector<std::string> full = {"estimate-memory"};
    full.insert(full.end(), args.begin(), args.end());
    const auto result = run_accelerate(full);
    EXPECT_EQ(result.exit_code, 2) << expected;
    EXPECT_NE(result.err.find(expected), std::string::npos) << result.err;
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
    EXPECT_TRUE(result.out.empty()) << result.out;
  }
}

// --parallelism_config_tp_size: each process's parts of the split layers,
// ZeRO over the processes of one tp rank (tests/models/
// tensor_parallel_memory_test.cpp counts what the split models hold
// against these figures).
TEST(EstimateMemoryTraining, TensorParallelismCountsEachProcesssParts) {
  const auto result = run_accelerate({"estimate-memory", "gpt-small", "--num_processes", "4",
                                      "--zero_stage", "3", "--parallelism_config_tp_size", "2"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("ZeRO stage 3 on 4 processes, tensor parallelism over groups of 2 "
                            "(ZeRO over 2 processes)"),
            std::string::npos)
      << result.out;
  const TransformerShape shape = gpt_preset("small", 4096);
  const double held = parameters_per_process(shape, 2).total;
  EXPECT_LT(held, 0.6 * static_cast<double>(total_parameters(shape)));
  EXPECT_NE(result.out.find("At tp 2 each process holds " + std::to_string(std::llround(held)) +
                            " parameters"),
            std::string::npos)
      << result.out;
  EXPECT_EQ(result.out.find("DeepSpeed's estimate_zero3"), std::string::npos) << result.out;
}

}  // namespace
}  // namespace accelerate::cli
