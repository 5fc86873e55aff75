// The declared config keys; see config_schema.h.
#include "runtime/config/config_schema.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/check.h"
#include "core/strings.h"
#include "runtime/config/config_key_builders.h"

namespace zero {

std::string ConfigKey::section() const {
  const size_t dot = path.rfind('.');
  return dot == std::string::npos ? "" : path.substr(0, dot);
}

std::string ConfigKey::name() const {
  const size_t dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

ConfigKey ConfigKey::also(std::string a) const {
  ConfigKey k = *this;
  k.alias = std::move(a);
  return k;
}

ConfigKey ConfigKey::when(std::function<bool(const RunConfig&)> f) const {
  ConfigKey k = *this;
  k.applies = std::move(f);
  return k;
}

ConfigKey ConfigKey::shown(std::string text) const {
  ConfigKey k = *this;
  k.shown_default = std::move(text);
  return k;
}

ConfigKey ConfigKey::read_by_code() const {
  ConfigKey k = *this;
  k.by_code = true;
  return k;
}

ConfigKey ConfigKey::on_auto(std::string shown, std::function<absl::StatusOr<Json>(const RunConfig&)> f) const {
  ConfigKey k = *this;
  k.auto_shown = std::move(shown);
  k.auto_value = std::move(f);
  return k;
}

namespace {
std::string kind_name(const ConfigKey& k) {
  switch (k.kind) {
    case KeyKind::kBool:
      return "bool";
    case KeyKind::kInt:
      return "integer";
    case KeyKind::kNumber:
      return "number";
    case KeyKind::kString:
      return "string";
    case KeyKind::kChoice:
      return "choice";
    case KeyKind::kChoiceList:
      return "list of choices";
    case KeyKind::kStringList:
      return "list of strings";
    case KeyKind::kNumberList:
      return cat(k.list_size, " numbers");
    case KeyKind::kRefused:
      return "";
  }
  return "";
}

std::string format_int(int64_t v) {
  if (v == INT64_MAX) return "max";
  if (v == INT32_MAX) return "2^31-1";
  return cat(v);
}

// What values the key takes: "[1, 64]", ">= 0", "\"none\", \"cpu\"".
std::string accepts(const ConfigKey& k) {
  switch (k.kind) {
    case KeyKind::kInt:
      if (k.min_int == INT64_MIN && k.max_int == INT64_MAX) return "any";
      if (k.max_int == INT64_MAX) return cat(">= ", k.min_int);
      return cat("[", format_int(k.min_int), ", ", format_int(k.max_int), "]");
    case KeyKind::kNumber:
    case KeyKind::kNumberList:
      return k.range.describe();
    case KeyKind::kChoice:
    case KeyKind::kChoiceList: {
      std::string out;
      for (const std::string& c : k.choices) out += cat(out.empty() ? "" : ", ", "`\"", c, "\"`");
      return out;
    }
    default:
      return "";
  }
}

std::string escape_cell(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

std::string default_cell(const ConfigKey& k) {
  if (!k.shown_default.empty()) return k.shown_default;
  RunConfig fresh;
  const Json v = k.get(fresh);
  if (v.is_null()) return "unset";
  if (v.is_number_integer()) return format_int(v.get<int64_t>());
  if (v.is_number_float()) {
    std::string s = absl::StrFormat("%g", v.get<double>());
    return s;
  }
  if (v.is_array()) {
    std::string out;
    for (const Json& e : v) out += cat(out.empty() ? "" : ", ", e.is_string() ? e.dump() : absl::StrFormat("%g", e.get<double>()));
    return "[" + out + "]";
  }
  return v.dump();
}

}  // namespace

const std::vector<ConfigKey>& config_schema() {
  static const std::vector<ConfigKey> keys = [] {
    std::vector<ConfigKey> k = config_keys::run_config_keys();
    for (auto* more : {&config_keys::training_keys, &config_keys::zero_keys}) {
      std::vector<ConfigKey> part = more();
      k.insert(k.end(), std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
    }
    return k;
  }();
  return keys;
}

void read_declared_keys(ConfigReader& r, RunConfig& c, std::string_view section) {
  for (const ConfigKey& k : config_schema()) {
    if (k.by_code || k.section() != section) continue;
    if (k.applies && !k.applies(c)) continue;
    const std::string name = k.alias.empty() ? k.name() : r.pick(k.name(), k.alias);
    if (k.kind == KeyKind::kRefused) {
      r.refuse_unless(name, k.allowed, k.meaning);
      continue;
    }
    if (k.auto_value && r.is_auto(name)) {
      absl::StatusOr<Json> v = k.auto_value(c);
      if (!v.ok()) {
        r.error(name, cat("is \"auto\" and ", v.status().message()));
      } else {
        if (k.set) k.set(c, *v);
        r.set_derived(name, *v);
      }
      continue;
    }
    if (k.optional && r.get_raw(name).is_null()) continue;
    const Json def = k.get(c);
    Json v;
    switch (k.kind) {
      case KeyKind::kBool:
        v = r.get_bool(name, def.get<bool>());
        break;
      case KeyKind::kInt:
        v = r.get_int(name, def.is_null() ? 0 : def.get<int64_t>(), k.min_int, k.max_int);
        break;
      case KeyKind::kNumber:
        v = r.get_float(name, def.is_null() ? 0.0 : def.get<double>(), k.range);
        break;
      case KeyKind::kString:
        if (def.is_null()) {
          r.mark_known(name);  // accepted at any value
          continue;
        }
        v = r.get_string(name, def.get<std::string>());
        break;
      case KeyKind::kChoice:
        v = r.get_choice(name, def.is_null() ? std::string() : def.get<std::string>(), k.choices);
        break;
      case KeyKind::kChoiceList:
        v = r.get_choice_list(name, def.get<std::vector<std::string>>(), k.choices);
        break;
      case KeyKind::kStringList:
        v = r.get_string_list(name, def.get<std::vector<std::string>>());
        break;
      case KeyKind::kNumberList:
        v = r.get_float_list(name, def.get<std::vector<double>>(), k.list_size, k.range);
        break;
      case KeyKind::kRefused:
        break;
    }
    if (k.set) k.set(c, v);
  }
}

std::string config_key_table() {
  std::string read = "| key | type | default | accepts | meaning |\n| --- | --- | --- | --- | --- |\n";
  std::string refused = "| key | accepted only at | why |\n| --- | --- | --- |\n";
  for (const ConfigKey& k : config_schema()) {
    const std::string key = k.alias.empty() ? cat("`", k.path, "`") : cat("`", k.path, "` (or `", k.alias, "`)");
    if (k.kind == KeyKind::kRefused) {
      refused += cat("| ", key, " | `", k.allowed.is_null() ? "null" : k.allowed.dump(), "` | ",
                     escape_cell(k.meaning), " |\n");
      continue;
    }
    const std::string meaning = k.auto_shown.empty() ? k.meaning : cat(k.meaning, "; `\"auto\"`: ", k.auto_shown);
    read += cat("| ", key, " | ", kind_name(k), " | ", escape_cell(default_cell(k)), " | ", escape_cell(accepts(k)),
                " | ", escape_cell(meaning), " |\n");
  }
  return read + "\nRefused at any other value, with the reason:\n\n" + refused;
}

}  // namespace zero
