// The Python reference of tests/models: transformers, run by a script of
// this folder under $ACCELERATE_REFERENCE_PYTHON
// (scripts/install-reference-python.sh). Each test using it starts with
// REQUIRE_REFERENCE_PYTHON(), so without the interpreter it reports itself
// skipped and ctest counts the skips.
#pragma once

#include <ATen/core/Tensor.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "support/process_runner.h"

namespace accelerate::testing {

// The interpreter, or "" when ACCELERATE_REFERENCE_PYTHON names none.
std::string reference_interpreter();

#define REQUIRE_REFERENCE_PYTHON()                                                           \
  if (accelerate::testing::reference_interpreter().empty())                                  \
  GTEST_SKIP() << "no Python reference: set ACCELERATE_REFERENCE_PYTHON to the interpreter " \
                  "scripts/install-reference-python.sh prints (scripts/test.sh does)"

// `script args...` under the interpreter, offline (nothing may come from a
// model hub), on the CPU, for at most 3 minutes.
RunResult run_reference_script(const std::string& script, const std::vector<std::string>& args);

// The folder `script make FOLDER` fills, made once per script version and
// shared by the test processes (each CTest test is a process of its own):
// the first makes it under a lock while the others wait, in a private
// folder renamed into place, so no process ever reads half of it. "" (and
// a test failure) when the script failed.
const std::string& reference_folder(const std::string& script);

// The tensors of a safetensors file, by name.
std::map<std::string, at::Tensor> load_named_tensors(const std::string& path);

double max_abs_diff(const at::Tensor& a, const at::Tensor& b);

}  // namespace accelerate::testing
