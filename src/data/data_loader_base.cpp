#include "accelerate/data/data_loader.h"

#include <algorithm>

#include "accelerate/distributed/collectives.h"
#include "accelerate/distributed/communicator.h"
#include "data/data_pass.h"
#include "data/epoch_order.h"

namespace accelerate {

DataLoaderBase::DataLoaderBase(DataLoaderOptions options, detail::LoaderOps& ops)
    : ops_(ops), options_(std::move(options)) {
  if (options_.batch_size() == 0)
    throw ConfigError("DataLoaderOptions: batch_size must be at least 1");
  sharding_.batch_size(options_.batch_size()).drop_last(options_.drop_last());
  if (options_.seed()) {
    seed_ = *options_.seed();
    seed_is_explicit_ = true;
  } else if (options_.shuffle()) {
    // Only shuffling loaders draw, so a loader that does not shuffle leaves
    // the user's random stream untouched.
    seed_ = detail::draw_seed_from_default_generator();
  }
}

DataLoaderBase::~DataLoaderBase() { abandon_active_pass(); }

void DataLoaderBase::require_idle(const char* what) const {
  if (iterating_) {
    throw Error(std::string("DataLoader: ") + what +
                " while a pass over the loader is running; call it before or after the loop");
  }
}

void DataLoaderBase::configure_sharding(std::shared_ptr<Communicator> comm,
                                        const DataLoaderConfiguration& config) {
  require_idle("configure_sharding");
  const size_t processes = comm ? static_cast<size_t>(comm->world_size()) : 1;
  const size_t index = comm ? static_cast<size_t>(comm->rank()) : 0;
  BatchSharding sharding = BatchSharding()
                               .batch_size(options_.batch_size())
                               .num_processes(processes)
                               .process_index(index)
                               .split_batches(config.split_batches())
                               .even_batches(config.even_batches())
                               .drop_last(options_.drop_last());
  sharding.validate();
  const bool dispatch = processes > 1 && config.dispatch_batches().value_or(ops_.is_iterable());
  if (dispatch && !ops_.examples_serializable()) {
    throw ConfigError("dispatch_batches needs to send " + ops_.example_type_name() +
                      " between processes: specialise accelerate::Serializer for it");
  }
  sharding_ = sharding;
  dispatch_ = dispatch;
  comm_ = processes > 1 ? std::move(comm) : nullptr;
  if (config.data_seed()) {
    seed_ = *config.data_seed();
    seed_is_explicit_ = true;
  } else if (comm_ && options_.shuffle() && !seed_is_explicit_) {
    // Seeds drawn on each process differ; process 0's wins.
    seed_ = broadcast_object(*comm_, seed_, 0);
  }
}

void DataLoaderBase::set_device(std::optional<c10::Device> device) {
  if (device && !device->is_cpu() && !ops_.batches_movable()) {
    throw ConfigError("DataLoader cannot move " + ops_.batch_type_name() + " to " + device->str() +
                      ": specialise accelerate::TensorTree for it, or turn device placement off");
  }
  device_ = device;
}

void DataLoaderBase::set_epoch(int64_t epoch) {
  epoch_ = epoch;
  epoch_set_during_pass_ = iterating_;
}

void DataLoaderBase::set_shuffle_seed(uint64_t seed) {
  seed_ = seed;
  seed_is_explicit_ = true;
}

std::optional<size_t> DataLoaderBase::known_size() const {
  auto length = ops_.length();
  if (!length) return std::nullopt;
  return sharded_batch_count(*length, sharding_);
}

size_t DataLoaderBase::size() const {
  auto size = known_size();
  if (!size) {
    throw Error(
        "DataLoader::size(): the iterable dataset does not tell its length "
        "(give it a size() member)");
  }
  return *size;
}

void DataLoaderBase::skip_first_batches(size_t count) {
  pending_skip_ = std::make_pair(epoch_, count);
}

DataLoaderPosition DataLoaderBase::position() const {
  DataLoaderPosition position;
  position.shuffle_seed = seed_;
  if (iterating_) {
    position.epoch = pass_epoch_;
    position.batches_yielded = batches_yielded_;
  } else {
    position.epoch = epoch_;
    position.batches_yielded =
        pending_skip_ && pending_skip_->first == epoch_ ? pending_skip_->second : batches_yielded_;
  }
  return position;
}

void DataLoaderBase::restore_position(const DataLoaderPosition& position) {
  require_idle("restore_position");
  seed_ = position.shuffle_seed;
  seed_is_explicit_ = true;
  epoch_ = position.epoch;
  batches_yielded_ = 0;
  pending_skip_.reset();
  if (position.batches_yielded > 0) {
    pending_skip_ = std::make_pair(epoch_, static_cast<size_t>(position.batches_yielded));
  }
}

size_t DataLoaderBase::add_iteration_observer(IterationObserver observer) {
  observers_.emplace_back(next_observer_id_, std::move(observer));
  return next_observer_id_++;
}

void DataLoaderBase::remove_iteration_observer(size_t id) {
  observers_.erase(std::remove_if(observers_.begin(), observers_.end(),
                                  [id](const auto& entry) { return entry.first == id; }),
                   observers_.end());
}

void DataLoaderBase::notify(IterationEvent event) {
  auto observers = observers_;  // an observer may remove itself
  for (auto& entry : observers) entry.second(*this, event);
}

std::shared_ptr<detail::Pass> DataLoaderBase::start_pass() {
  abandon_active_pass();
  detail::PassPlan plan;
  plan.ops = &ops_;
  plan.sharding = sharding_;
  plan.comm = comm_;
  plan.dispatch = dispatch_;
  plan.shuffle = options_.shuffle();
  plan.seed = seed_;
  plan.epoch = epoch_;
  plan.skip = pending_skip_ && pending_skip_->first == epoch_ ? pending_skip_->second : 0;
  plan.num_workers = options_.num_workers();
  plan.prefetch_factor = options_.prefetch_factor();
  plan.timeout = options_.timeout();
  plan.pin_memory = options_.pin_memory();
  plan.device = device_;
  pending_skip_.reset();

  iterating_ = true;
  pass_epoch_ = epoch_;
  epoch_set_during_pass_ = false;
  end_of_dataloader_ = false;
  batches_yielded_ = plan.skip;
  auto length = ops_.length();
  remainder_ = length ? static_cast<int64_t>(padded_last_step_samples(*length, sharding_)) : -1;

  std::shared_ptr<detail::Pass> pass;
  try {
    notify(IterationEvent::kBegin);
    pass = std::make_shared<detail::Pass>(*this, std::move(plan));
  } catch (...) {
    pass_ended(false);
    throw;
  }
  active_ = pass;
  pass->advance();  // on failure the pass has ended itself
  return pass;
}

void DataLoaderBase::abandon_active_pass() noexcept {
  if (auto pass = active_.lock()) pass->abandon();
  active_.reset();
}

bool DataLoaderBase::pass_at_end(const detail::Pass* pass) { return !pass || pass->at_end(); }

void* DataLoaderBase::pass_batch(const detail::Pass& pass) { return pass.batch(); }

void DataLoaderBase::advance_pass(detail::Pass& pass) { pass.advance(); }

void DataLoaderBase::pass_yielded(uint64_t batch_index, bool last, int64_t remainder) {
  batches_yielded_ = batch_index + 1;
  end_of_dataloader_ = last;
  if (remainder >= 0) remainder_ = remainder;
}

void DataLoaderBase::pass_ended(bool completed) noexcept {
  if (!iterating_) return;
  iterating_ = false;
  if (completed) {
    if (!epoch_set_during_pass_) epoch_ = pass_epoch_ + 1;
    batches_yielded_ = 0;
  }
  try {
    notify(IterationEvent::kEnd);
  } catch (...) {
    // Ending runs in destructors too (a loop left early); an observer's
    // failure there must not terminate the program.
  }
}

at::Tensor truncate_for_metrics(const at::Tensor& gathered, const DataLoaderBase& loader) {
  if (!loader.end_of_dataloader() || gathered.dim() == 0) return gathered;
  const int64_t keep = loader.remainder();
  if (keep <= 0 || keep >= gathered.size(0)) return gathered;
  return gathered.narrow(0, 0, keep);
}

}  // namespace accelerate
