// Fine-tunes a causal language model from a local Hugging Face folder with
// accelerate::Trainer and writes the result as a Hugging Face folder again,
// on one process or many, under whatever `accelerate launch` configures
// (data parallelism, ZeRO stages, FSDP):
//
//   accelerate launch finetune --model Llama-3.2-1B --train_file corpus.txt \
//       --output_dir runs/ft --max_steps 100 [--block_size 512] [TrainingArguments flags...]
//
// The folder's config.json picks the model family by "model_type"
// (causal_lm_families.h); its tokenizer.json tokenizes the text
// (text_blocks.h). OUTPUT_DIR/final gets config.json, the weights
// (model.safetensors, or shards and their index above --max_shard_size) and
// the folder's tokenizer files, which transformers' from_pretrained loads.
// docs/finetune.md.
#include <accelerate/accelerate.h>
#include <accelerate/trainer/trainer.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "../common/example_flags.h"
#include "../common/training_flags.h"
#include "causal_lm_families.h"
#include "text_blocks.h"

namespace {

namespace fs = std::filesystem;

struct FinetuneFlags {
  std::string model;
  std::string train_file;
  std::string validation_file;
  int64_t block_size = 0;  // 0: min(1024, max_position_embeddings)
  std::string max_shard_size = "5GB";
  examples::TrainingFlags training;
};

// The tokenizer files of a model folder copied beside the saved weights
// when present (tokenizer.json always is: the program read it).
const char* const kTokenizerFiles[] = {"tokenizer.json", "tokenizer_config.json",
                                       "special_tokens_map.json", "generation_config.json"};

// config.json's "model_type". Throws accelerate::Error naming the file.
std::string read_model_type(const std::string& folder) {
  const std::string path = folder + "/config.json";
  std::ifstream in(path);
  if (!in) throw examples::InputError("--model folder '" + folder + "' has no config.json");
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw examples::InputError("'" + path + "' is not JSON: " + e.what());
  }
  const auto found = config.find("model_type");
  if (!config.is_object() || found == config.end() || !found->is_string()) {
    throw examples::InputError("'" + path + "' has no \"model_type\"");
  }
  return found->get<std::string>();
}

// Training tokens/s of this run: the optimizer steps it took (a resumed
// run counts only its own) over the time inside them, so evaluations,
// logging and checkpoints are not counted.
class TrainingSpeed : public accelerate::TrainerCallback {
 public:
  void on_step_begin(const accelerate::TrainingArguments&, const accelerate::TrainerState&,
                     accelerate::TrainerControl&) override {
    begin_ = std::chrono::steady_clock::now();
  }
  void on_step_end(const accelerate::TrainerState&) override {
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - begin_).count();
    ++steps_;
  }
  double tokens_per_second(int64_t tokens_per_step) const {
    return seconds_ > 0 ? static_cast<double>(steps_ * tokens_per_step) / seconds_ : 0.0;
  }

 private:
  std::chrono::steady_clock::time_point begin_;
  double seconds_ = 0;
  int64_t steps_ = 0;
};

template <class Family>
int run_family(const FinetuneFlags& f) {
  using Model = typename Family::Model;
  const auto config = Family::read_config(f.model);
  const int64_t max_positions = Family::max_positions(config);
  const int64_t block_size =
      f.block_size > 0 ? f.block_size : std::min<int64_t>(1024, max_positions);
  if (block_size > max_positions) {
    throw examples::InputError("--block_size " + std::to_string(block_size) +
                               " exceeds the model's " + Family::kMaxPositionsKey + " " +
                               std::to_string(max_positions));
  }
  const auto tokenizer = accelerate::Tokenizer::from_file(f.model + "/tokenizer.json");
  if (tokenizer.vocab_size() > Family::vocab_size(config)) {
    throw examples::InputError(
        f.model + "/tokenizer.json has " + std::to_string(tokenizer.vocab_size()) +
        " tokens but the model's vocab_size is " + std::to_string(Family::vocab_size(config)));
  }
  const auto blocks = [&](const std::string& path) {
    return finetune::TextBlocks(finetune::tokenize_lines(path, tokenizer), block_size, path);
  };
  const auto tokenizing = std::chrono::steady_clock::now();
  finetune::TextBlocks train_data = blocks(f.train_file);
  const double tokenize_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - tokenizing).count();
  std::optional<finetune::TextBlocks> validation_data;
  if (!f.validation_file.empty()) validation_data = blocks(f.validation_file);

  const auto args = examples::training_arguments(f.training);
  if (args.eval_strategy() != accelerate::IntervalStrategy::kNo && !validation_data) {
    throw examples::InputError("--eval_strategy " + f.training.eval_strategy +
                               " needs --validation_file");
  }
  // model_init: built inside the Trainer's zero3_init(), so under ZeRO-3
  // with zero3_init_flag (FSDP: cpu_ram_efficient_loading) only the main
  // process holds the loaded weights; prepare() hands out the shards.
  accelerate::Trainer<Model, finetune::TextBlocks> trainer(
      [&] { return Family::load(f.model); }, args, train_data,
      [](Model& model, const accelerate::Example& batch) {
        return Family::loss(model, batch.data);
      },
      validation_data);
  auto& accelerator = trainer.accelerator();
  auto& model = trainer.model();
  // --parallelism_config_sp_size N: each group of N processes splits every
  // block of tokens between them (Ulysses; a group of one splits nothing)
  // and reads one batch. --parallelism_config_tp_size N: prepare() split
  // the model's layers over groups of N processes by its family's plan
  // (docs/tensor-parallel.md), each group reading one batch too.
  const int sp_size = accelerator.sequence_parallel().size();
  if (block_size % sp_size != 0) {
    throw examples::InputError("--block_size " + std::to_string(block_size) +
                               " is not divisible by sp_size " + std::to_string(sp_size));
  }
  model->use_sequence_parallel(accelerator.sequence_parallel());
  Family::set_gradient_checkpointing(model, args.gradient_checkpointing());
  int64_t parameters = 0;
  for (const auto& p : model->parameters()) parameters += p.numel();
  accelerator.print("model_type ", Family::model_type_of(config), ": ", parameters, " parameters; ",
                    f.train_file, ": ", train_data.tokens(), " tokens in ", train_data.size(),
                    " blocks of ", block_size, " (tokenized in ", tokenize_seconds, " s); ",
                    accelerator.num_processes(), " process(es), ", trainer.state().max_steps,
                    " steps");
  auto speed = std::make_shared<TrainingSpeed>();
  trainer.add_callback(speed);
  trainer.train();
  // The accumulation in force (a DeepSpeed file's, which the Trainer checks).
  const int64_t tokens_per_step =
      args.per_device_train_batch_size() * accelerator.gradient_accumulation_steps() *
      accelerator.num_processes() / sp_size / accelerator.tensor_parallel().size() * block_size;
  accelerator.print("train tokens/s ",
                    static_cast<int64_t>(speed->tokens_per_second(tokens_per_step)));

  // Every process: under ZeRO-3 each unit's weights are gathered in turn and
  // written by the main process (no process holds the whole model).
  const std::string final_dir = args.output_dir() + "/final";
  accelerator.save_model(model, final_dir,
                         accelerate::SaveModelOptions().max_shard_size(f.max_shard_size));
  if (accelerator.is_main_process()) {
    // torch_dtype says what was saved: bfloat16 under DeepSpeed's 16-bit save.
    Family::write_config(config, final_dir, accelerate::models::saved_weights_dtype(final_dir));
    for (const char* name : kTokenizerFiles) {
      const fs::path source = fs::path(f.model) / name;
      if (fs::exists(source)) {
        fs::copy_file(source, fs::path(final_dir) / name, fs::copy_options::overwrite_existing);
      }
    }
    accelerator.print("saved ", final_dir);
  }
  accelerator.wait_for_everyone();
  return 0;
}

// model_type -> the run for its family. A new family: one line here.
using FamilyRun = int (*)(const FinetuneFlags&);
const std::vector<std::pair<std::string, FamilyRun>>& families() {
  static const std::vector<std::pair<std::string, FamilyRun>> table = {
      {"llama", &run_family<finetune::LlamaFamily>},
      {"mistral", &run_family<finetune::LlamaFamily>},
      {"qwen2", &run_family<finetune::LlamaFamily>},
      {"gpt2", &run_family<finetune::Gpt2Family>},
  };
  return table;
}

// "llama, mistral, qwen2, gpt2": the families the table runs.
std::string supported_model_types() {
  std::string names;
  for (const auto& [name, family_run] : families()) names += (names.empty() ? "" : ", ") + name;
  return names;
}

int run(const FinetuneFlags& f) {
  if (!fs::is_directory(f.model)) {
    throw examples::InputError("--model '" + f.model + "' is not a folder");
  }
  if (!fs::is_regular_file(f.train_file)) {
    throw examples::InputError("--train_file '" + f.train_file + "' is not a file");
  }
  if (!f.validation_file.empty() && !fs::is_regular_file(f.validation_file)) {
    throw examples::InputError("--validation_file '" + f.validation_file + "' is not a file");
  }
  if (!fs::is_regular_file(fs::path(f.model) / "tokenizer.json")) {
    throw examples::InputError("--model folder '" + f.model + "' has no tokenizer.json");
  }
  const std::string model_type = read_model_type(f.model);
  for (const auto& [name, family_run] : families()) {
    if (name == model_type) return family_run(f);
  }
  throw examples::InputError(
      "model_type \"" + model_type + "\" of '" + f.model +
      "/config.json' is not supported (supported: " + supported_model_types() + ")");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string program = examples::program_name(argc > 0 ? argv[0] : nullptr);
  FinetuneFlags f;
  // Hugging Face's TrainingArguments defaults, but log every 10 steps.
  f.training.logging_steps = 10;
  examples::Flags flags(
      "Fine-tunes a causal language model from a Hugging Face folder (config.json, safetensors "
      "weights,\ntokenizer.json) on a text file with accelerate::Trainer, and writes the result "
      "to\nOUTPUT_DIR/final as a Hugging Face folder. Supported model_type: " +
      supported_model_types() + ". docs/finetune.md.");
  flags.add("model", &f.model, "the Hugging Face model folder to start from (required)", "DIR")
      .add("train_file", &f.train_file, "the training text, tokenized line by line (required)",
           "FILE")
      .add("validation_file", &f.validation_file, "text for evaluation (eval_strategy)", "FILE")
      .add("block_size", &f.block_size,
           "tokens per training block; 0: min(1024, max_position_embeddings)")
      .add("max_shard_size", &f.max_shard_size,
           "split the saved weights into shards of at most this size", "SIZE");
  examples::add_training_flags(flags, f.training);
  flags.parse(argc, argv);
  if (f.model.empty()) flags.fail("--model is required");
  if (f.train_file.empty()) flags.fail("--train_file is required");
  try {
    return run(f);
  } catch (const examples::InputError& error) {
    std::cerr << program << ": error: " << error.what() << std::endl;
    return 2;  // bad input, as a bad flag
  } catch (const std::exception& error) {
    std::cerr << program << ": error: " << error.what() << std::endl;
    return 1;
  }
}
