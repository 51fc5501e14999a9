// The C++ counterpart of Hugging Face Accelerate's complete_nlp_example.py:
// fine-tunes a pretrained BERT-family encoder (all-MiniLM-L6-v2, from
// scripts/fetch-minilm.sh) with a new classification head on labelled
// sentences (Brown Corpus fiction vs. non-fiction, from
// scripts/fetch-brown-genre.sh), and after each epoch prints, on the main
// process only,
//
//   epoch 0: {'accuracy': 0.871, 'f1': 0.8693...}
//
// computed over the whole validation set gathered from every process
// (gather_for_metrics: no sample counted twice when the last batch is
// uneven). The same program runs on one process or many:
//
//   accelerate launch --cpu --num_processes 2 build/examples/nlp
//
// `nlp --help` lists the flags; docs/nlp.md describes the data, the
// behaviour and the figures against the Python example.
#include <torch/torch.h>

#include <accelerate/accelerate.h>
#include <accelerate/models/bert.h>
#include <accelerate/schedule/lr_schedule.h>
#include <accelerate/text/tokenizer.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <numeric>
#include <string>

#include "../common/example_flags.h"
#include "text_data.h"

namespace {

namespace am = accelerate::models;

struct Args {
  std::string model = "data/all-MiniLM-L6-v2";
  std::string train_file = "data/brown-genre/train.tsv";
  std::string validation_file = "data/brown-genre/validation.tsv";
  std::string mixed_precision;  // "": the launcher's setting
  bool cpu = false;
  std::string checkpointing_steps;
  std::string resume_from_checkpoint;
  bool with_tracking = false;
  std::string output_dir = ".";
  std::string project_dir = "logs";
  int num_epochs = 3;
  // The Python example's config: lr 2e-5, seed 42, batch size 16; its
  // evaluation batch (32) and warm-up (100) are constants there.
  double learning_rate = 2e-5;
  int64_t seed = 42;
  int64_t batch_size = 16;
  int64_t eval_batch_size = 32;
  int gradient_accumulation_steps = 1;
  int64_t num_warmup_steps = 100;
  int64_t max_length = 128;
  int64_t max_train_samples = 0;
  int64_t max_eval_samples = 0;
};

constexpr const char* kAbout =
    "Fine-tunes a pretrained BERT-family encoder with a new classification head on labelled\n"
    "sentences and prints the validation accuracy and F1 after every epoch (the C++\n"
    "counterpart of Accelerate's complete_nlp_example.py; docs/nlp.md).";

void add_flags(examples::Flags& flags, Args& args) {
  flags
      .add("model", &args.model,
           "Hugging Face folder: config.json, model.safetensors, tokenizer.json", "DIR")
      .add("train_file", &args.train_file, "TSV with columns label, sentence[, sentence2]", "FILE")
      .add("validation_file", &args.validation_file, "TSV evaluated after every epoch", "FILE")
      .add_choice("mixed_precision", &args.mixed_precision, {"no", "fp16", "bf16"},
                  "mixed precision (default: the launcher's setting)")
      .add("cpu", &args.cpu, "train on the CPU even when a GPU is present")
      .add("checkpointing_steps", &args.checkpointing_steps,
           "save_state every N batches (OUTPUT_DIR/step_N), or after each epoch "
           "(OUTPUT_DIR/epoch_N) (default: never)",
           "N|epoch")
      .add("resume_from_checkpoint", &args.resume_from_checkpoint,
           "continue from a folder save_state wrote (step_N or epoch_N)", "PATH")
      .add("with_tracking", &args.with_tracking,
           "log accuracy, f1 and train_loss to every tracker (TensorBoard, JSONL, CSV)")
      .add("output_dir", &args.output_dir, "where checkpoints go", "DIR")
      .add("project_dir", &args.project_dir, "where the trackers write", "DIR")
      .add("num_epochs", &args.num_epochs, "epochs to train")
      .add("learning_rate", &args.learning_rate, "AdamW's peak learning rate")
      .add("seed", &args.seed, "seed of the head's initialisation, dropout and the shuffle")
      .add("batch_size", &args.batch_size, "training batch per process")
      .add("eval_batch_size", &args.eval_batch_size, "evaluation batch per process")
      .add("gradient_accumulation_steps", &args.gradient_accumulation_steps,
           "batches per optimizer step")
      .add("num_warmup_steps", &args.num_warmup_steps,
           "linear warm-up, in scheduler steps of the Python example (it steps its scheduler "
           "once per process per optimizer step)")
      .add("max_length", &args.max_length, "truncate longer tokenized examples")
      .add("max_train_samples", &args.max_train_samples,
           "use the first N training examples (0: all)")
      .add("max_eval_samples", &args.max_eval_samples,
           "use the first N validation examples (0: all)");
}

// --checkpointing_steps: "", "epoch" or a number >= 1 (0 below: not by steps).
bool checkpoint_every_steps(const std::string& value, int64_t& steps) {
  steps = 0;
  if (value.empty() || value == "epoch") return true;
  char* end = nullptr;
  steps = std::strtoll(value.c_str(), &end, 10);
  return *end == '\0' && steps >= 1;
}

}  // namespace

int main(int argc, char** argv) try {
  Args args;
  examples::Flags flags(kAbout);
  add_flags(flags, args);
  flags.parse(argc, argv);
  int64_t every_steps = 0;
  if (!checkpoint_every_steps(args.checkpointing_steps, every_steps)) {
    flags.fail("--checkpointing_steps expects a number >= 1 or 'epoch', got '" +
               args.checkpointing_steps + "'");
  }
  const bool every_epoch = args.checkpointing_steps == "epoch";
  std::optional<accelerate::MixedPrecision> precision;
  if (!args.mixed_precision.empty()) {
    precision = accelerate::parse_mixed_precision(args.mixed_precision);
  }
  if (args.num_epochs < 1 || args.batch_size < 1 || args.eval_batch_size < 1 ||
      args.gradient_accumulation_steps < 1 || args.num_warmup_steps < 0 || args.max_length < 2 ||
      args.max_train_samples < 0 || args.max_eval_samples < 0) {
    flags.fail(
        "--num_epochs, --batch_size, --eval_batch_size and --gradient_accumulation_steps must be "
        ">= 1, --max_length >= 2, the others >= 0");
  }
  flags.require_data("--model", args.model, {"config.json", "tokenizer.json"},
                     "run scripts/fetch-minilm.sh in the project's folder, or give --model a "
                     "Hugging Face folder");
  const char* const genre_data =
      "run scripts/fetch-brown-genre.sh in the project's folder for the default data";
  flags.require_data("--train_file", args.train_file, {}, genre_data);
  flags.require_data("--validation_file", args.validation_file, {}, genre_data);

  accelerate::AcceleratorOptions options;
  options.gradient_accumulation_steps(args.gradient_accumulation_steps);
  if (args.cpu) options.cpu(true);
  if (precision) options.mixed_precision(*precision);
  if (args.with_tracking) options.log_with({"all"}).project_dir(args.project_dir);
  accelerate::Accelerator accelerator(options);

  const auto tokenizer = nlp::load_tokenizer(args.model);
  const auto train_rows = nlp::tokenize(
      tokenizer,
      nlp::read_labelled_tsv(args.train_file, static_cast<size_t>(args.max_train_samples)),
      args.max_length);
  const auto eval_rows = nlp::tokenize(
      tokenizer,
      nlp::read_labelled_tsv(args.validation_file, static_cast<size_t>(args.max_eval_samples)),
      args.max_length);
  const int64_t eval_examples = static_cast<int64_t>(eval_rows.size());

  accelerate::set_seed(static_cast<uint64_t>(args.seed));
  auto model =
      am::BertForSequenceClassification(am::BertForSequenceClassificationImpl::from_pretrained(
          args.model, am::BertLoadOptions().num_labels(2)));
  {
    // A new head starts as transformers' _init_weights makes it (normal,
    // std initializer_range = 0.02 for MiniLM and BERT; zero bias), not
    // LibTorch's uniform default, so both programs start alike.
    torch::NoGradGuard no_grad;
    model->classifier->weight.normal_(0.0, 0.02);
    model->classifier->bias.zero_();
  }
  // Padding to a multiple of 8 under mixed precision (transformers'), and
  // of tp_size under Megatron's sequence parallelism, which splits every
  // sequence's tokens over the tp group.
  const int64_t mixed_multiple =
      accelerator.mixed_precision() == accelerate::MixedPrecision::kNo ? 1 : 8;
  const int64_t token_split =
      accelerator.tensor_parallel().sequence_parallel() ? accelerator.tensor_parallel().size() : 1;
  const nlp::PadCollate collate{model->config().pad_token_id,
                                std::lcm(mixed_multiple, token_split)};
  accelerate::DataLoader train(nlp::EncodedDataset(train_rows),
                               accelerate::DataLoaderOptions(static_cast<size_t>(args.batch_size))
                                   .shuffle(true)
                                   .seed(static_cast<uint64_t>(args.seed)),
                               collate);
  accelerate::DataLoader eval(
      nlp::EncodedDataset(eval_rows),
      accelerate::DataLoaderOptions(static_cast<size_t>(args.eval_batch_size)), collate);
  accelerate::Optimizer<torch::optim::AdamW> optimizer(
      model->parameters(), torch::optim::AdamWOptions(args.learning_rate).weight_decay(0.01));
  accelerator.prepare(model, optimizer, train, eval);

  // Our prepared scheduler advances once per optimizer step on any number
  // of processes; Python's advances num_processes times, so its warm-up of
  // 100 lasts 100 / P optimizer steps. Both end at the last optimizer step.
  const int64_t processes = accelerator.num_processes();
  const int64_t steps_per_epoch =
      (static_cast<int64_t>(train.size()) + args.gradient_accumulation_steps - 1) /
      args.gradient_accumulation_steps;
  accelerate::Scheduler<accelerate::WarmupSchedule> scheduler(
      optimizer, accelerate::SchedulerType::kLinear,
      (args.num_warmup_steps + processes / 2) / processes, steps_per_epoch * args.num_epochs);
  accelerator.prepare(scheduler);

  if (args.with_tracking) {
    accelerator.init_trackers("nlp_example", {{"lr", args.learning_rate},
                                              {"num_epochs", static_cast<int64_t>(args.num_epochs)},
                                              {"seed", args.seed},
                                              {"batch_size", args.batch_size}});
  }
  // The model, optimizer, scheduler, random states and both loaders'
  // positions come back: a step_N checkpoint continues its epoch at the
  // next batch, an epoch_N one starts epoch N + 1.
  if (!args.resume_from_checkpoint.empty()) {
    accelerator.print("resuming from ", accelerator.load_state(args.resume_from_checkpoint));
  }
  const accelerate::DataLoaderPosition resumed = train.position();
  int64_t overall_step = resumed.epoch * static_cast<int64_t>(train.size()) +
                         static_cast<int64_t>(resumed.batches_yielded);

  for (int64_t epoch = resumed.epoch; epoch < args.num_epochs; ++epoch) {
    model->train();
    double total_loss = 0;
    int64_t samples = 0;
    const auto start = std::chrono::steady_clock::now();
    for (auto& batch : train) {
      auto accumulating = accelerator.accumulate();
      auto loss =
          model->loss(batch.input_ids, batch.labels, batch.attention_mask, batch.token_type_ids);
      if (args.with_tracking) total_loss += loss.detach().item<double>();
      accelerator.backward(loss);
      optimizer.step();
      scheduler.step();
      optimizer.zero_grad();
      samples += batch.labels.size(0);
      ++overall_step;
      if (every_steps > 0 && overall_step % every_steps == 0) {
        accelerator.save_state(args.output_dir + "/step_" + std::to_string(overall_step));
      }
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    model->eval();
    torch::NoGradGuard no_grad;
    nlp::BinaryCounts counts;
    for (auto& batch : eval) {
      const auto predictions =
          model->forward(batch.input_ids, batch.attention_mask, batch.token_type_ids).argmax(-1);
      counts.add(accelerator.gather_for_metrics(predictions),
                 accelerator.gather_for_metrics(batch.labels));
    }
    if (counts.total() != eval_examples) {
      throw std::logic_error("evaluated " + std::to_string(counts.total()) + " examples, not " +
                             std::to_string(eval_examples));
    }
    accelerator.print(nlp::metrics_line(epoch, counts.accuracy(), counts.f1()));
    // The processes of a tp group train on the same examples.
    const int64_t trained = samples * processes / accelerator.tensor_parallel().size();
    accelerator.print("epoch ", epoch, ": ", counts.total(), " validation examples; train ",
                      trained, " examples in ", seconds, " s, ", trained / seconds, " samples/s");
    if (args.with_tracking) {
      accelerator.log({{"accuracy", counts.accuracy()},
                       {"f1", counts.f1()},
                       {"train_loss", total_loss / static_cast<double>(train.size())},
                       {"epoch", epoch}},
                      epoch);
    }
    if (every_epoch) accelerator.save_state(args.output_dir + "/epoch_" + std::to_string(epoch));
  }
  accelerator.end_training();
  return 0;
} catch (const std::exception& error) {
  std::cerr << "nlp: error: " << error.what() << std::endl;
  return 1;
}
