// One-threaded BLAS calls for a kernel that splits its own work over
// LibTorch's threads. Internal.
//
// Debian's LibTorch calls OpenBLAS's pthreads build for fp32 products, and
// that build splits every product over its own thread pool, whichever
// thread calls it; concurrent callers queue on its lock. A kernel that runs
// many small independent products (attention's blocks) is faster giving
// each intra-op thread whole products, each on one thread. OpenBLAS's
// thread count is process-wide, so the guard sets it to 1 for its lifetime
// and restores it (kernels running at once in several threads of one
// process, as thread ranks do, may see it restored early: a slower product,
// the same result); its functions are looked up in the process at run time,
// since LibTorch may link another BLAS (PyPI's links MKL, which runs one
// thread per call inside an OpenMP parallel region by itself: nothing to do).
#pragma once

namespace accelerate::compat {

class OneThreadedBlas {
 public:
  OneThreadedBlas();
  ~OneThreadedBlas();
  OneThreadedBlas(const OneThreadedBlas&) = delete;
  OneThreadedBlas& operator=(const OneThreadedBlas&) = delete;

 private:
  int restore_ = 0;  // OpenBLAS's thread count before; 0: nothing was changed
};

}  // namespace accelerate::compat
