// The fine-tuning example's data: a text file tokenized as transformers'
// run_clm.py does (each line with its line break, through the tokenizer with
// its special tokens, so a Llama tokenizer starts every line with BOS), the
// ids concatenated and cut into blocks of block_size tokens; the last,
// shorter remainder is dropped. Each block is an example whose data and
// target are both the block: the causal-LM loss shifts the labels itself.
#pragma once

#include <accelerate/data/dataset.h>
#include <accelerate/text/tokenizer.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace finetune {

// The ids of `path`'s lines, one after the other. A line is the text up to
// and including a '\n' (the last line may lack it); empty files give no
// ids. Throws accelerate::Error naming the file when it cannot be read.
std::vector<int32_t> tokenize_lines(const std::string& path,
                                    const accelerate::Tokenizer& tokenizer);

class TextBlocks {
 public:
  // Throws accelerate::Error when `ids` make no whole block.
  TextBlocks(std::vector<int32_t> ids, int64_t block_size, const std::string& origin);
  size_t size() const { return blocks_; }
  // Block `index` as int64 ids [block_size], as data and as target.
  accelerate::Example get(size_t index) const;
  int64_t block_size() const { return block_size_; }
  // The ids of the text, the dropped remainder included.
  int64_t tokens() const { return tokens_; }

 private:
  std::shared_ptr<const std::vector<int32_t>> ids_;  // shared: the loader copies the dataset
  int64_t block_size_;
  size_t blocks_;
  int64_t tokens_;
};

}  // namespace finetune
