// examples/finetune end to end, through `accelerate launch`: a tiny random
// Llama and a byte-level BPE tokenizer.json made by transformers and
// `tokenizers` (tests/examples/finetune_reference.py under
// $ACCELERATE_REFERENCE_PYTHON) are fine-tuned on a slice of the Brown
// corpus on 1 process, on 2 under ZeRO stage 3 and on 2 under FSDP; the
// loss must fall, OUTPUT_DIR/final must load in transformers with our
// logits and in `tokenizers`, and a resumed run must end where the
// uninterrupted one does. Without the interpreter (or the corpus) those tests report
// themselves skipped; the bad-input tests run everywhere.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "accelerate/checkpoint/safetensors.h"
#include "accelerate/models/gpt2.h"
#include "accelerate/models/llama.h"
#include "accelerate/models/pretrained.h"
#include "models/reference_python.h"
#include "support/launcher_process.h"
#include "support/temp_dir.h"

namespace am = accelerate::models;
namespace fs = std::filesystem;
using accelerate::testing::max_abs_diff;
using accelerate::testing::RunResult;
using accelerate::testing::TempDir;

namespace {

const std::string kBrownTrain = std::string(BROWN_DIR) + "/train.txt";
const std::string kBrownValidation = std::string(BROWN_DIR) + "/validation.txt";

// The first `count` lines of `from` into `to`.
void copy_lines(const std::string& from, const std::string& to, int count) {
  std::ifstream in(from);
  std::ofstream out(to);
  std::string line;
  for (int i = 0; i < count && std::getline(in, line); ++i) out << line << '\n';
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// The values of `key` the Trainer logged in a run's output folder, in order
// and in full: its JSONL tracker's lines (the runs pass --report_to jsonl;
// the console shows 4 digits, as transformers' does).
std::vector<double> logged(const std::string& output_dir, const std::string& key) {
  std::vector<double> values;
  for (const auto& entry : fs::recursive_directory_iterator(output_dir)) {
    if (entry.path().filename() != "metrics.jsonl") continue;
    std::ifstream in(entry.path());
    for (std::string line; std::getline(in, line);) {
      const auto record = nlohmann::json::parse(line);
      if (record.contains("values") && record["values"].contains(key))
        values.push_back(record["values"][key].get<double>());
    }
  }
  return values;
}

// Our logits for `ids` from a saved folder of either family (its model_type).
at::Tensor folder_logits(const std::string& folder, const at::Tensor& ids) {
  at::NoGradGuard no_grad;
  if (read_json(folder + "/config.json").at("model_type") == "gpt2") {
    auto model = am::GPT2LMHeadModelImpl::from_pretrained(folder);
    model->eval();
    return model->forward(ids);
  }
  auto model = am::LlamaForCausalLMImpl::from_pretrained(folder);
  model->eval();
  return model->forward(ids);
}

// Common flags of both runs: blocks of 64, 20 AdamW steps at a rate a
// random model learns from quickly, a log every 5 steps.
std::vector<std::string> finetune_argv(const std::string& model, const std::string& text,
                                       const std::string& output_dir) {
  return {FINETUNE_PATH, "--model",         model, "--train_file", text,   "--output_dir",
          output_dir,    "--max_steps",     "20",  "--block_size", "64",   "--learning_rate",
          "3e-3",        "--logging_steps", "5",   "--report_to",  "jsonl"};
}

RunResult launch(std::vector<std::string> launch_flags, const std::vector<std::string>& program) {
  std::vector<std::string> argv{"launch", "--main_process_port", "0"};
  argv.insert(argv.end(), launch_flags.begin(), launch_flags.end());
  argv.insert(argv.end(), program.begin(), program.end());
  return accelerate::testing::run_launcher(argv, {}, std::chrono::seconds(120));
}

class Finetune : public ::testing::Test {
 protected:
  // The reference model and text in dir_ (model/, train.txt, expected.json);
  // model_type "llama" or "qwen2".
  void make_reference(const std::string& model_type = "llama") {
    const auto made = accelerate::testing::run_reference_script(
        FINETUNE_REFERENCE_SCRIPT, {"make", dir_.path(), kBrownTrain, "400", model_type});
    ASSERT_EQ(made.exit_code, 0) << made.err;
    expected_ = read_json(dir_.file("expected.json"));
  }

  // finetune on 2 processes with the parallelism `sizes` flags (and
  // `program_flags`) against 1 process: check_run on the split run's final/,
  // the logged losses within `loss_bound` relative of the one-process run's,
  // the final logits within 1e-4. Returns the split run.
  RunResult expect_trains_as_one_process(const std::string& what,
                                         const std::vector<std::string>& sizes,
                                         const std::vector<std::string>& program_flags,
                                         double loss_bound) {
    std::vector<std::string> flags{"--cpu", "--num_processes", "2", "--use_parallelism_config"};
    flags.insert(flags.end(), sizes.begin(), sizes.end());
    auto argv = finetune_argv(dir_.file("model"), dir_.file("train.txt"), dir_.file("split"));
    argv.insert(argv.end(), program_flags.begin(), program_flags.end());
    const auto split = launch(flags, argv);
    EXPECT_EQ(split.exit_code, 0) << split.out << split.err;
    if (split.exit_code != 0) return split;
    const at::Tensor ids = sample_ids();
    const at::Tensor split_logits = check_run(split, dir_.file("split/final"), ids);
    const auto single =
        launch({"--cpu", "--num_processes", "1"},
               finetune_argv(dir_.file("model"), dir_.file("train.txt"), dir_.file("single")));
    EXPECT_EQ(single.exit_code, 0) << single.out << single.err;
    const auto split_losses = logged(dir_.file("split"), "loss"),
               single_losses = logged(dir_.file("single"), "loss");
    EXPECT_EQ(split_losses.size(), single_losses.size()) << split.out;
    for (size_t i = 0; i < std::min(split_losses.size(), single_losses.size()); ++i) {
      EXPECT_NEAR(split_losses[i], single_losses[i], loss_bound * single_losses[i])
          << what << ", log " << i;
    }
    const double diff = max_abs_diff(folder_logits(dir_.file("single/final"), ids), split_logits);
    std::cout << what << " on 2 processes vs 1 process, logits of final/: max abs diff " << diff
              << "\n";
    EXPECT_LE(diff, 1e-4) << what;
    return split;
  }

  // The checks on a run's output and its OUTPUT_DIR/final, shared by both
  // tests: the text's token count as `tokenizers` counts it, a falling
  // loss, transformers' logits equal to ours, the tokenizer loading.
  // Returns our logits of final/ for `ids`.
  at::Tensor check_run(const RunResult& run, const std::string& final_dir, const at::Tensor& ids) {
    const int64_t tokens = expected_.at("tokens").get<int64_t>();
    EXPECT_NE(run.out.find("train.txt: " + std::to_string(tokens) + " tokens in " +
                           std::to_string(tokens / 64) + " blocks of 64"),
              std::string::npos)
        << run.out;
    const auto losses = logged(fs::path(final_dir).parent_path().string(), "loss");
    EXPECT_EQ(losses.size(), 4u) << run.out;
    if (losses.size() >= 2) {
      std::cout << "logged losses: " << losses.front() << " ... " << losses.back() << "\n";
      EXPECT_LT(losses.back(), 0.95 * losses.front());
    }
    EXPECT_TRUE(fs::exists(final_dir + "/config.json"));
    EXPECT_TRUE(fs::exists(final_dir + "/tokenizer.json"));
    EXPECT_TRUE(fs::exists(final_dir + "/tokenizer_config.json"));

    const at::Tensor ours = folder_logits(final_dir, ids);
    // Compared with the model we started from: training changed it.
    EXPECT_GT(max_abs_diff(ours, folder_logits(dir_.file("model"), ids)), 0.1);

    const std::string ids_file = dir_.file("ids.safetensors");
    const std::string logits_file = dir_.file("logits.safetensors");
    accelerate::save_safetensors(ids_file, {{"input_ids", ids}});
    const auto checked = accelerate::testing::run_reference_script(
        FINETUNE_REFERENCE_SCRIPT, {"check", final_dir, ids_file, logits_file});
    EXPECT_EQ(checked.exit_code, 0) << checked.err;
    if (checked.exit_code != 0) return ours;
    const at::Tensor theirs = accelerate::testing::load_named_tensors(logits_file).at("logits");
    const double diff = max_abs_diff(ours, theirs);
    std::cout << "transformers' logits of final/ vs ours: max abs diff " << diff
              << " (largest logit " << theirs.abs().max().item<double>() << ")\n";
    EXPECT_LE(diff, 1e-5);
    // The saved tokenizer gives the source tokenizer's ids in `tokenizers`
    // and in transformers' AutoTokenizer.
    const auto json = nlohmann::json::parse(accelerate::testing::split_lines(checked.out).back());
    EXPECT_EQ(json.at("tokenizers_ids"), expected_.at("sample_ids"));
    EXPECT_EQ(json.at("auto_tokenizer_ids"), expected_.at("sample_ids"));
    return ours;
  }

  at::Tensor sample_ids() {
    at::manual_seed(7);
    return at::randint(0, expected_.at("vocab_size").get<int64_t>(), {2, 24}, at::kLong);
  }

  TempDir dir_{"accelerate-finetune"};
  nlohmann::json expected_;
};

#define REQUIRE_BROWN()         \
  if (!fs::exists(kBrownTrain)) \
  GTEST_SKIP() << "no Brown corpus in " BROWN_DIR ": run scripts/fetch-brown.sh"

// A Qwen2 folder (q/k/v biases, a sliding window of 16 tokens on the second
// layer, shorter than the 64-token blocks): the same program fine-tunes it,
// with --gradient_checkpointing (each layer recomputed in backward), and
// writes a folder transformers loads as Qwen2 again.
TEST_F(Finetune, OneProcessLearnsAndSavesWhatTransformersLoads) {
  REQUIRE_REFERENCE_PYTHON();
  REQUIRE_BROWN();
  ASSERT_NO_FATAL_FAILURE(make_reference("qwen2"));
  copy_lines(kBrownValidation, dir_.file("validation.txt"), 100);
  auto argv = finetune_argv(dir_.file("model"), dir_.file("train.txt"), dir_.file("out"));
  argv.insert(argv.end(), {"--validation_file", dir_.file("validation.txt"), "--eval_strategy",
                           "steps", "--eval_steps", "10", "--gradient_checkpointing"});
  const auto run = launch({"--cpu", "--num_processes", "1"}, argv);
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_TRUE(fs::exists(dir_.file("out/final/model.safetensors")));
  const auto eval_losses = logged(dir_.file("out"), "eval_loss");
  ASSERT_EQ(eval_losses.size(), 2u) << run.out;
  EXPECT_LT(eval_losses[1], eval_losses[0]);
  check_run(run, dir_.file("out/final"), sample_ids());
  EXPECT_NE(run.out.find("model_type qwen2: "), std::string::npos) << run.out;
  EXPECT_EQ(am::read_llama_config(dir_.file("out/final")).model_type, am::LlamaModelType::kQwen2);
}

// Two processes under a DeepSpeed ZeRO-3 config (zero3_init_flag: process
// 1 builds the model without weights and receives its shards), saved in
// shards of at most 100 KB: the same checks, and the model ends where the
// one-process run with the same global batch ends.
TEST_F(Finetune, ZeRO3OnTwoProcessesTrainsAsOneProcessAndSavesShards) {
  REQUIRE_REFERENCE_PYTHON();
  REQUIRE_BROWN();
  ASSERT_NO_FATAL_FAILURE(make_reference());
  std::ofstream(dir_.file("zero3.yaml")) << R"(compute_environment: LOCAL_MACHINE
deepspeed_config:
  gradient_accumulation_steps: 1
  gradient_clipping: 1.0
  offload_optimizer_device: none
  offload_param_device: none
  zero3_init_flag: true
  zero3_save_16bit_model: false
  zero_stage: 3
distributed_type: DEEPSPEED
machine_rank: 0
mixed_precision: 'no'
num_machines: 1
num_processes: 2
use_cpu: true
)";
  auto argv = finetune_argv(dir_.file("model"), dir_.file("train.txt"), dir_.file("zero3"));
  argv.insert(argv.end(), {"--per_device_train_batch_size", "4", "--max_shard_size", "100KB"});
  const auto run = launch({"--config_file", dir_.file("zero3.yaml")}, argv);
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_NE(run.out.find("2 process(es)"), std::string::npos) << run.out;
  const auto index = read_json(dir_.file("zero3/final/model.safetensors.index.json"));
  EXPECT_GT(index.at("weight_map").size(), 0u);
  EXPECT_FALSE(fs::exists(dir_.file("zero3/final/model.safetensors")));
  const at::Tensor ids = sample_ids();
  const at::Tensor zero3 = check_run(run, dir_.file("zero3/final"), ids);

  const auto single =
      launch({"--cpu", "--num_processes", "1"},
             finetune_argv(dir_.file("model"), dir_.file("train.txt"), dir_.file("single")));
  ASSERT_EQ(single.exit_code, 0) << single.out << single.err;
  const double diff = max_abs_diff(folder_logits(dir_.file("single/final"), ids), zero3);
  std::cout << "ZeRO-3 on 2 processes vs 1 process, logits of final/: max abs diff " << diff
            << "\n";
  EXPECT_LE(diff, 1e-4);
}

// A GPT-2 folder (dropout 0) with sequence parallelism from the launch
// flags alone: the 2 processes of one group split every 64-token block
// (Ulysses attention, positions offset) and read one batch, so training
// follows the one-process run with the same batch; final/ is a GPT-2
// folder transformers loads with our logits.
TEST_F(Finetune, Gpt2SequenceParallelOnTwoProcessesTrainsAsOneProcess) {
  REQUIRE_REFERENCE_PYTHON();
  REQUIRE_BROWN();
  ASSERT_NO_FATAL_FAILURE(make_reference("gpt2"));
  // The same losses logged (the group's token mean is the batch's).
  const auto split =
      expect_trains_as_one_process("sp 2", {"--parallelism_config_sp_size", "2"}, {}, 1e-3);
  EXPECT_NE(split.out.find("model_type gpt2: "), std::string::npos) << split.out;
}

// --parallelism_config_tp_size 2: the Llama's layers split over both
// processes by its plan, which read the same batches: the losses of one
// process, and final/ saved whole (transformers loads it).
TEST_F(Finetune, LlamaTensorParallelOnTwoProcessesTrainsAsOneProcess) {
  REQUIRE_REFERENCE_PYTHON();
  REQUIRE_BROWN();
  ASSERT_NO_FATAL_FAILURE(make_reference());
  // The last step's save_state checkpoint is saved whole too.
  expect_trains_as_one_process("tp 2", {"--parallelism_config_tp_size", "2"}, {}, 1e-4);
  EXPECT_TRUE(fs::exists(dir_.file("split/checkpoint-20/model.safetensors")));
}

// bf16 under ZeRO-3 with DeepSpeed's 16-bit save: final/ holds bfloat16
// weights, and its config.json says so (transformers reads torch_dtype to
// know what it loads); our from_pretrained loads them.
TEST_F(Finetune, ZeRO3SixteenBitSaveWritesTheWeightsDtypeInTheConfig) {
  REQUIRE_REFERENCE_PYTHON();
  REQUIRE_BROWN();
  ASSERT_NO_FATAL_FAILURE(make_reference());
  std::ofstream(dir_.file("zero3_16bit.yaml")) << R"(compute_environment: LOCAL_MACHINE
deepspeed_config:
  gradient_accumulation_steps: 1
  zero3_init_flag: false
  zero3_save_16bit_model: true
  zero_stage: 3
distributed_type: DEEPSPEED
machine_rank: 0
mixed_precision: bf16
num_machines: 1
num_processes: 2
use_cpu: true
)";
  auto argv = finetune_argv(dir_.file("model"), dir_.file("train.txt"), dir_.file("bf16"));
  argv.insert(argv.end(), {"--per_device_train_batch_size", "2", "--max_steps", "5", "--bf16"});
  const auto run = launch({"--config_file", dir_.file("zero3_16bit.yaml")}, argv);
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const std::string final_dir = dir_.file("bf16/final");
  const auto weights = accelerate::load_safetensors(final_dir + "/model.safetensors");
  ASSERT_FALSE(weights.empty());
  for (const auto& [name, tensor] : weights) {
    EXPECT_EQ(tensor.scalar_type(), at::kBFloat16) << name;
  }
  EXPECT_EQ(read_json(final_dir + "/config.json").at("torch_dtype"), "bfloat16");
  EXPECT_EQ(am::saved_weights_dtype(final_dir), "bfloat16");
  // Loaded into fp32 parameters: exactly the saved bfloat16 values.
  auto model = am::LlamaForCausalLMImpl::from_pretrained(final_dir);
  size_t compared = 0;
  const auto parameters = model->named_parameters();
  for (const auto& [name, tensor] : weights) {
    if (!parameters.contains(name)) continue;
    EXPECT_TRUE(at::equal(parameters[name], tensor.to(at::kFloat))) << name;
    ++compared;
  }
  EXPECT_EQ(compared, parameters.size());
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// FSDP2 FULL_SHARD with cpu_ram_efficient_loading on 2 processes: the loss
// falls, checkpoints are written, and a run resumed from the step-10
// checkpoint logs the same last loss and saves a final/ byte for byte the
// uninterrupted run's.
TEST_F(Finetune, FsdpTrainsAndResumesExactly) {
  REQUIRE_REFERENCE_PYTHON();
  REQUIRE_BROWN();
  ASSERT_NO_FATAL_FAILURE(make_reference());
  std::ofstream(dir_.file("fsdp.yaml")) << R"(compute_environment: LOCAL_MACHINE
distributed_type: FSDP
fsdp_config:
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_cpu_ram_efficient_loading: true
  fsdp_offload_params: false
  fsdp_reshard_after_forward: true
  fsdp_state_dict_type: SHARDED_STATE_DICT
  fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer
  fsdp_version: 2
machine_rank: 0
mixed_precision: 'no'
num_machines: 1
num_processes: 2
use_cpu: true
)";
  const auto fsdp_run = [&](const std::string& output_dir, std::vector<std::string> extra) {
    auto argv = finetune_argv(dir_.file("model"), dir_.file("train.txt"), output_dir);
    argv.insert(argv.end(), {"--per_device_train_batch_size", "4", "--save_steps", "10"});
    argv.insert(argv.end(), extra.begin(), extra.end());
    return launch({"--config_file", dir_.file("fsdp.yaml")}, argv);
  };
  const auto run = fsdp_run(dir_.file("fsdp"), {});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const auto losses = logged(dir_.file("fsdp"), "loss");
  ASSERT_EQ(losses.size(), 4u) << run.out;
  EXPECT_LT(losses.back(), 0.95 * losses.front());
  ASSERT_TRUE(fs::exists(dir_.file("fsdp/checkpoint-10")));

  const auto resumed =
      fsdp_run(dir_.file("resumed"), {"--resume_from_checkpoint", dir_.file("fsdp/checkpoint-10")});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out << resumed.err;
  const auto resumed_losses = logged(dir_.file("resumed"), "loss");
  ASSERT_EQ(resumed_losses.size(), 2u) << resumed.out;  // steps 15 and 20 only
  EXPECT_EQ(resumed_losses.back(), losses.back());
  const std::string weights = file_bytes(dir_.file("fsdp/final/model.safetensors"));
  EXPECT_FALSE(weights.empty());
  EXPECT_TRUE(weights == file_bytes(dir_.file("resumed/final/model.safetensors")));
}

// ---- Bad input: one line on stderr, a non-zero exit, nothing trained ----

RunResult run_finetune(const std::vector<std::string>& flags) {
  std::vector<std::string> argv{FINETUNE_PATH};
  argv.insert(argv.end(), flags.begin(), flags.end());
  return accelerate::testing::run_program(argv, {}, std::chrono::seconds(60));
}

void expect_one_line_error(const RunResult& run, const std::vector<std::string>& parts) {
  EXPECT_NE(run.exit_code, 0);
  const auto lines = accelerate::testing::split_lines(run.err);
  ASSERT_EQ(lines.size(), 1u) << run.err;
  EXPECT_EQ(lines[0].rfind("finetune: error: ", 0), 0u) << lines[0];
  for (const auto& part : parts) EXPECT_NE(lines[0].find(part), std::string::npos) << lines[0];
}

TEST(FinetuneInput, MissingModelFolderIsOneLineError) {
  TempDir dir("accelerate-finetune-input");
  std::ofstream(dir.file("train.txt")) << "Some text.\n";
  const std::string missing = dir.file("no-such-model");
  const auto run = run_finetune({"--model", missing, "--train_file", dir.file("train.txt"),
                                 "--output_dir", dir.file("out"), "--max_steps", "2"});
  expect_one_line_error(run, {"--model", missing, "is not a folder"});
  EXPECT_FALSE(fs::exists(dir.file("out")));
}

TEST(FinetuneInput, MissingTrainFileIsOneLineError) {
  TempDir dir("accelerate-finetune-input");
  fs::create_directories(dir.file("model"));
  const auto run = run_finetune({"--model", dir.file("model"), "--train_file",
                                 dir.file("absent.txt"), "--output_dir", dir.file("out")});
  expect_one_line_error(run, {"--train_file", dir.file("absent.txt")});
}

TEST(FinetuneInput, UnsupportedModelTypeNamesTheSupportedOnes) {
  TempDir dir("accelerate-finetune-input");
  fs::create_directories(dir.file("model"));
  std::ofstream(dir.file("model/config.json")) << R"({"model_type": "t5", "d_model": 64})";
  std::ofstream(dir.file("model/tokenizer.json")) << "{}";
  std::ofstream(dir.file("train.txt")) << "Some text.\n";
  const auto run = run_finetune({"--model", dir.file("model"), "--train_file",
                                 dir.file("train.txt"), "--output_dir", dir.file("out")});
  expect_one_line_error(
      run, {"model_type \"t5\"", "not supported", "supported: llama, mistral, qwen2, gpt2"});
}

TEST(FinetuneInput, FolderWithoutTokenizerIsOneLineError) {
  TempDir dir("accelerate-finetune-input");
  fs::create_directories(dir.file("model"));
  std::ofstream(dir.file("model/config.json")) << R"({"model_type": "llama"})";
  std::ofstream(dir.file("train.txt")) << "Some text.\n";
  const auto run = run_finetune({"--model", dir.file("model"), "--train_file",
                                 dir.file("train.txt"), "--output_dir", dir.file("out")});
  expect_one_line_error(run, {"has no tokenizer.json"});
}

}  // namespace
