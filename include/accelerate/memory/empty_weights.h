// Building a model without memory for its weights, as Accelerate's
// init_empty_weights and DeepSpeed's zero.Init let Python programs do:
//
//   {
//     auto empty = accelerate::init_empty_weights();
//     model = GPT(config);        // shapes and dtypes; no resident memory
//   }
//
// Modules built while the guard lives get ordinary CPU tensors whose memory
// is never written: every operation in that scope runs as on LibTorch's meta
// device (shapes only), so initialisers do not touch the pages and the
// operating system never backs them. The tensors' values are undefined
// until something writes them: Accelerator::zero3_init() uses this on every
// process but the main one, and prepare() fills each process's shard from
// the main process's weights (docs/sharding.md, "Building the model").
//
// The guard is for building modules only: any computation inside its scope
// produces no values. It acts on the calling thread.
#pragma once

#include <memory>

namespace accelerate {

class EmptyWeightsGuard {
 public:
  // `active` false: a guard that changes nothing (for code that builds
  // empty on some processes only).
  explicit EmptyWeightsGuard(bool active = true);
  ~EmptyWeightsGuard();
  EmptyWeightsGuard(EmptyWeightsGuard&&) noexcept;
  EmptyWeightsGuard& operator=(EmptyWeightsGuard&&) = delete;
  EmptyWeightsGuard(const EmptyWeightsGuard&) = delete;
  EmptyWeightsGuard& operator=(const EmptyWeightsGuard&) = delete;

  bool active() const { return impl_ != nullptr; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// True while an active guard lives on the calling thread. Code that fills
// weights checks it to skip work the guard would discard: loading a
// pretrained folder (accelerate::models) checks the files' names and shapes
// but reads no tensor data then, so a ZeRO-3 process that receives its
// shards from the main one never holds the whole weights.
bool building_empty_weights();

// Accelerate's init_empty_weights() (parameters and buffers alike).
[[nodiscard]] inline EmptyWeightsGuard init_empty_weights() { return EmptyWeightsGuard(true); }

}  // namespace accelerate
