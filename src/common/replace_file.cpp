#include "common/replace_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <thread>

#include "accelerate/common/errors.h"

namespace accelerate {

void detail::replace_file(const std::string& path, const std::string& content,
                          const std::string& caller) {
  // A name of this process's and thread's own: several processes of one job
  // may save the same file to one path at once (each by rename, so the
  // file is always whole), and a shared temporary name let one rename away
  // the file another was about to rename.
  const std::string temporary =
      path + ".tmp." + std::to_string(::getpid()) + "." +
      std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id()));
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) {
      // The user's path: the temporary name beside it is an implementation detail.
      throw Error(caller + ": cannot write " + path + ": " + std::strerror(errno));
    }
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    out.close();
    if (!out) {
      std::remove(temporary.c_str());
      throw Error(caller + ": writing " + path + " failed (disk full?)");
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    std::remove(temporary.c_str());
    throw Error(caller + ": cannot rename " + temporary + " to " + path + ": " + reason);
  }
}

}  // namespace accelerate
