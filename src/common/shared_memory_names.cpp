#include "common/shared_memory_names.h"

#include <dirent.h>
#include <sys/mman.h>

namespace accelerate {

std::string shared_memory_prefix(int pid) { return "/accelerate-" + std::to_string(pid) + "-"; }

std::vector<std::string> shared_memory_names_of(int pid) {
  const std::string prefix = shared_memory_prefix(pid).substr(1);
  std::vector<std::string> found;
  if (DIR* dir = ::opendir("/dev/shm")) {
    while (const dirent* entry = ::readdir(dir)) {
      const std::string name = entry->d_name;
      if (name.rfind(prefix, 0) == 0) found.push_back(name);
    }
    ::closedir(dir);
  }
  return found;
}

int remove_shared_memory_of(int pid) {
  int removed = 0;
  for (const std::string& name : shared_memory_names_of(pid)) {
    if (::shm_unlink(("/" + name).c_str()) == 0) ++removed;
  }
  return removed;
}

}  // namespace accelerate
