// The definitions of the Accelerator's member templates (prepare()'s
// dispatch on the type of each argument, the ModuleHolder overloads), kept
// out of the class so that accelerator.h reads as its interface. Internal:
// included at the end of accelerate/accelerator/accelerator.h; include that instead.
#pragma once

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/optim/optimizer.h>

namespace accelerate {

template <class... Objects>
void Accelerator::prepare(Objects&... objects) {
  unbuilt_schedules_.clear();  // left by a call that threw
  (prepare_one(objects), ...);
  finish_prepare();
}

template <class... Objects>
void Accelerator::register_for_checkpointing(Objects&... objects) {
  (custom_objects_.push_back(make_checkpoint_object(objects)), ...);
}

template <class Impl>
std::vector<std::pair<std::string, at::Tensor>> Accelerator::get_state_dict(
    const torch::nn::ModuleHolder<Impl>& model) {
  return get_state_dict(*model.ptr());
}

template <class Impl>
std::vector<std::string> Accelerator::save_model(const torch::nn::ModuleHolder<Impl>& model,
                                                 const std::string& save_directory,
                                                 const SaveModelOptions& options) {
  return save_model(*model.ptr(), save_directory, options);
}

template <class T>
void Accelerator::prepare_one(T& object) {
  if constexpr (std::is_base_of<torch::nn::Module, T>::value) {
    prepare_module(object);
  } else if constexpr (std::is_base_of<PreparedOptimizerBase, T>::value) {
    prepare_optimizer(object);
  } else if constexpr (std::is_base_of<torch::optim::Optimizer, T>::value) {
    prepare_plain_optimizer(object);
  } else if constexpr (std::is_base_of<PreparedSchedulerBase, T>::value) {
    prepare_scheduler(object);
  } else if constexpr (std::is_base_of<DataLoaderBase, T>::value) {
    prepare_loader(object);
  } else if constexpr (points_to_data_loader<T>::value) {
    prepare_loader(*object);  // make_data_loader's std::unique_ptr
  } else if constexpr (torch::detail::is_module_holder<T>::value) {
    prepare_module(*object.ptr());  // BasicNet for BasicNetImpl
  } else {
    static_assert(!std::is_same<T, T>::value,
                  "prepare() takes models, accelerate::Optimizer<...>, torch optimizers, "
                  "accelerate::Scheduler<...> and accelerate::DataLoader<...>");
  }
}

}  // namespace accelerate
