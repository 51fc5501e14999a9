#include "accelerate/memory/empty_weights.h"

#include <c10/core/impl/LocalDispatchKeySet.h>

namespace accelerate {

// Including the Meta dispatch key on this thread sends every operator to
// its meta kernel (shape checks, no compute) while factories still allocate
// CPU tensors (BackendSelect picks their backend from the options): the
// initialisers' writes never happen. Including a backend key leaves its
// backend bit behind when removed one key at a time, so the whole local
// dispatch state is restored as it was instead.
struct EmptyWeightsGuard::Impl {
  c10::impl::LocalDispatchKeySet saved = c10::impl::tls_local_dispatch_key_set();
};

namespace {
// Active guards on this thread (nested guards count each).
thread_local int active_guards = 0;
}  // namespace

bool building_empty_weights() { return active_guards > 0; }

EmptyWeightsGuard::EmptyWeightsGuard(bool active) {
  if (!active) return;
  impl_ = std::make_unique<Impl>();
  c10::impl::tls_set_dispatch_key_included(c10::DispatchKey::Meta, true);
  ++active_guards;
}

EmptyWeightsGuard::~EmptyWeightsGuard() {
  if (!impl_) return;
  c10::impl::_force_tls_local_dispatch_key_set(impl_->saved);
  --active_guards;
}

EmptyWeightsGuard::EmptyWeightsGuard(EmptyWeightsGuard&&) noexcept = default;

}  // namespace accelerate
