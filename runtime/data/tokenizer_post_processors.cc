// Post-processors of a tokenizer.json (the special ids around a sequence); see tokenizer_components.h.
#include "runtime/data/tokenizer_components.h"

#include "runtime/data/tokenizer_json_parts.h"

namespace zero {

using namespace tokenizer_json;  // NOLINT: the shared parts of every stage file

absl::StatusOr<PostProcessor> make_post_processor(
    const Json& j, const std::string& where, const std::function<std::optional<int32_t>(const std::string&)>& token_id) {
  PostProcessor out;
  if (j.is_null()) return out;
  const std::string type = type_of(j);
  if (type == "ByteLevel") return out;  // offsets only
  if (type == "Sequence") {
    const Json& list = j.value("processors", Json());
    if (!list.is_array()) return bad_field(where, "processors", list, "an array");
    for (size_t i = 0; i < list.size(); ++i) {
      ZE_ASSIGN_OR_RETURN(PostProcessor p, make_post_processor(list[i], cat(where, ".processors[", i, "]"), token_id));
      out.prefix.insert(out.prefix.end(), p.prefix.begin(), p.prefix.end());
      out.suffix.insert(out.suffix.begin(), p.suffix.begin(), p.suffix.end());
    }
    return out;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    for (const char* field : {"cls", "sep"}) {
      const Json& pair = j.value(field, Json());
      if (!pair.is_array() || pair.size() != 2 || !pair[1].is_number_integer()) {
        return bad_field(where, field, pair, "[\"token\", id]");
      }
      (std::string(field) == "cls" ? out.prefix : out.suffix).push_back(pair[1].get<int32_t>());
    }
    return out;
  }
  if (type == "TemplateProcessing") {
    const Json& single = j.value("single", Json());
    const Json& specials = j.value("special_tokens", Json::object());
    if (!single.is_array()) return bad_field(where, "single", single, "an array of {\"SpecialToken\"} and {\"Sequence\"}");
    bool seen_sequence = false;
    for (size_t i = 0; i < single.size(); ++i) {
      const Json& item = single[i];
      if (item.contains("Sequence")) {
        seen_sequence = true;
        continue;
      }
      if (!item.contains("SpecialToken") || !item["SpecialToken"].contains("id")) {
        return bad_field(where, cat("single[", i, "]"), item, "{\"SpecialToken\": {\"id\": ...}} or {\"Sequence\": ...}");
      }
      const std::string name = item["SpecialToken"]["id"].get<std::string>();
      std::vector<int32_t> ids;
      if (specials.contains(name) && specials[name].contains("ids")) {
        for (const Json& id : specials[name]["ids"]) ids.push_back(id.get<int32_t>());
      } else if (auto id = token_id(name)) {
        ids.push_back(*id);
      } else {
        return absl::InvalidArgumentError(cat(where, ".single[", i, "]: special token \"", name, "\" has no id"));
      }
      auto& side = seen_sequence ? out.suffix : out.prefix;
      side.insert(side.end(), ids.begin(), ids.end());
    }
    return out;
  }
  return unsupported(where, type, "TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing and Sequence");
}

}  // namespace zero
