// Writing a small file whole: tokenizer.bpe and tokenizer.json (src/text),
// the accelerate config file (src/config).
#pragma once

#include <string>

namespace accelerate::detail {

// Writes `content` to `path` through a temporary file of this process and
// thread renamed into place, so a reader never sees half a file, even when
// several processes of a job save the same file at once. Throws
// accelerate::Error starting with `caller`.
void replace_file(const std::string& path, const std::string& content, const std::string& caller);

}  // namespace accelerate::detail
