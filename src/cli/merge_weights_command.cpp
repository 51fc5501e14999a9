#include "cli/merge_weights_command.h"

#include <filesystem>
#include <iostream>
#include <optional>

#include "accelerate/common/errors.h"
#include "checkpoint/safetensors_sharding.h"
#include "cli/merge_weights.h"
#include "common/environment_text.h"

namespace accelerate::cli {
namespace {

const char* const kMergeHelp =
    "usage: accelerate merge-weights CHECKPOINT_DIR OUTPUT_DIR [--max_shard_size SIZE]\n"
    "                                [--dtype bf16|fp16] [--model N] [--remove_checkpoint_dir]\n"
    "                                [--include_optimizer]\n"
    "\n"
    "Writes the model of a save_state checkpoint as Hugging Face's safetensors files:\n"
    "model.safetensors, or model-0000i-of-0000N.safetensors shards and\n"
    "model.safetensors.index.json, the files save_model writes for the same weights.\n"
    "The checkpoint may come from any ZeRO stage and any number of processes, on any\n"
    "machine: only its files are read, one tensor at a time. A checkpoint that is\n"
    "incomplete or torn (a file missing or cut short) is refused, naming the file.\n"
    "OUTPUT_DIR must not exist or be empty; it appears complete or not at all.\n"
    "\n"
    "options:\n"
    "  --max_shard_size SIZE    split files above SIZE (\"10GB\" default, \"500MB\", \"2GiB\", "
    "bytes)\n"
    "  --dtype bf16|fp16        write floating-point tensors in this dtype (rounded to nearest)\n"
    "  --model N                the checkpoint's model N (default 0)\n"
    "  --remove_checkpoint_dir  delete CHECKPOINT_DIR once the output is in place\n"
    "  --include_optimizer      write a checkpoint one process resumes from with load_state:\n"
    "                           every model whole and the ZeRO optimizer shards merged\n"
    "                           (not with --max_shard_size, --dtype or --model)\n"
    "  --unsafe_serialization   refused: only safetensors is written (see below)\n"
    "  -h, --help               show this help\n"
    "\n"
    "Accelerate's --unsafe_serialization writes pytorch_model.bin, a pickle that runs\n"
    "code when loaded and needs LibTorch to write; this command writes safetensors only.\n";

constexpr int kUsageExitCode = 2;
constexpr int kFailureExitCode = 1;

struct MergeArguments {
  bool help = false;
  MergeOptions options;
};

std::string parse_dtype(const std::string& text) {
  if (text == "bf16" || text == "bfloat16") return "BF16";
  if (text == "fp16" || text == "float16") return "F16";
  throw ConfigError("--dtype: unknown dtype '" + text + "' (choose bf16 or fp16)");
}

// The flag's name without "=value" and with '-' spelled '_'.
std::string flag_name(const std::string& arg) {
  std::string name = arg.substr(0, arg.find('='));
  for (std::size_t i = 2; i < name.size(); ++i) {
    if (name[i] == '-') name[i] = '_';
  }
  return name;
}

MergeArguments parse_merge_arguments(const std::vector<std::string>& args) {
  MergeArguments parsed;
  std::vector<std::string> positional;
  std::string resume_conflict;  // the first option a resumable checkpoint cannot honour
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "-h" || arg == "--help") {
      parsed.help = true;
      return parsed;
    }
    if (arg.size() < 2 || arg.compare(0, 2, "--") != 0) {
      if (arg.size() > 1 && arg[0] == '-') {
        throw ConfigError("unknown option '" + arg + "' (see 'accelerate merge-weights --help')");
      }
      positional.push_back(arg);
      continue;
    }
    const std::string name = flag_name(arg);
    const auto value = [&]() -> std::string {
      const auto equals = arg.find('=');
      if (equals != std::string::npos) return arg.substr(equals + 1);
      if (i + 1 >= args.size()) throw ConfigError(arg + " needs a value");
      return args[++i];
    };
    if (name == "--unsafe_serialization") {
      throw ConfigError(
          "--unsafe_serialization is refused: merge-weights writes safetensors only (a pickled "
          "pytorch_model.bin runs code when loaded and needs LibTorch to write)");
    } else if (name == "--include_optimizer") {
      parsed.options.include_optimizer = true;
    } else if (name == "--remove_checkpoint_dir") {
      parsed.options.remove_checkpoint_dir = true;
    } else if (name == "--max_shard_size") {
      const std::string size = value();
      parsed.options.max_shard_size = safetensors::parse_size(size);
      resume_conflict = resume_conflict.empty() ? "--max_shard_size" : resume_conflict;
    } else if (name == "--dtype") {
      parsed.options.dtype = parse_dtype(value());
      resume_conflict = resume_conflict.empty() ? "--dtype" : resume_conflict;
    } else if (name == "--model") {
      const std::string text = value();
      const auto number = detail::parse_integer_in(text, 0, 1'000'000);
      if (!number)
        throw ConfigError("--model: expected a model index (0, 1, ...), got '" + text + "'");
      parsed.options.model = static_cast<std::size_t>(*number);
      resume_conflict = resume_conflict.empty() ? "--model" : resume_conflict;
    } else {
      throw ConfigError("unknown option '" + arg + "' (see 'accelerate merge-weights --help')");
    }
  }
  if (parsed.options.include_optimizer && !resume_conflict.empty()) {
    throw ConfigError(resume_conflict +
                      " does not go with --include_optimizer: the output is a checkpoint that "
                      "load_state resumes, with every model in one file in its training dtype");
  }
  if (positional.size() != 2) {
    throw ConfigError("expected CHECKPOINT_DIR and OUTPUT_DIR, got " +
                      std::to_string(positional.size()) +
                      " path(s) (see 'accelerate merge-weights --help')");
  }
  parsed.options.checkpoint_dir = positional[0];
  parsed.options.output_dir = positional[1];
  return parsed;
}

}  // namespace

int run_merge_weights_command(const std::vector<std::string>& args) {
  MergeArguments parsed;
  try {
    parsed = parse_merge_arguments(args);
  } catch (const std::exception& error) {
    std::cerr << "accelerate merge-weights: error: " << error.what() << "\n";
    return kUsageExitCode;
  }
  if (parsed.help) {
    std::cout << kMergeHelp;
    return 0;
  }
  // A path that does not exist is bad input, reported as a bad flag is.
  std::error_code error;
  if (!std::filesystem::is_directory(parsed.options.checkpoint_dir, error)) {
    std::cerr << "accelerate merge-weights: error: " << parsed.options.checkpoint_dir
              << ": no such checkpoint folder\n";
    return kUsageExitCode;
  }
  try {
    const MergeResult result = merge_weights(parsed.options);
    std::cout << "Merged " << result.tensors << " tensors (" << result.bytes << " bytes) into "
              << parsed.options.output_dir << ":";
    for (const auto& file : result.files) std::cout << " " << file;
    std::cout << "\n";
    if (parsed.options.remove_checkpoint_dir) {
      std::cout << "Removed " << parsed.options.checkpoint_dir << "\n";
    }
    return 0;
  } catch (const std::exception& error) {
    std::cerr << "accelerate merge-weights: error: " << error.what() << "\n";
    return kFailureExitCode;
  }
}

}  // namespace accelerate::cli
