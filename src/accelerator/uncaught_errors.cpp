#include "accelerator/uncaught_errors.h"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <mutex>

#include "distributed/failure_diagnosis.h"

namespace accelerate {
namespace {

// The handler std::set_terminate replaced, for terminations without an
// exception (std::terminate called directly).
std::terminate_handler previous_handler = nullptr;

[[noreturn]] void report_and_exit() {
  if (const std::exception_ptr current = std::current_exception()) {
    try {
      std::rethrow_exception(current);
    } catch (const std::exception& error) {
      std::cout.flush();
      std::cerr << "accelerate: error: " << detail::first_line_of(error) << std::endl;
    } catch (...) {
      std::cout.flush();
      std::cerr << "accelerate: error: the program ended with an exception that is not a "
                   "std::exception"
                << std::endl;
    }
    std::fflush(nullptr);
    std::_Exit(1);  // not exit(): other threads may still run, and static destructors with them
  }
  if (previous_handler != nullptr) previous_handler();
  std::abort();
}

}  // namespace

void report_uncaught_errors_in_one_line() {
  static std::once_flag installed;
  std::call_once(installed, [] { previous_handler = std::set_terminate(report_and_exit); });
}

}  // namespace accelerate
