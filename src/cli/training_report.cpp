#include "cli/training_report.h"

#include <cmath>
#include <vector>

#include "cli/memory_estimate.h"
#include "cli/training_traffic.h"

namespace accelerate::cli {
namespace {

std::string bytes_text(double bytes) { return format_bytes(bytes, std::floor(bytes) == bytes); }

std::string plural(int count, const char* one, const char* many) {
  return std::to_string(count) + " " + (count == 1 ? one : many);
}

std::string setup_line(const TrainingSetup& setup) {
  std::string text = "ZeRO stage " + std::to_string(setup.zero_stage) + " on " +
                     plural(setup.num_processes, "process", "processes");
  if (setup.num_nodes > 1)
    text += " (" + plural(setup.num_nodes, "node", "nodes") + " of " +
            std::to_string(setup.processes_per_node()) + ")";
  if (setup.tp_size > 1)
    text += ", tensor parallelism over groups of " + std::to_string(setup.tp_size) +
            " (ZeRO over " + plural(setup.shard_processes(), "process", "processes") + ")";
  if (setup.hybrid)
    text += ", hybrid: sharded over a node's " +
            plural(setup.processes_per_node(), "process", "processes") +
            ", replicated across nodes";
  if (setup.offload_optimizer && setup.offload_param) {
    text += ", optimizer and parameters offloaded to the host";
  } else if (setup.offload_optimizer) {
    text += ", optimizer offloaded to the host";
  } else if (setup.offload_param) {
    text += ", parameters offloaded to the host";
  }
  switch (setup.mixed_precision) {
    case EstimateMixedPrecision::kNo:
      text += ", fp32";
      break;
    case EstimateMixedPrecision::kFp16:
      text += ", fp16 autocast on fp32 weights";
      break;
    case EstimateMixedPrecision::kBf16:
      text += ", bf16 autocast on fp32 weights";
      break;
  }
  return text + ", Adam";
}

}  // namespace

std::string render_training_estimate(const TrainingReportInput& input) {
  const TrainingSetup& setup = input.setup;
  const ModelStateBytes state =
      model_state_per_process(input.parameters, input.outside_units, setup);
  std::vector<std::vector<std::string>> cells = {{"per process", "device", "host"}};
  cells.push_back(
      {"parameters", bytes_text(state.parameters_device), bytes_text(state.parameters_host)});
  cells.push_back(
      {"gradients", bytes_text(state.gradients_device), bytes_text(state.gradients_host)});
  cells.push_back(
      {"Adam states", bytes_text(state.optimizer_device), bytes_text(state.optimizer_host)});
  cells.push_back(
      {"model state between steps", bytes_text(state.device()), bytes_text(state.host())});
  double step_device = state.device();
  if (setup.effective_stage() == 3) {
    if (input.unit_parameters) {
      const double gathered = gathered_unit_bytes(*input.unit_parameters, setup);
      cells.push_back({"+ 2 gathered blocks (stage 3)", bytes_text(gathered), "0 bytes"});
      step_device += gathered;
    } else {
      cells.push_back({"+ 2 gathered blocks (stage 3)", "N/A", "0 bytes"});
    }
  }
  if (input.shape && input.activations) {
    const ActivationBytes act = activation_bytes(*input.shape, *input.activations);
    const std::string shape = "T=" + std::to_string(input.activations->seq_len) + ", micro-batch " +
                              std::to_string(input.activations->micro_batch) +
                              (input.activations->checkpointing ? ", checkpointed" : "") +
                              (input.activations->bf16 ? ", bf16 autocast" : "");
    cells.push_back(
        {"activations held for backward (" + shape + ")", bytes_text(act.held), "0 bytes"});
    cells.push_back({"activation peak (forward or backward)", bytes_text(act.peak()), "0 bytes"});
    step_device += act.peak();
    cells.push_back({"peak in a step", bytes_text(step_device), bytes_text(state.host())});
  } else {
    cells.push_back({"peak in a step (without activations)", bytes_text(step_device),
                     bytes_text(state.host())});
  }
  std::string out = "Training memory per process (accelerate-cpp): " + setup_line(setup) + "\n";
  out += render_box_table(cells);
  if (setup.effective_stage() != setup.zero_stage) {
    out += setup.num_processes == 1
               ? "One process without offloading: trained as data parallelism (stage 0).\n"
               : "One process per shard: trained as data parallelism (stage 0), nothing "
                 "offloaded.\n";
  }
  if (state.host() > 0) {
    out += "Host memory per node (" + plural(setup.processes_per_node(), "process", "processes") +
           "): " + bytes_text(state.host() * setup.processes_per_node()) + ".\n";
  }
  if (setup.tp_size > 1) {
    out += "At tp " + std::to_string(setup.tp_size) + " each process holds " +
           std::to_string(std::llround(input.parameters)) +
           " parameters (its parts of the split layers, the rest whole). DeepSpeed's estimate "
           "and the step traffic are not given at tensor parallelism.\n";
    return out;
  }
  const auto deepspeed =
      deepspeed_estimate(input.parameters, input.largest_layer_parameters, setup);
  const std::string function = setup.zero_stage == 3 ? "estimate_zero3_model_states_mem_needs"
                                                     : "estimate_zero2_model_states_mem_needs";
  if (deepspeed) {
    out += "DeepSpeed's " + function + " (16-bit weights and gradients, fp32 master weights and " +
           "Adam states, host x1.5): " + bytes_text(deepspeed->device_per_process) + " per GPU, " +
           bytes_text(deepspeed->host_per_node) + " host per node.\n";
  } else if (setup.zero_stage == 3) {
    out += "DeepSpeed's " + function +
           ": N/A (it needs the largest layer: give a safetensors file or a config.json).\n";
  }
  if (setup.num_processes > 1) {
    out += render_step_traffic(input.parameters, input.outside_units, setup);
  }
  return out;
}

}  // namespace accelerate::cli
