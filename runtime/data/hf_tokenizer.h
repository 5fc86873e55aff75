// A tokenizer read from a Hugging Face tokenizer.json. Encoding follows the
// `tokenizers` library step by step, so ids are the same:
//  1. added tokens whose "normalized" is false are cut out of the raw text
//     (leftmost, then longest; lstrip/rstrip/single_word honoured);
//  2. each remaining piece is normalized, then the added tokens whose
//     "normalized" is true are cut out of it;
//  3. the pre-tokenizer splits each piece into words and the BPE model
//     encodes each word (bpe_model.h);
//  4. with add_special, the post-processor's ids go around the sequence.
// Decoding maps ids to token texts (dropping special tokens when asked) and
// runs the decoder chain. The supported components are listed in
// tokenizer_components.h; the model must be BPE (WordPiece, Unigram and
// WordLevel files are refused by name).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/data/tokenizer.h"

namespace zero {

absl::StatusOr<std::unique_ptr<Tokenizer>> open_hf_tokenizer_json(const std::string& path);

}  // namespace zero
