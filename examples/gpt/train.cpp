// Trains a GPT-2-style model on the Brown Corpus with accelerate::Trainer,
// or samples text from a trained one. The same program runs on one process
// or many: `accelerate launch --num_processes 2 gpt --max_steps 200`.
//
//   gpt [--preset tiny|small] [--max_steps N] [--output_dir DIR] [TrainingArguments flags...]
//   gpt generate --model_dir DIR/model [--prompt TEXT] [--max_new_tokens 50]
//               [--temperature 0.8] [--top_k 40] [--seed 1]
// (flags.h declares every flag; `gpt --help` and `gpt generate --help` list them).
//
// Prints the Trainer's logs, eval_loss and tokens/s on the main process, and
// saves the model in Hugging Face's GPT-2 layout to {output_dir}/model
// (GPT2LMHeadModel.from_pretrained loads it) with the tokenizer beside it.
// docs/gpt.md.
#include <accelerate/accelerate.h>
#include <accelerate/models/pretrained.h>
#include <accelerate/trainer/trainer.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "flags.h"
#include "generate.h"
#include "presets.h"
#include "token_data.h"

namespace {

using accelerate::TrainingArguments;

// tokens/s between two logs, on the main process.
class Throughput : public accelerate::TrainerCallback {
 public:
  Throughput(int64_t tokens_per_step, bool main) : tokens_per_step_(tokens_per_step), main_(main) {}
  void on_train_begin(const accelerate::TrainerState& state) override { mark(state); }
  void on_log(const accelerate::TrainerState& state, const accelerate::Metrics&) override {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - since_).count();
    const int64_t steps = state.global_step - step_;
    if (main_ && steps > 0) {
      std::cout << "step " << state.global_step << ": tokens/s "
                << static_cast<int64_t>(steps * tokens_per_step_ / seconds) << std::endl;
    }
    mark(state);
  }
  void on_evaluate(const accelerate::TrainerState& state, const accelerate::Metrics&) override {
    mark(state);  // evaluation time is not training throughput
  }

 private:
  void mark(const accelerate::TrainerState& state) {
    since_ = std::chrono::steady_clock::now();
    step_ = state.global_step;
  }
  int64_t tokens_per_step_;
  bool main_;
  std::chrono::steady_clock::time_point since_;
  int64_t step_ = 0;
};

// The training or validation windows, the latter optionally only the first
// max_eval_samples (quick evaluations; Hugging Face's scripts have the flag).
struct Windows {
  gpt::TokenChunks chunks;
  size_t limit = SIZE_MAX;
  size_t size() const { return std::min(chunks.size(), limit); }
  accelerate::Example get(size_t index) const { return chunks.get(index); }
};

accelerate::BpeTokenizer tokenizer_for(const std::string& data_dir, const std::string& path,
                                       int32_t vocab_size) {
  if (std::filesystem::exists(path)) return accelerate::BpeTokenizer::load(path);
  std::ifstream in(data_dir + "/train.txt");
  if (!in) throw accelerate::Error(data_dir + "/train.txt is missing: run scripts/fetch-brown.sh");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto tokenizer = accelerate::BpeTokenizer::train(text, vocab_size);
  tokenizer.save(path);  // every process writes the same bytes, each by rename
  return tokenizer;
}

int train(const std::string& program, const std::vector<std::string>& words) {
  gpt_flags::TrainFlags f;
  examples::Flags flags(
      "Trains a GPT-2-style model on the Brown Corpus with accelerate::Trainer, on one process or "
      "many\n(accelerate launch), and saves it in Hugging Face's GPT-2 layout to OUTPUT_DIR/model. "
      "docs/gpt.md.\nSampling from a trained model: " +
      program + " generate --help.");
  gpt_flags::add_flags(flags, f);
  flags.parse(program, words);
  const std::string& data_dir = f.data_dir;
  const std::string& preset = f.preset;
  const int32_t vocab_size = f.vocab_size;
  TrainingArguments args = gpt_flags::training_arguments(f);
  flags.require_data("--data_dir", f.data_dir, {"train.txt", "validation.txt"},
                     "run scripts/fetch-brown.sh in the project's folder, or give --data_dir the "
                     "folder that holds the Brown Corpus");
  accelerate::models::GPT2Config config = gpt::preset_config(preset, vocab_size, f.dropout);
  if (f.block_size > 0) config.n_positions = f.block_size;
  const int64_t max_eval_samples = f.max_eval_samples;

  std::filesystem::create_directories(args.output_dir());
  const auto tokenizer = tokenizer_for(data_dir, args.output_dir() + "/tokenizer.bpe", vocab_size);
  config.vocab_size = tokenizer.vocab_size();
  const std::string cache = data_dir + "/cache";
  const auto windows = [&](const std::string& split, int64_t limit) {
    return Windows{gpt::TokenChunks(gpt::TokenFile::open(gpt::tokenize_to_cache(
                                        data_dir + "/" + split, tokenizer, cache)),
                                    config.n_positions),
                   limit > 0 ? static_cast<size_t>(limit) : SIZE_MAX};
  };
  // The Trainer builds the model after set_seed(args.seed()); under ZeRO-3
  // with zero3_init_flag (FSDP: cpu_ram_efficient_loading) only the main
  // process holds its whole weights, the others receive their shards.
  const auto build = [&] {
    gpt::Gpt model(config);
    model->transformer->set_gradient_checkpointing(args.gradient_checkpointing());
    return model;
  };
  // The windows' targets are their next tokens already (transformers'
  // shift_labels): every position of a window is predicted.
  accelerate::Trainer<gpt::Gpt, Windows> trainer(
      build, args, windows("train.txt", 0),
      [](gpt::Gpt& m, const accelerate::Example& batch) {
        return m->loss_on_shifted_labels(batch.data, batch.target);
      },
      windows("validation.txt", max_eval_samples));
  auto& accelerator = trainer.accelerator();
  auto& model = trainer.model();
  // --parallelism_config_sp_size N: each group of N processes splits every
  // sequence between them (a group of one splits nothing).
  // --parallelism_config_tp_size N: prepare() split the layers over groups
  // of N processes by GPT-2's plan (docs/tensor-parallel.md); the count
  // below is then this process's part.
  model->use_sequence_parallel(accelerator.sequence_parallel());
  const int tp_size = accelerator.tensor_parallel().size();
  accelerator.print("GPT preset ", preset, ": ", gpt::parameter_count(model), " parameters",
                    tp_size > 1 ? " on this process" : "", ", vocab ", config.vocab_size,
                    ", context ", config.n_positions, ", ", accelerator.num_processes(),
                    " process(es), ", trainer.state().max_steps, " steps");
  // The accumulation in force (the Accelerator's, which a DeepSpeed file
  // may not contradict: the Trainer refuses a mismatch); a sequence- or
  // tensor-parallel group trains on one batch.
  const int64_t tokens_per_step =
      args.per_device_train_batch_size() * accelerator.gradient_accumulation_steps() *
      accelerator.num_processes() / accelerator.sequence_parallel().size() / tp_size *
      config.n_positions;
  trainer.add_callback(
      std::make_shared<Throughput>(tokens_per_step, accelerator.is_main_process()));
  trainer.train();
  if (args.eval_strategy() == accelerate::IntervalStrategy::kNo) trainer.evaluate();
  // Every process: under ZeRO-3 each block's weights are gathered in turn
  // and written by the main process.
  const std::string model_dir = args.output_dir() + "/model";
  accelerator.save_model(model, model_dir);
  if (accelerator.is_main_process()) {
    // torch_dtype says what was saved: bfloat16 under DeepSpeed's 16-bit save.
    accelerate::models::write_gpt2_config(config, model_dir, "GPT2LMHeadModel",
                                          accelerate::models::saved_weights_dtype(model_dir));
    tokenizer.save(model_dir + "/tokenizer.bpe");
    // Hugging Face's tokenizer.json too, with the same ids: the folder then
    // loads in transformers and fine-tunes with examples/finetune.
    tokenizer.save_tokenizer_json(model_dir + "/tokenizer.json");
  }
  accelerator.wait_for_everyone();
  return 0;
}

int generate(const std::string& program, const std::vector<std::string>& words) {
  gpt_flags::GenerateFlags f;
  examples::Flags flags("Samples text from a model the training saved, after a prompt.");
  gpt_flags::add_flags(flags, f);
  flags.parse(program, words);
  const std::string& model_dir = f.model_dir;
  auto tokenizer = accelerate::BpeTokenizer::load(model_dir + "/tokenizer.bpe");
  gpt::Gpt model(accelerate::models::GPT2LMHeadModelImpl::from_pretrained(model_dir));
  const auto ids = gpt::generate(model, tokenizer.encode(f.prompt), f.max_new_tokens, f.temperature,
                                 f.top_k, f.seed);
  std::cout << tokenizer.decode(ids) << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // `gpt generate ...` samples; anything else trains. Flag errors, a
  // --data_dir without the corpus and settings TrainingArguments refuses exit
  // with code 2 (bad input); other failures with 1, as in every example.
  const std::string program = examples::program_name(argv[0]);
  std::vector<std::string> words(argv + 1, argv + argc);
  try {
    if (!words.empty() && words.front() == "generate") {
      words.erase(words.begin());
      return generate(program + " generate", words);
    }
    return train(program, words);
  } catch (const accelerate::ConfigError& error) {  // TrainingArguments' checks: bad input
    std::cerr << program << ": error: " << error.what() << std::endl;
    return 2;
  } catch (const std::exception& error) {
    std::cerr << program << ": error: " << error.what() << std::endl;
    return 1;
  }
}
