#include "cli/estimate_memory_command.h"

#include <sys/stat.h>

#include <algorithm>
#include <iostream>
#include <optional>

#include "accelerate/errors.h"
#include "cli/memory_estimate.h"
#include "common/environment_text.h"
#include "common/settings.h"

namespace accelerate::cli {
namespace {

constexpr int kUsageExitCode = 2;

const char* const kHelp =
    "usage: accelerate estimate-memory MODEL [--dtypes DTYPE [DTYPE ...]] [--num_processes N]\n"
    "\n"
    "Estimates the memory a model needs to load (largest layer, total size) and\n"
    "to train with Adam at batch size 1 (no activations), per dtype, with the\n"
    "formulas of Hugging Face Accelerate's estimate-memory.\n"
    "\n"
    "MODEL is one of:\n"
    "  a parameter count     7B, 350M, 1.5k, 1.3e9, 125000000 (K, M, B/G, T suffixes)\n"
    "  a .safetensors file   only its header is read\n"
    "  a safetensors index   model.safetensors.index.json and the shards it names\n"
    "  a directory           holding an index, model.safetensors, or *.safetensors shards\n"
    "\n"
    "options:\n"
    "  --dtypes DTYPE ...    any of float32 float16 bfloat16 int8 int4 (default: all)\n"
    "  --num_processes N     also print, per process when training on N processes with\n"
    "                        ZeRO stage 0 (data parallel), 1 (Adam states sharded) and\n"
    "                        2 (gradients too), the bytes of parameters + gradients +\n"
    "                        Adam states, all in the weights' dtype (no activations)\n"
    "  -h, --help            show this help\n";

struct EstimateArguments {
  bool help = false;
  std::string model;
  std::vector<std::string> dtypes;
  std::optional<int> num_processes;  // --num_processes: add the ZeRO table
};

bool is_known_dtype(const std::string& dtype) {
  const auto& known = known_estimate_dtypes();
  return std::find(known.begin(), known.end(), dtype) != known.end();
}

std::string known_dtype_list() {
  std::string list;
  for (const auto& dtype : known_estimate_dtypes()) list += (list.empty() ? "" : ", ") + dtype;
  return list;
}

void add_dtype(EstimateArguments& parsed, const std::string& dtype) {
  if (!is_known_dtype(dtype)) {
    throw ConfigError("--dtypes: unknown dtype '" + dtype + "' (choose from " + known_dtype_list() +
                      "; put MODEL before --dtypes)");
  }
  if (std::find(parsed.dtypes.begin(), parsed.dtypes.end(), dtype) == parsed.dtypes.end()) {
    parsed.dtypes.push_back(dtype);
  }
}

int parse_num_processes(const std::string& spelled, const std::string& value) {
  const auto number = detail::parse_integer_in(value, 1, settings::kMaxCount);
  if (!number)
    throw ConfigError(settings::bad_value_message(spelled, settings::count_expectation(), value));
  return static_cast<int>(*number);
}

EstimateArguments parse(const std::vector<std::string>& args) {
  EstimateArguments parsed;
  bool dtypes_given = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "-h" || arg == "--help") {
      parsed.help = true;
      return parsed;
    }
    if (arg == "--dtypes" || arg.rfind("--dtypes=", 0) == 0) {
      dtypes_given = true;
      size_t before = parsed.dtypes.size();
      if (arg != "--dtypes") add_dtype(parsed, arg.substr(9));
      // Like argparse's nargs="+": values up to the next flag.
      while (i + 1 < args.size() && args[i + 1].rfind("-", 0) != 0) add_dtype(parsed, args[++i]);
      if (parsed.dtypes.size() == before && arg == "--dtypes") {
        throw ConfigError("--dtypes expects at least one of " + known_dtype_list());
      }
    } else if (arg == "--num_processes" || arg == "--num-processes") {
      if (i + 1 >= args.size()) {
        throw ConfigError(arg + " needs a value (" + settings::count_expectation() + ")");
      }
      parsed.num_processes = parse_num_processes(arg, args[++i]);
    } else if (arg.rfind("--num_processes=", 0) == 0 || arg.rfind("--num-processes=", 0) == 0) {
      const size_t equals = arg.find('=');
      parsed.num_processes = parse_num_processes(arg.substr(0, equals), arg.substr(equals + 1));
    } else if (arg.size() > 1 && arg[0] == '-') {
      throw ConfigError("unknown option '" + arg + "' (see 'accelerate estimate-memory --help')");
    } else if (!parsed.model.empty()) {
      throw ConfigError("one MODEL only, got '" + parsed.model + "' and '" + arg + "'");
    } else {
      parsed.model = arg;
    }
  }
  if (parsed.model.empty()) {
    throw ConfigError(
        "MODEL is missing: give a parameter count (7B, 350M, 1.3e9) or a .safetensors "
        "file, index or directory");
  }
  if (!dtypes_given) parsed.dtypes = known_estimate_dtypes();
  return parsed;
}

bool path_exists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0;
}

ModelSize size_of(const std::string& model) {
  // An existing path wins, so a directory called "7B" is read, not counted.
  if (path_exists(model)) return model_size_from_path(model);
  if (auto count = parse_parameter_count(model)) return model_size_from_count(*count);
  throw ConfigError(
      "'" + model +
      "' is neither a parameter count (like 7B, 350M, 1.3e9 or "
      "125000000, at most 1e15) nor an existing .safetensors file, index or directory");
}

}  // namespace

int run_estimate_memory_command(const std::vector<std::string>& args) {
  try {
    const EstimateArguments parsed = parse(args);
    if (parsed.help) {
      std::cout << kHelp;
      return 0;
    }
    const ModelSize size = size_of(parsed.model);
    std::cout << render_estimate(parsed.model, size, estimate_rows(size, parsed.dtypes));
    if (parsed.num_processes) {
      std::cout << "\n"
                << render_zero_estimate(
                       zero_estimate_rows(size, parsed.dtypes, *parsed.num_processes),
                       *parsed.num_processes);
    }
    return 0;
  } catch (const std::exception& error) {
    // Every failure here is about the input: a flag, a count or a file.
    std::cerr << "accelerate estimate-memory: error: " << error.what() << "\n";
    return kUsageExitCode;
  }
}

}  // namespace accelerate::cli
