// The GPT example's command line: `--name value` (or `--name=value`) pairs,
// bare `--bf16`-style switches, and an optional first word naming the
// command. Every flag must be used by the command: an unknown or misspelt
// one is an error, not silently ignored.
#pragma once

#include <accelerate/errors.h>
#include <accelerate/training_arguments.h>

#include <map>
#include <set>
#include <stdexcept>
#include <string>

namespace gpt_flags {

class Flags {
 public:
  Flags(int argc, char** argv) {
    int i = 1;
    if (argc > 1 && std::string(argv[1]).rfind("--", 0) != 0) command_ = argv[i++];
    for (; i < argc; ++i) {
      std::string word = argv[i];
      if (word.rfind("--", 0) != 0)
        throw accelerate::ConfigError("unexpected argument '" + word + "'");
      word = word.substr(2);
      const auto equals = word.find('=');
      if (equals != std::string::npos) {
        values_[word.substr(0, equals)] = word.substr(equals + 1);
      } else if (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0) {
        values_[word] = argv[++i];
      } else {
        values_[word] = "true";  // a switch
      }
    }
  }

  const std::string& command() const { return command_; }

  std::string text(const std::string& name, const std::string& fallback) {
    used_.insert(name);
    auto it = values_.find(name);
    return it == values_.end() ? fallback : it->second;
  }
  int64_t integer(const std::string& name, int64_t fallback) {
    const std::string value = text(name, std::to_string(fallback));
    std::size_t end = 0;
    int64_t parsed = 0;
    try {
      parsed = std::stoll(value, &end);
    } catch (const std::exception&) {
      end = 0;
    }
    if (end != value.size() || value.empty()) bad(name, value, "an integer");
    return parsed;
  }
  double number(const std::string& name, double fallback) {
    const std::string value = text(name, std::to_string(fallback));
    std::size_t end = 0;
    double parsed = 0;
    try {
      parsed = std::stod(value, &end);
    } catch (const std::exception&) {
      end = 0;
    }
    if (end != value.size() || value.empty()) bad(name, value, "a number");
    return parsed;
  }
  bool flag(const std::string& name) {
    const std::string value = text(name, "false");
    if (value != "true" && value != "false") bad(name, value, "true or false");
    return value == "true";
  }
  // Throws for a flag no command read.
  void check_all_used() const {
    for (const auto& [name, value] : values_) {
      if (!used_.count(name)) throw accelerate::ConfigError("unknown flag --" + name);
    }
  }

 private:
  [[noreturn]] static void bad(const std::string& name, const std::string& value,
                               const std::string& expected) {
    throw accelerate::ConfigError("--" + name + " expects " + expected + ", got '" + value + "'");
  }

  std::string command_;
  std::map<std::string, std::string> values_;
  std::set<std::string> used_;
};

// TrainingArguments from flags of the same names; the defaults suit the
// tiny preset on a CPU (docs/gpt.md), not Hugging Face's.
inline accelerate::TrainingArguments training_arguments(Flags& flags) {
  const auto interval = [&](const std::string& name, const std::string& fallback) {
    const std::string value = flags.text(name, fallback);
    auto strategy = accelerate::parse_interval_strategy(value);
    if (!strategy) {
      throw accelerate::ConfigError("--" + name + " expects no, steps or epoch, got '" + value +
                                    "'");
    }
    return *strategy;
  };
  const std::string schedule = flags.text("lr_scheduler_type", "cosine");
  const auto schedule_type = accelerate::parse_scheduler_type(schedule);
  if (!schedule_type) {
    throw accelerate::ConfigError(
        "--lr_scheduler_type expects linear, cosine, constant or constant_with_warmup, got '" +
        schedule + "'");
  }
  auto args = accelerate::TrainingArguments()
                  .output_dir(flags.text("output_dir", "runs/gpt"))
                  .per_device_train_batch_size(flags.integer("per_device_train_batch_size", 16))
                  .per_device_eval_batch_size(flags.integer("per_device_eval_batch_size", 16))
                  .gradient_accumulation_steps(
                      static_cast<int>(flags.integer("gradient_accumulation_steps", 1)))
                  .learning_rate(flags.number("learning_rate", 1e-3))
                  .weight_decay(flags.number("weight_decay", 0.1))
                  .max_grad_norm(flags.number("max_grad_norm", 1.0))
                  .num_train_epochs(flags.number("num_train_epochs", 1.0))
                  .max_steps(flags.integer("max_steps", 200))
                  .lr_scheduler_type(*schedule_type)
                  .warmup_steps(flags.integer("warmup_steps", 20))
                  .warmup_ratio(flags.number("warmup_ratio", 0.0))
                  .logging_steps(flags.integer("logging_steps", 20))
                  .eval_strategy(interval("eval_strategy", "steps"))
                  .eval_steps(flags.integer("eval_steps", 100))
                  .save_strategy(interval("save_strategy", "steps"))
                  .save_steps(flags.integer("save_steps", 100))
                  .seed(static_cast<uint64_t>(flags.integer("seed", 42)))
                  .bf16(flags.flag("bf16"))
                  .fp16(flags.flag("fp16"))
                  .gradient_checkpointing(flags.flag("gradient_checkpointing"))
                  .report_to({flags.text("report_to", "none")})
                  .dataloader_num_workers(flags.integer("dataloader_num_workers", 0));
  const int64_t limit = flags.integer("save_total_limit", 2);
  if (limit > 0) args.save_total_limit(static_cast<int>(limit));
  const std::string resume = flags.text("resume_from_checkpoint", "");
  if (!resume.empty()) args.resume_from_checkpoint(resume);
  args.validate();
  return args;
}

}  // namespace gpt_flags
