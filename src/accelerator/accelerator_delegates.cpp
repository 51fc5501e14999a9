// The Accelerator's methods that hand a call to one of its parts unchanged:
// collectives and triggers (the Communicator), trackers, and the logger.
#include "accelerate/accelerator/accelerator.h"

namespace accelerate {

at::Tensor Accelerator::gather(const at::Tensor& tensor) {
  return accelerate::gather(*comm_, tensor);
}

// Drops the samples even_batches repeated on the loader's last batch. With
// sequence parallelism the ranks of a group hold one batch, so the values
// come once from each data-parallel rank (the ranks at this one's place in
// every group), as the loaders shard.
at::Tensor Accelerator::gather_for_metrics(const at::Tensor& tensor) {
  at::Tensor gathered = accelerate::gather(*batch_comm_, tensor);
  const DataLoaderBase* loader = gradient_state_->active_dataloader();
  if (loader == nullptr || !loader->end_of_dataloader()) return gathered;
  return truncate_for_metrics(gathered, *loader);
}

at::Tensor Accelerator::reduce(const at::Tensor& tensor, ReduceOp op, double scale) {
  return accelerate::reduce(*comm_, tensor, op, scale);
}

at::Tensor Accelerator::pad_across_processes(const at::Tensor& tensor, int64_t dim,
                                             int64_t pad_index, bool pad_first) {
  return accelerate::pad_across_processes(*comm_, tensor, dim, pad_index, pad_first);
}

void Accelerator::wait_for_everyone() { comm_->barrier(); }

void Accelerator::set_trigger() { trigger_.set(); }

bool Accelerator::check_trigger() { return trigger_.check(*comm_); }

void Accelerator::init_trackers(const std::string& project_name, const TrackerConfig& config) {
  trackers_->init_trackers(project_name, config);
}

bool Accelerator::trackers_initialized() const { return trackers_->initialized(); }

void Accelerator::log(const TrackerValues& values, std::optional<int64_t> step) {
  trackers_->log(values, step);
}

void Accelerator::end_training() { trackers_->end_training(); }

GeneralTracker& Accelerator::get_tracker(const std::string& name) {
  return trackers_->get_tracker(name);
}

Logger Accelerator::get_logger(const std::string& name, LoggerOptions options) const {
  if (!options.environment()) options.environment(environment());
  return accelerate::get_logger(name, options.communicator(comm_));
}

}  // namespace accelerate
