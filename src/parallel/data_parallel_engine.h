// DataParallelEngine: every process holds the whole model and optimizer and
// steps them alike; a GradientReducer per prepared model averages the
// gradients after each synchronising backward (docs/gradient-sync.md), as
// PyTorch's DistributedDataParallel does. In a job of one process it only
// places the models. Internal; see parallel_engine.h.
#pragma once

#include <memory>
#include <vector>

#include "accelerate/parallel/gradient_reducer.h"
#include "parallel/parallel_engine.h"

namespace accelerate {

class DataParallelEngine : public ParallelEngine {
 public:
  DataParallelEngine(std::shared_ptr<Communicator> communicator, GradientSyncOptions options);
  ~DataParallelEngine() override;

  DistributedType distributed_type() const override;
  void prepare_model(torch::nn::Module& module,
                     const std::optional<c10::Device>& placement) override;
  void build_optimizer(DummyOptim& optimizer) override;
  void prepare_optimizer(PreparedOptimizerBase& optimizer) override { (void)optimizer; }
  void build_schedule(DummyScheduler& scheduler, const PreparedProgram& program) override;
  void set_sync(bool sync) override;
  void before_backward(const at::Tensor& loss) override;
  void after_backward() override;
  std::vector<GradientReducer*> reducers() const override;

  // For engines built on data parallelism (ZeRO's gradients travel through
  // the same reducers): gives `module` a reducer, after making its state
  // process 0's when `broadcast_state`. Null in a job of one process, unless
  // `even_alone`: ZeRO offloading on one process keeps its buckets (whole,
  // as one rank's shards) in host memory, so it needs the reducer's buckets.
  GradientReducer* add_model(torch::nn::Module& module, bool broadcast_state,
                             bool even_alone = false);
  const std::shared_ptr<Communicator>& communicator() const { return communicator_; }

 private:
  struct ReplicatedModel {
    torch::nn::Module* module;
    std::unique_ptr<GradientReducer> reducer;
  };
  std::shared_ptr<Communicator> communicator_;
  GradientSyncOptions options_;
  std::vector<ReplicatedModel> models_;
};

}  // namespace accelerate
