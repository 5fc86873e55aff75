// load_tokenizer: which file of a model directory defines the tokenizer, and
// its special tokens; see tokenizer.h. The special tokens come from
// tokenizer_config.json (else special_tokens_map.json), each given as a
// string or as an AddedToken object {"content": ...}; the chat template from
// tokenizer_config.json or chat_template.jinja (newer transformers).
#include "runtime/data/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/status.h"
#include "core/strings.h"
#include "runtime/data/bpe_model.h"
#include "runtime/config/json_file.h"
#include "runtime/data/hf_tokenizer.h"
#include "runtime/data/sentencepiece_model.h"
#include "runtime/data/unicode_text.h"

namespace zero {

namespace fs = std::filesystem;

namespace {

// A directory with only tokenizer.model. add_special follows
// tokenizer_config.json's add_bos_token / add_eos_token (LlamaTokenizer's
// defaults: bos yes, eos no).
class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(std::unique_ptr<SentencePieceModel> model, bool add_bos, bool add_eos)
      : model_(std::move(model)), add_bos_(add_bos), add_eos_(add_eos) {}
  void encode(std::string_view text, bool add_special, std::vector<int32_t>* out) const override {
    if (add_special && add_bos_ && model_->bos_id() >= 0) out->push_back(model_->bos_id());
    if (unicode::is_valid_utf8(text)) {
      model_->encode(text, out);
    } else {  // libsentencepiece would replace each bad byte; Python replaces each ill-formed sequence once
      model_->encode(unicode::repair_utf8(text), out);
    }
    if (add_special && add_eos_ && model_->eos_id() >= 0) out->push_back(model_->eos_id());
  }
  std::string decode(absl::Span<const int32_t> ids, bool skip_special) const override {
    std::vector<int32_t> kept;
    for (int32_t id : ids) {
      if (id < 0 || id >= model_->size() || (skip_special && model_->is_control(id))) continue;
      kept.push_back(id);
    }
    return model_->decode(kept);
  }
  int64_t vocab_size() const override { return model_->size(); }
  std::optional<int32_t> token_to_id(std::string_view token) const override {
    const int32_t id = model_->piece_to_id(token);
    if (id == model_->unk_id() && token != model_->id_to_piece(id)) return std::nullopt;
    return id;
  }
  std::optional<std::string> id_to_token(int32_t id) const override {
    if (id < 0 || id >= model_->size()) return std::nullopt;
    return model_->id_to_piece(id);
  }
  std::string token_text(int32_t id) const override {
    if (id < 0 || id >= model_->size() || model_->is_control(id)) return "";
    return piece_text(model_->id_to_piece(id));
  }
  std::string describe() const override { return model_->describe(); }

  const SentencePieceModel& model() const { return *model_; }

 private:
  std::unique_ptr<SentencePieceModel> model_;
  bool add_bos_, add_eos_;
};

std::optional<Json> read_optional_json(const fs::path& p, absl::Status* error) {
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) return std::nullopt;
  absl::StatusOr<Json> j = load_json_file(p.string());
  if (!j.ok()) {
    *error = j.status();
    return std::nullopt;
  }
  return *j;
}

// "<s>" or {"content": "<s>", ...} -> "<s>"; anything else -> "".
std::string special_token_text(const Json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& path) {
  try {
    return load_tokenizer_files(path);
  } catch (const nlohmann::json::exception& e) {  // a value of the wrong type in tokenizer_config.json
    return absl::InvalidArgumentError(cat("tokenizer ", path, ": a value of the wrong type: ", e.what()));
  }
}

absl::StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer_files(const std::string& path) {
  std::error_code ec;
  fs::path dir = path, tokenizer_json, tokenizer_model;
  if (fs::is_directory(path, ec)) {
    if (fs::is_regular_file(dir / "tokenizer.json", ec)) tokenizer_json = dir / "tokenizer.json";
    else if (fs::is_regular_file(dir / "tokenizer.model", ec)) tokenizer_model = dir / "tokenizer.model";
    else {
      return absl::NotFoundError(cat("tokenizer directory ", path, ": has neither tokenizer.json nor tokenizer.model"));
    }
  } else if (fs::is_regular_file(path, ec)) {
    dir = fs::path(path).parent_path();
    if (dir.empty()) dir = ".";
    if (fs::path(path).extension() == ".json") tokenizer_json = path;
    else tokenizer_model = path;
  } else {
    return absl::NotFoundError(cat("tokenizer ", path, ": no such file or directory"));
  }

  absl::Status config_error;
  std::optional<Json> config = read_optional_json(dir / "tokenizer_config.json", &config_error);
  ZE_RETURN_IF_ERROR(config_error);
  std::optional<Json> special_map = read_optional_json(dir / "special_tokens_map.json", &config_error);
  ZE_RETURN_IF_ERROR(config_error);
  auto setting = [&](const char* key) -> Json {
    if (config && config->contains(key) && !(*config)[key].is_null()) return (*config)[key];
    if (special_map && special_map->contains(key)) return (*special_map)[key];
    return Json();
  };

  std::unique_ptr<Tokenizer> t;
  if (!tokenizer_json.empty()) {
    ZE_ASSIGN_OR_RETURN(t, open_hf_tokenizer_json(tokenizer_json.string()));
  } else {
    std::string error;
    std::unique_ptr<SentencePieceModel> model = SentencePieceModel::load(tokenizer_model.string(), &error);
    if (!model) return absl::InvalidArgumentError(cat(tokenizer_model.string(), ": not a SentencePiece model: ", error));
    const Json add_bos = setting("add_bos_token"), add_eos = setting("add_eos_token");
    t = std::make_unique<SentencePieceTokenizer>(std::move(model), add_bos.is_boolean() ? add_bos.get<bool>() : true,
                                                 add_eos.is_boolean() ? add_eos.get<bool>() : false);
  }
  t->source_ = path;

  SpecialTokens& sp = t->special_;
  struct Slot {
    const char* key;
    std::string* text;
    std::optional<int32_t>* id;
  };
  for (const Slot& slot : {Slot{"bos_token", &sp.bos_token, &sp.bos_id}, Slot{"eos_token", &sp.eos_token, &sp.eos_id},
                           Slot{"pad_token", &sp.pad_token, &sp.pad_id}, Slot{"unk_token", &sp.unk_token, &sp.unk_id}}) {
    *slot.text = special_token_text(setting(slot.key));
    if (slot.text->empty()) continue;
    *slot.id = t->token_to_id(*slot.text);
    if (!slot.id->has_value()) {
      return absl::InvalidArgumentError(cat((dir / "tokenizer_config.json").string(), ": ", slot.key, " \"", *slot.text,
                                            "\" is not a token of ", t->source_));
    }
  }
  if (auto* spm = dynamic_cast<SentencePieceTokenizer*>(t.get())) {  // the model itself names them
    auto fill = [&](std::optional<int32_t>& id, std::string& text, int32_t model_id) {
      if (id || model_id < 0) return;
      id = model_id;
      text = *spm->id_to_token(model_id);
    };
    fill(sp.bos_id, sp.bos_token, spm->model().bos_id());
    fill(sp.eos_id, sp.eos_token, spm->model().eos_id());
    fill(sp.pad_id, sp.pad_token, spm->model().pad_id());
    fill(sp.unk_id, sp.unk_token, spm->model().unk_id());
  }

  const Json templ = setting("chat_template");
  if (templ.is_string()) {
    t->chat_template_ = templ.get<std::string>();
  } else if (templ.is_array()) {  // [{"name": "default", "template": ...}, {"name": "tool_use", ...}]
    for (const Json& named : templ) {
      if (named.value("name", std::string()) == "default") t->chat_template_ = named.value("template", std::string());
    }
  } else if (fs::is_regular_file(dir / "chat_template.jinja", ec)) {
    std::ifstream in(dir / "chat_template.jinja", std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    t->chat_template_ = text.str();
  }
  return t;
}

}  // namespace zero
