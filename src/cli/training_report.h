// The training section of `accelerate estimate-memory` (printed when a
// training flag such as --zero_stage or --seq_len is given): one table of
// device and host bytes per process, DeepSpeed's estimate beside it, and
// (several processes) the bytes each sends per step (training_traffic.h).
#pragma once

#include <optional>
#include <string>

#include "cli/training_estimate.h"
#include "cli/transformer_shape.h"

namespace accelerate::cli {

struct TrainingReportInput {
  TrainingSetup setup;
  double parameters = 0;
  // Parameters no stage-3 unit holds (whole on every process); 0 when the
  // model's blocks are unknown (a count or a safetensors file).
  double outside_units = 0;
  std::optional<double> unit_parameters;           // one block, when known
  std::optional<double> largest_layer_parameters;  // DeepSpeed's term, when known
  std::optional<TransformerShape> shape;
  std::optional<ActivationOptions> activations;  // with a shape only
};

std::string render_training_estimate(const TrainingReportInput& input);

}  // namespace accelerate::cli
