// ScopeGuard: a move-only RAII scope that runs an action once when it ends,
// e.g. the end of Accelerator::accumulate()'s micro-step or no_sync()'s
// return to synchronised gradients. Accelerate's `with` blocks become
//   { auto scope = accelerator.no_sync(); ... }
#pragma once

#include <functional>
#include <utility>

namespace accelerate {

class [[nodiscard]] ScopeGuard {
 public:
  explicit ScopeGuard(std::function<void()> on_exit) : on_exit_(std::move(on_exit)) {}
  ScopeGuard(ScopeGuard&& other) noexcept : on_exit_(std::exchange(other.on_exit_, nullptr)) {}
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;
  ScopeGuard& operator=(ScopeGuard&&) = delete;
  ~ScopeGuard() {
    if (on_exit_) on_exit_();
  }

 private:
  std::function<void()> on_exit_;
};

}  // namespace accelerate
