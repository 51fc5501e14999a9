#include "data/data_pass.h"

#include <utility>

#include "accelerate/data/data_loader.h"
#include "data/epoch_order.h"
#include "data/ordered_prefetcher.h"

namespace accelerate {
namespace detail {

EpochSteps open_epoch(const PassPlan& plan) {
  LoaderOps& ops = *plan.ops;
  if (ops.is_iterable()) {
    ops.restart_stream(plan.epoch);
    return EpochSteps::over_stream(ops, plan.sharding);
  }
  auto length = ops.length();
  if (!length)
    throw Error(
        "DataLoader: the dataset does not tell its size() (map-style and batch datasets must)");
  return EpochSteps::over_order(ops, epoch_order(*length, plan.shuffle, plan.seed, plan.epoch),
                                plan.sharding);
}

namespace {

class LocalSource : public BatchSource {
 public:
  explicit LocalSource(const PassPlan& plan) : plan_(plan), steps_(open_epoch(plan)) {
    steps_.skip(plan.skip);
    prefetcher_ =
        std::make_unique<OrderedPrefetcher>([this] { return claim(); }, plan.num_workers,
                                            plan.num_workers * plan.prefetch_factor, plan.timeout);
  }
  // Workers must stop before the steps they claim from go away.
  ~LocalSource() override { prefetcher_.reset(); }

  std::optional<Delivery> next() override {
    auto result = prefetcher_->next();
    if (!result) return std::nullopt;
    return std::move(*static_cast<Delivery*>(result.get()));
  }

 private:
  // Runs on one thread at a time, in batch order.
  std::optional<OrderedPrefetcher::Job> claim() {
    if (finished_) return std::nullopt;
    auto step = steps_.next();
    const size_t me = plan_.sharding.process_index();
    auto positions = step ? steps_.positions(*step, me) : std::vector<size_t>();
    if (positions.empty()) {  // past the end, or nothing for us in the final step
      finished_ = true;
      return std::nullopt;
    }
    Delivery meta;
    meta.index = step->index;
    const auto& following = steps_.following();
    if (step->final) {
      meta.last = true;
      meta.remainder = static_cast<int64_t>(steps_.remainder_of_final(*step));
    } else if (following && following->final && steps_.positions(*following, me).empty()) {
      meta.last = true;
      meta.remainder = static_cast<int64_t>(steps_.remainder_of_final(*following));
    }
    finished_ = meta.last;
    auto load = steps_.examples(*step, positions);
    LoaderOps* ops = plan_.ops;
    const bool pin = plan_.pin_memory;
    return OrderedPrefetcher::Job([load = std::move(load), ops, pin, meta]() {
      auto delivery = std::make_shared<Delivery>(meta);
      delivery->batch = ops->collate(load(), pin);
      return std::shared_ptr<void>(std::move(delivery));
    });
  }

  PassPlan plan_;
  EpochSteps steps_;
  bool finished_ = false;
  std::unique_ptr<OrderedPrefetcher> prefetcher_;
};

}  // namespace

std::unique_ptr<BatchSource> make_local_source(const PassPlan& plan) {
  return std::make_unique<LocalSource>(plan);
}

Pass::Pass(DataLoaderBase& loader, PassPlan plan) : loader_(&loader), plan_(std::move(plan)) {
  source_ = plan_.dispatch ? make_dispatch_source(plan_) : make_local_source(plan_);
}

Pass::~Pass() { end(false); }

void Pass::advance() {
  if (ended_) return;
  try {
    auto delivery = source_->next();
    if (!delivery) {
      current_.reset();
      end(true);
      return;
    }
    if (plan_.device) plan_.ops->move_batch(delivery->batch, *plan_.device, plan_.pin_memory);
    current_ = std::move(delivery->batch);
    loader_->pass_yielded(delivery->index, delivery->last, delivery->remainder);
  } catch (...) {
    current_.reset();
    end(false);
    throw;
  }
}

void Pass::end(bool completed) noexcept {
  if (ended_) return;
  ended_ = true;
  source_.reset();  // joins the workers
  if (loader_) loader_->pass_ended(completed);
  loader_ = nullptr;
}

}  // namespace detail
}  // namespace accelerate
