// Decoders of a tokenizer.json (tokens -> text); see tokenizer_components.h.
#include "runtime/data/tokenizer_components.h"

#include "runtime/data/bpe_model.h"
#include "runtime/data/tokenizer_json_parts.h"

namespace zero {

using namespace tokenizer_json;  // NOLINT: the shared parts of every stage file

namespace {

class ByteLevelDecoder final : public Decoder {
 public:
  void apply(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      const size_t mark = bytes.size();
      bool all = true;
      for (size_t i = 0; i < t.size() && all;) {
        int len = 0;
        const int b = byte_level_byte(unicode::decode_at(t, i, &len));
        if (b < 0) all = false;
        else bytes.push_back(static_cast<char>(b));
        i += len;
      }
      if (!all) {  // a token not spelled in bytes (an added token): its own text
        bytes.resize(mark);
        bytes += t;
      }
    }
    tokens.assign(1, unicode::repair_utf8(bytes));
  }
};

class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, Prepend prepend) : replacement_(std::move(replacement)), prepend_(prepend) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      replace_all(tokens[i], replacement_, i == 0 && prepend_ != Prepend::kNever ? "" : " ");
    }
  }

 private:
  std::string replacement_;
  Prepend prepend_;
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(Pattern pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) replace_pattern(t, pattern_, content_);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

// Runs of "<0xAB>" tokens become the text their bytes spell; a run that is
// not valid UTF-8 becomes one U+FFFD per byte.
class ByteFallbackDecoder final : public Decoder {
 public:
  void apply(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    size_t run = 0;
    auto flush = [&] {
      if (run == 0) return;
      if (unicode::is_valid_utf8(bytes)) {
        out.push_back(bytes);
      } else {
        for (size_t k = 0; k < run; ++k) out.push_back("\xEF\xBF\xBD");
      }
      bytes.clear();
      run = 0;
    };
    for (std::string& t : tokens) {
      if (auto b = byte_token(t)) {
        bytes.push_back(static_cast<char>(*b));
        ++run;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }

 private:
  static std::optional<uint8_t> byte_token(const std::string& t) {
    if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return std::nullopt;
    auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
    const int hi = hex(t[3]), lo = hex(t[4]);
    if (hi < 0 || lo < 0) return std::nullopt;
    return static_cast<uint8_t>(hi * 16 + lo);
  }
};

class FuseDecoder final : public Decoder {
 public:
  void apply(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

class StripDecoder final : public Decoder {
 public:
  StripDecoder(std::string content, int64_t start, int64_t stop) : content_(std::move(content)), start_(start), stop_(stop) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      size_t begin = 0, end = t.size();
      for (int64_t k = 0; k < start_ && t.compare(begin, content_.size(), content_) == 0 && begin < end; ++k) begin += content_.size();
      for (int64_t k = 0; k < stop_ && end >= begin + content_.size() && t.compare(end - content_.size(), content_.size(), content_) == 0; ++k) end -= content_.size();
      t = t.substr(begin, end - begin);
    }
  }

 private:
  std::string content_;
  int64_t start_, stop_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> stages) : stages_(std::move(stages)) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (const auto& s : stages_) s->apply(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> stages_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Decoder>> make_decoder(const Json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j);
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace") {
    ZE_ASSIGN_OR_RETURN(std::string replacement, char_field(j, where, "replacement"));
    ZE_ASSIGN_OR_RETURN(Prepend prepend, prepend_scheme_of(j, where));
    return std::make_unique<MetaspaceDecoder>(std::move(replacement), prepend);
  }
  if (type == "Replace") {
    ZE_ASSIGN_OR_RETURN(Pattern pattern, Pattern::from_json(j.value("pattern", Json()), where + ".pattern"));
    ZE_ASSIGN_OR_RETURN(std::string content, string_field(j, where, "content"));
    return std::make_unique<ReplaceDecoder>(std::move(pattern), std::move(content));
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    ZE_ASSIGN_OR_RETURN(std::string content, char_field(j, where, "content"));
    return std::make_unique<StripDecoder>(std::move(content), j.value("start", int64_t{0}), j.value("stop", int64_t{0}));
  }
  if (type == "Sequence") {
    ZE_ASSIGN_OR_RETURN(auto stages, make_all<Decoder>(j, where, "decoders", make_decoder));
    return std::make_unique<SequenceDecoder>(std::move(stages));
  }
  return unsupported(where, type, "ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip and Sequence");
}

}  // namespace zero
