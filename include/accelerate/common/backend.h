// Backend: the collective library a job's processes talk through. LibTorch-free
// (JobState carries it; the Communicator maps it to a c10d backend).
#pragma once

namespace accelerate {

enum class Backend {
  kNone,  // one process: nothing to talk to
  kGloo,  // CPU tensors (and CUDA tensors staged through the host)
  kNccl,  // CUDA tensors, where LibTorch was built with NCCL
};

// "none", "gloo" or "nccl" (c10d's names).
const char* to_string(Backend backend);

}  // namespace accelerate
