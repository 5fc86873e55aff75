// SentencePieceModel over libsentencepiece; see sentencepiece_model.h (why
// this file includes no Abseil header).
#include "runtime/data/sentencepiece_model.h"

#include <sentencepiece_processor.h>

namespace zero {

namespace {

class Model final : public SentencePieceModel {
 public:
  void encode(std::string_view text, std::vector<int32_t>* out) const override {
    std::vector<int> ids;
    const auto status = sp_.Encode(text, &ids);
    if (!status.ok()) return;  // only a model that failed to load refuses to encode
    out->insert(out->end(), ids.begin(), ids.end());
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string text;
    const std::vector<int> as_int(ids.begin(), ids.end());
    (void)sp_.Decode(as_int, &text);
    return text;
  }
  int64_t size() const override { return sp_.GetPieceSize(); }
  int32_t piece_to_id(std::string_view piece) const override { return sp_.PieceToId(piece); }
  std::string id_to_piece(int32_t id) const override { return sp_.IdToPiece(id); }
  bool is_control(int32_t id) const override { return sp_.IsControl(id); }
  int32_t bos_id() const override { return sp_.bos_id(); }
  int32_t eos_id() const override { return sp_.eos_id(); }
  int32_t pad_id() const override { return sp_.pad_id(); }
  int32_t unk_id() const override { return sp_.unk_id(); }
  std::string describe() const override {
    return "SentencePiece, " + std::to_string(size()) + " pieces (tokenizer.model)";
  }

  sentencepiece::SentencePieceProcessor sp_;
};

}  // namespace

std::unique_ptr<SentencePieceModel> SentencePieceModel::load(const std::string& path, std::string* error) {
  auto m = std::make_unique<Model>();
  const auto status = m->sp_.Load(path);
  if (!status.ok()) {
    *error = status.ToString();
    return nullptr;
  }
  return m;
}

}  // namespace zero
