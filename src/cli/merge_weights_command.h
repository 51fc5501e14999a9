// `accelerate merge-weights CHECKPOINT_DIR OUTPUT_DIR`: a save_state
// checkpoint's model, whole or in pieces per process (any ZeRO stage, any
// number of processes), as Hugging Face's safetensors files. A wrong command
// line is one line on stderr ("accelerate merge-weights: error: ...") and
// exit code 2; a checkpoint that cannot be merged, one line and exit code 1.
#pragma once

#include <string>
#include <vector>

namespace accelerate::cli {

// `args` are the arguments after "merge-weights". Returns the exit code.
int run_merge_weights_command(const std::vector<std::string>& args);

}  // namespace accelerate::cli
