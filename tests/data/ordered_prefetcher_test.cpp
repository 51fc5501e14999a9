// The ordered prefetcher behind DataLoader workers: order, bounds, errors and
// shutdown, without LibTorch.
#include "data/ordered_prefetcher.h"

#include <atomic>
#include <chrono>
#include <random>
#include <stdexcept>
#include <thread>

#include <gtest/gtest.h>

namespace accelerate {
namespace detail {
namespace {

using Clock = std::chrono::steady_clock;

// Claims 0..count-1; job i returns i after a pseudo-random pause.
OrderedPrefetcher::Claim counting(
    size_t count, std::atomic<size_t>* claimed,
    std::chrono::microseconds max_pause = std::chrono::microseconds(300)) {
  auto next = std::make_shared<size_t>(0);
  return [=]() -> std::optional<OrderedPrefetcher::Job> {
    if (*next == count) return std::nullopt;
    const size_t value = (*next)++;
    if (claimed) ++*claimed;
    return OrderedPrefetcher::Job([value, max_pause] {
      std::mt19937 random(static_cast<unsigned>(value));
      std::this_thread::sleep_for(std::chrono::microseconds(random() % (max_pause.count() + 1)));
      return std::shared_ptr<void>(std::make_shared<size_t>(value));
    });
  };
}

size_t value_of(const OrderedPrefetcher::Result& result) {
  return *static_cast<size_t*>(result.get());
}

TEST(OrderedPrefetcher, DeliversInClaimOrderWhateverTheWorkers) {
  for (size_t workers : {0, 1, 3, 8}) {
    OrderedPrefetcher prefetcher(counting(200, nullptr), workers, 2 * workers);
    for (size_t expected = 0; expected < 200; ++expected) {
      auto result = prefetcher.next();
      ASSERT_TRUE(result) << workers << " workers";
      ASSERT_EQ(value_of(result), expected) << workers << " workers";
    }
    EXPECT_FALSE(prefetcher.next());
    EXPECT_FALSE(prefetcher.next());
  }
}

TEST(OrderedPrefetcher, KeepsAtMostCapacityAhead) {
  std::atomic<size_t> claimed{0};
  const size_t capacity = 4;
  OrderedPrefetcher prefetcher(counting(100, &claimed, std::chrono::microseconds(0)), 3, capacity);
  for (size_t consumed = 0; consumed < 100; ++consumed) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));  // let the workers run ahead
    // `consumed` results are gone; at most `capacity` more may be claimed.
    ASSERT_LE(claimed.load(), consumed + capacity);
    ASSERT_TRUE(prefetcher.next());
  }
}

TEST(OrderedPrefetcher, AFailingJobFailsAtItsPlaceInTheSequence) {
  for (size_t workers : {0, 2}) {
    auto next = std::make_shared<size_t>(0);
    OrderedPrefetcher prefetcher(
        [next]() -> std::optional<OrderedPrefetcher::Job> {
          const size_t value = (*next)++;
          return OrderedPrefetcher::Job([value]() -> OrderedPrefetcher::Result {
            if (value == 5) throw std::runtime_error("job 5 failed");
            return std::make_shared<size_t>(value);
          });
        },
        workers, 4);
    for (size_t expected = 0; expected < 5; ++expected) {
      ASSERT_EQ(value_of(prefetcher.next()), expected);
    }
    try {
      prefetcher.next();
      FAIL() << "expected the job's exception";
    } catch (const std::runtime_error& error) {
      EXPECT_STREQ(error.what(), "job 5 failed");
    }
    EXPECT_FALSE(prefetcher.next());  // finished after a failure
  }
}

TEST(OrderedPrefetcher, AFailingClaimFailsAfterEarlierResults) {
  for (size_t workers : {0, 2}) {
    auto next = std::make_shared<size_t>(0);
    OrderedPrefetcher prefetcher(
        [next]() -> std::optional<OrderedPrefetcher::Job> {
          const size_t value = (*next)++;
          if (value == 3) throw std::runtime_error("stream broke");
          return OrderedPrefetcher::Job(
              [value] { return std::shared_ptr<void>(std::make_shared<size_t>(value)); });
        },
        workers, 4);
    for (size_t expected = 0; expected < 3; ++expected)
      ASSERT_EQ(value_of(prefetcher.next()), expected);
    EXPECT_THROW(prefetcher.next(), std::runtime_error);
    EXPECT_FALSE(prefetcher.next());
  }
}

TEST(OrderedPrefetcher, StopsPromptlyWhenDestroyedEarly) {
  std::atomic<size_t> running{0};
  std::atomic<size_t> started{0};
  const auto begin = Clock::now();
  {
    // An endless sequence of slow jobs; the consumer takes one and leaves.
    OrderedPrefetcher prefetcher(
        [&]() -> std::optional<OrderedPrefetcher::Job> {
          return OrderedPrefetcher::Job([&] {
            ++running;
            ++started;
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            --running;
            return std::shared_ptr<void>(std::make_shared<size_t>(0));
          });
        },
        4, 8);
    ASSERT_TRUE(prefetcher.next());
  }
  const auto elapsed = Clock::now() - begin;
  EXPECT_EQ(running.load(), 0u);  // every worker joined
  const size_t after = started.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(started.load(), after);  // and nothing runs any more
  EXPECT_LT(elapsed, std::chrono::seconds(2));
}

TEST(OrderedPrefetcher, DestroyedBeforeAnythingIsConsumed) {
  for (int round = 0; round < 20; ++round) {
    OrderedPrefetcher prefetcher(counting(1000, nullptr, std::chrono::microseconds(50)), 3, 6);
  }
}

}  // namespace
}  // namespace detail
}  // namespace accelerate
