#include "parallel/data_parallel_engine.h"

#include <torch/nn/module.h>

#include "accelerate/common/errors.h"
#include "parallel/sharded_gradients.h"

namespace accelerate {

DataParallelEngine::DataParallelEngine(std::shared_ptr<Communicator> communicator,
                                       GradientSyncOptions options)
    : communicator_(std::move(communicator)), options_(std::move(options)) {}

DataParallelEngine::~DataParallelEngine() = default;

DistributedType DataParallelEngine::distributed_type() const {
  const JobState& job = communicator_->job();
  if (!job.is_distributed()) return DistributedType::kNo;
  return job.device.is_cuda() ? DistributedType::kMultiGpu : DistributedType::kMultiCpu;
}

void DataParallelEngine::prepare_model(torch::nn::Module& module,
                                       const std::optional<c10::Device>& placement) {
  if (placement) module.to(*placement);
  add_model(module, /*broadcast_state=*/true);
}

GradientReducer* DataParallelEngine::add_model(torch::nn::Module& module, bool broadcast_state,
                                               bool even_alone) {
  if (!communicator_->job().is_distributed() && !even_alone) return nullptr;
  // Every process starts from process 0's weights; then gradients keep them equal.
  if (broadcast_state) broadcast_module_state(*communicator_, module, /*include_buffers=*/true);
  models_.push_back({&module, GradientReducer::for_module(communicator_, module, options_)});
  if (even_alone) detail::ShardedGradients::reduce_alone(*models_.back().reducer);
  return models_.back().reducer.get();
}

void DataParallelEngine::build_optimizer(DummyOptim& optimizer) {
  (void)optimizer;
  throw ConfigError(
      "DummyOptim stands in for the optimizer of a DeepSpeed config file, and this job has "
      "no DeepSpeed settings; declare accelerate::Optimizer<YourOptimizer> instead");
}

void DataParallelEngine::build_schedule(DummyScheduler& scheduler, const PreparedProgram& program) {
  (void)scheduler;
  (void)program;
  throw ConfigError(
      "DummyScheduler stands in for the scheduler of a DeepSpeed config file, and this job "
      "has no DeepSpeed settings; declare accelerate::Scheduler<YourScheduler> instead");
}

void DataParallelEngine::set_sync(bool sync) {
  for (auto& model : models_) model.reducer->set_sync_enabled(sync);
}

void DataParallelEngine::before_backward(const at::Tensor& loss) {
  if (!options_.find_unused_parameters()) return;
  for (auto& model : models_) model.reducer->prepare_for_backward({loss});
}

void DataParallelEngine::after_backward() {
  for (auto& model : models_) {
    const bool synced = model.reducer->sync_enabled();
    model.reducer->finalize_backward();
    // Buffers travel from process 0 before the model's next forward, as with
    // DDP, but only once no pending graph still holds them (see there).
    if (synced) model.reducer->broadcast_buffers_after_backward();
  }
}

std::vector<GradientReducer*> DataParallelEngine::reducers() const {
  std::vector<GradientReducer*> all;
  for (const auto& model : models_) all.push_back(model.reducer.get());
  return all;
}

}  // namespace accelerate
