// Must not compile: a DataLoader over a type that is no dataset. The test
// (compile_fail_test.sh) wants DataLoader's one static_assert, not a cascade.
#include <accelerate/data/data_loader.h>

struct Settings {
  int value = 0;
};

int main() {
  accelerate::DataLoader loader(Settings{}, accelerate::DataLoaderOptions(2));
  return static_cast<int>(loader.options().batch_size());
}
