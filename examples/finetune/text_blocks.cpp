#include "text_blocks.h"

#include <ATen/ATen.h>
#include <accelerate/common/errors.h>

#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string_view>

namespace finetune {

std::vector<int32_t> tokenize_lines(const std::string& path,
                                    const accelerate::Tokenizer& tokenizer) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw accelerate::Error("cannot read the text file '" + path + "'");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<int32_t> ids;
  const std::string_view all(text);
  size_t begin = 0;
  while (begin < all.size()) {
    size_t end = all.find('\n', begin);
    end = end == std::string_view::npos ? all.size() : end + 1;
    const auto line = tokenizer.encode(all.substr(begin, end - begin));
    ids.insert(ids.end(), line.begin(), line.end());
    begin = end;
  }
  return ids;
}

TextBlocks::TextBlocks(std::vector<int32_t> ids, int64_t block_size, const std::string& origin)
    : block_size_(block_size) {
  if (block_size <= 0) {
    throw accelerate::Error("block_size must be positive, not " + std::to_string(block_size));
  }
  blocks_ = ids.size() / static_cast<size_t>(block_size);
  tokens_ = static_cast<int64_t>(ids.size());
  if (blocks_ == 0) {
    throw accelerate::Error(origin + " gives " + std::to_string(ids.size()) +
                            " tokens, fewer than one block of " + std::to_string(block_size));
  }
  ids.resize(blocks_ * static_cast<size_t>(block_size));
  ids_ = std::make_shared<const std::vector<int32_t>>(std::move(ids));
}

accelerate::Example TextBlocks::get(size_t index) const {
  if (index >= blocks_) {
    throw std::out_of_range("TextBlocks: block " + std::to_string(index) + " of " +
                            std::to_string(blocks_));
  }
  const int32_t* start = ids_->data() + index * static_cast<size_t>(block_size_);
  at::Tensor block = at::empty({block_size_}, at::kLong);
  auto* out = block.data_ptr<int64_t>();
  for (int64_t i = 0; i < block_size_; ++i) out[i] = start[i];
  return {block, block};
}

}  // namespace finetune
