// Building a model for a pretrained folder without paying for the random
// initialisation its weights would overwrite (the from_pretrained of every
// model here). Drawing LibTorch's default initialisation for a 300M-parameter
// Llama costs more than reading its 1.2 GB of weights; transformers skips it
// the same way (its modules are built on the meta device, then filled).
#pragma once

#include <c10/core/ScalarType.h>

#include <functional>
#include <memory>
#include <string>

#include "accelerate/models/pretrained.h"

namespace torch::nn {
class Module;
}

namespace accelerate::models {

// Builds the model with `build` where initialisers write nothing (an
// EmptyWeightsGuard), converts it to `dtype`, and fills every tensor from
// `folder` with load_pretrained_weights(rules). When the folder lacks some
// of the model's tensors (a new classification head under allow_missing)
// they need their initial values, so the model is built again the ordinary
// way, drawing the same random numbers it always drew, and loaded then.
// Inside Accelerator::zero3_init() on a process that builds empty, the
// model stays empty (as load_pretrained_weights leaves it there).
std::shared_ptr<torch::nn::Module> build_pretrained_module(
    const std::function<std::shared_ptr<torch::nn::Module>()>& build, const std::string& folder,
    c10::ScalarType dtype, const PretrainedLoadOptions& rules);

template <typename Model>
std::shared_ptr<Model> build_pretrained(const std::function<std::shared_ptr<Model>()>& build,
                                        const std::string& folder, c10::ScalarType dtype,
                                        const PretrainedLoadOptions& rules = {}) {
  return std::static_pointer_cast<Model>(
      build_pretrained_module([&build] { return build(); }, folder, dtype, rules));
}

}  // namespace accelerate::models
