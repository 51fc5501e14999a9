// A training program's uncaught exception (LibTorch's c10::Error from a bad
// backward, our Error, anything derived from std::exception) ends its
// process with the exception's first line,
//   accelerate: error: one of the variables needed for gradient ...
// and exit code 1, instead of std::terminate's abort with a core dump and a
// page of backtrace; the launcher then reports "rank N failed with exit code
// 1" beside that line. Installed by every Accelerator (the handler is the
// process's, so it is installed once and chains to the previous one for
// anything that is not an exception). Internal.
#pragma once

namespace accelerate {

void report_uncaught_errors_in_one_line();

}  // namespace accelerate
