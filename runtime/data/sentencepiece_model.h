// libsentencepiece behind a plain interface. Debian's sentencepiece headers
// declare `absl::string_view` as std::string_view, which clashes with the
// system Abseil's own class, so the one file that includes them
// (sentencepiece_model.cc) includes no Abseil header, and this header none.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace zero {

class SentencePieceModel {
 public:
  // nullptr with *error set when the file cannot be read as a model.
  static std::unique_ptr<SentencePieceModel> load(const std::string& path, std::string* error);
  virtual ~SentencePieceModel() = default;
  virtual void encode(std::string_view text, std::vector<int32_t>* out) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual int64_t size() const = 0;
  virtual int32_t piece_to_id(std::string_view piece) const = 0;  // unk_id() when absent
  virtual std::string id_to_piece(int32_t id) const = 0;
  virtual bool is_control(int32_t id) const = 0;  // <s>, </s> and other control symbols
  virtual int32_t bos_id() const = 0;              // -1 when the model has none
  virtual int32_t eos_id() const = 0;
  virtual int32_t pad_id() const = 0;
  virtual int32_t unk_id() const = 0;
  virtual std::string describe() const = 0;  // "SentencePiece, 32000 pieces (tokenizer.model)"
};

}  // namespace zero
