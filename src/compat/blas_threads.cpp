#include "compat/blas_threads.h"

#include <dlfcn.h>

namespace accelerate::compat {
namespace {

using GetThreads = int (*)();
using SetThreads = void (*)(int);

// OpenBLAS's thread-count functions where this process has OpenBLAS.
struct OpenblasThreads {
  GetThreads get = nullptr;
  SetThreads set = nullptr;
};

const OpenblasThreads& openblas_threads() {
  // Resolved once: the loaded libraries do not change under a running kernel.
  static const OpenblasThreads found = [] {
    OpenblasThreads f;
    f.get = reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
    f.set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
    if (f.get == nullptr || f.set == nullptr) f = OpenblasThreads{};
    return f;
  }();
  return found;
}

}  // namespace

OneThreadedBlas::OneThreadedBlas() {
  const OpenblasThreads& openblas = openblas_threads();
  if (openblas.get == nullptr) return;
  const int threads = openblas.get();
  if (threads <= 1) return;
  openblas.set(1);
  restore_ = threads;
}

OneThreadedBlas::~OneThreadedBlas() {
  if (restore_ > 0) openblas_threads().set(restore_);
}

}  // namespace accelerate::compat
