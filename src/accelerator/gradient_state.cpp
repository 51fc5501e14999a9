#include "accelerate/accelerator/gradient_state.h"

#include <algorithm>

#include "accelerate/data/data_loader.h"

namespace accelerate {

void GradientState::loader_ended(const DataLoaderBase* loader) {
  // Usually the innermost; an outer loop may end first after an exception.
  auto it = std::find(active_dataloaders_.rbegin(), active_dataloaders_.rend(), loader);
  if (it != active_dataloaders_.rend()) active_dataloaders_.erase(std::next(it).base());
}

bool GradientState::end_of_dataloader() const {
  const DataLoaderBase* loader = active_dataloader();
  return loader != nullptr && loader->end_of_dataloader();
}

}  // namespace accelerate
