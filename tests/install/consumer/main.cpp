// Built against an installed accelerate-cpp by tests/install/check_install.sh.
#include <iostream>

#include <ATen/ATen.h>

#include <accelerate/accelerate.h>
#include <accelerate/models/llama_config.h>

int main() {
  auto job = accelerate::current_job_state();
  auto comm = accelerate::Communicator::connect(job);
  auto gathered = accelerate::gather(*comm, at::ones({2}));
  std::cout << "consumer ok: " << accelerate::kVersion << " " << job.describe() << " gathered "
            << gathered.numel() << " rope "
            << accelerate::models::rope_type_name(accelerate::models::RopeType::kLlama3)
            << std::endl;
  // assert: one process gathers its own two elements
  return gathered.numel() == 2 ? 0 : 1;
}
