// dispatch_batches: process 0 reads the data; every process gets its part of
// each global step through one broadcast per message (see dispatch_message.h).
#include <deque>
#include <exception>
#include <utility>

#include "accelerate/distributed/communicator.h"
#include "data/data_pass.h"
#include "data/dispatch_message.h"
#include "data/ordered_prefetcher.h"
#include "distributed/failure_diagnosis.h"

namespace accelerate {
namespace detail {
namespace {

class DispatchSource : public BatchSource {
 public:
  explicit DispatchSource(const PassPlan& plan)
      : plan_(plan), rank_(plan.sharding.process_index()) {
    if (rank_ == 0) {
      steps_ = std::make_unique<EpochSteps>(open_epoch(plan));
      steps_->skip(plan.skip);
      // Process 0's workers load and serialise whole global steps; the
      // messages themselves go out from the iterating thread.
      prefetcher_ = std::make_unique<OrderedPrefetcher>(
          [this] { return claim_message(); }, plan.num_workers,
          plan.num_workers * plan.prefetch_factor, plan.timeout);
    }
  }
  ~DispatchSource() override { prefetcher_.reset(); }

  std::optional<Delivery> next() override {
    while (queue_.empty()) {
      if (saw_last_) return std::nullopt;
      receive();
    }
    Delivery delivery = std::move(queue_.front());
    queue_.pop_front();
    return delivery;
  }

 private:
  using Loads = std::vector<std::vector<std::function<Erased()>>>;  // per process, per batch

  // Process 0, one thread at a time: the next message's work.
  std::optional<OrderedPrefetcher::Job> claim_message() {
    if (finished_) return std::nullopt;
    const size_t processes = plan_.sharding.num_processes();
    DispatchMessage header;
    Loads loads(processes);
    auto step = steps_->next();
    if (!step) {
      // An empty epoch still needs one message, so the others learn it.
      header.last = true;
      header.remainder = 0;
      header.first_batch = plan_.skip;
    } else {
      header.first_batch = step->index;
      add_loads(*step, loads);
      std::optional<EpochSteps::Step> final_step;
      if (step->final) final_step = step;
      const auto& following = steps_->following();
      if (!final_step && following && following->final && leaves_someone_out(*following)) {
        // Send the short final step along: the processes that get nothing
        // from it end with this message and never wait for another.
        final_step = steps_->next();
        add_loads(*final_step, loads);
      }
      if (final_step) {
        header.last = true;
        header.remainder = static_cast<int64_t>(steps_->remainder_of_final(*final_step));
      }
    }
    finished_ = header.last;
    LoaderOps* ops = plan_.ops;
    return OrderedPrefetcher::Job([ops, header, loads = std::move(loads)]() {
      DispatchMessage message = header;
      message.parts.resize(loads.size());
      for (size_t process = 0; process < loads.size(); ++process) {
        for (const auto& load : loads[process]) {
          message.parts[process].push_back(ops->serialize(load()));
        }
      }
      return std::shared_ptr<void>(std::make_shared<std::string>(encode(message)));
    });
  }

  void add_loads(const EpochSteps::Step& step, Loads& loads) const {
    for (size_t process = 0; process < loads.size(); ++process) {
      auto positions = steps_->positions(step, process);
      if (!positions.empty()) loads[process].push_back(steps_->examples(step, positions));
    }
  }

  bool leaves_someone_out(const EpochSteps::Step& step) const {
    for (size_t process = 0; process < plan_.sharding.num_processes(); ++process) {
      if (steps_->positions(step, process).empty()) return true;
    }
    return false;
  }

  // Every process, in step: one message from process 0.
  void receive() {
    std::string bytes;
    if (rank_ == 0) {
      std::exception_ptr failure;
      try {
        auto result = prefetcher_->next();
        if (!result) throw Error("dispatch_batches: process 0 ran out of messages");
        bytes = std::move(*static_cast<std::string*>(result.get()));
      } catch (...) {
        // Tell the others why, instead of leaving them to time out.
        failure = std::current_exception();
        DispatchMessage message;
        message.last = true;
        message.error = describe(failure);
        bytes = encode(message);
      }
      exchange_from_process_zero(*plan_.comm, &bytes);
      if (failure) std::rethrow_exception(failure);
    } else {
      bytes = exchange_from_process_zero(*plan_.comm, nullptr);
    }
    DispatchMessage message = decode(bytes);
    if (!message.error.empty()) {
      throw Error("dispatch_batches: process 0 failed to load the batch: " + message.error);
    }
    saw_last_ = message.last;
    if (rank_ >= message.parts.size()) return;
    auto& mine = message.parts[rank_];
    for (size_t i = 0; i < mine.size(); ++i) {
      Delivery delivery;
      delivery.index = message.first_batch + i;
      delivery.last = message.last && i + 1 == mine.size();
      delivery.remainder = message.last ? message.remainder : -1;
      delivery.batch = plan_.ops->collate(plan_.ops->deserialize(mine[i]), plan_.pin_memory);
      queue_.push_back(std::move(delivery));
    }
  }

  static std::string describe(const std::exception_ptr& failure) {
    try {
      std::rethrow_exception(failure);
    } catch (const std::exception& error) {
      const std::string what = detail::first_line_of(error);  // without LibTorch's backtrace
      return what.empty() ? "unknown error" : what;
    } catch (...) {
      return "unknown error";
    }
  }

  PassPlan plan_;
  size_t rank_;
  std::unique_ptr<EpochSteps> steps_;  // process 0 only
  bool finished_ = false;
  std::deque<Delivery> queue_;
  bool saw_last_ = false;
  std::unique_ptr<OrderedPrefetcher> prefetcher_;  // process 0 only
};

}  // namespace

std::unique_ptr<BatchSource> make_dispatch_source(const PassPlan& plan) {
  return std::make_unique<DispatchSource>(plan);
}

}  // namespace detail
}  // namespace accelerate
