// Strict config reading; see config_reader.h.
#include "runtime/config/config_reader.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "core/status.h"
#include "core/strings.h"

namespace zero {

namespace {

std::string describe(const Json& v) {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t sub = prev[j - 1] + (std::tolower(a[i - 1]) == std::tolower(b[j - 1]) ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

Json* effective_slot(Json& root, const std::string& path) {
  Json* node = &root;
  size_t start = 0;
  for (;;) {
    const size_t dot = path.find('.', start);
    const std::string key = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (dot == std::string::npos) return &(*node)[key];
    Json& child = (*node)[key];
    if (!child.is_object()) child = Json::object();
    node = &child;
    start = dot + 1;
  }
}

}  // namespace

std::string closest_match(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const std::string& c : candidates) {
    const size_t d = edit_distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  const size_t limit = std::max<size_t>(2, word.size() / 3);
  return best_d <= limit ? best : "";
}

std::string known_synonym(std::string_view word, const std::vector<std::string>& candidates) {
  // The names Hugging Face's TrainingArguments and PyTorch give DeepSpeed's
  // keys, too far from them for an edit distance to find.
  static const std::pair<std::string_view, std::string_view> kSynonyms[] = {
      {"learning_rate", "lr"},
      {"max_grad_norm", "gradient_clipping"},
      {"per_device_train_batch_size", "train_micro_batch_size_per_gpu"},
      {"micro_batch_size", "train_micro_batch_size_per_gpu"},
      {"global_batch_size", "train_batch_size"},
      {"warmup_steps", "warmup_num_steps"},
      {"adam_epsilon", "eps"},
      {"max_steps", "steps"},
  };
  for (const auto& [from, to] : kSynonyms) {
    if (word == from && std::find(candidates.begin(), candidates.end(), to) != candidates.end()) return std::string(to);
  }
  return "";
}

namespace {

// Hugging Face TrainingArguments' names given at the top level of a
// DeepSpeed config, for settings that live in a section here: DeepSpeed
// ignores them silently, and the run trains with another value.
std::string_view key_elsewhere(std::string_view word) {
  static const std::pair<std::string_view, std::string_view> kElsewhere[] = {
      {"learning_rate", "optimizer.params.lr"},
      {"lr", "optimizer.params.lr"},
      {"weight_decay", "optimizer.params.weight_decay"},
      {"adam_beta1", "optimizer.params.betas"},
      {"adam_beta2", "optimizer.params.betas"},
      {"adam_epsilon", "optimizer.params.eps"},
      {"warmup_steps", "scheduler.params.warmup_num_steps"},
      {"max_steps", "run.steps"},
  };
  for (const auto& [from, to] : kElsewhere) {
    if (word == from) return to;
  }
  return {};
}

}  // namespace

absl::Status ConfigDiagnostics::status() const {
  if (errors.empty()) return absl::OkStatus();
  std::string msg = errors.size() == 1 ? "invalid config: " : cat("invalid config (", errors.size(), " errors):");
  for (const std::string& e : errors) msg += (errors.size() == 1 ? "" : "\n  ") + e;
  for (const std::string& w : warnings) msg += "\n  (warning) " + w;
  return absl::InvalidArgumentError(msg);
}

ConfigReader::ConfigReader(const Json* obj, std::string path, ConfigDiagnostics* diag, UnknownKeys unknown)
    : obj_(obj),
      path_(std::move(path)),
      diag_(diag),
      known_(std::make_shared<std::set<std::string>>()),
      unknown_(unknown) {}

std::string ConfigReader::key_path(std::string_view key) const {
  return path_.empty() ? std::string(key) : cat(path_, ".", key);
}

bool ConfigReader::has(std::string_view key) const {
  return obj_ != nullptr && obj_->contains(std::string(key));
}

const Json* ConfigReader::lookup(std::string_view key) {
  known_->insert(std::string(key));
  if (!has(key)) return nullptr;
  const Json& v = (*obj_)[std::string(key)];
  if (is_auto_value(v)) {
    diag_->autos.insert(key_path(key));  // the key's default, shown as derived
    return nullptr;
  }
  return &v;
}

bool ConfigReader::is_auto(std::string_view key) {
  known_->insert(std::string(key));
  return has(key) && is_auto_value((*obj_)[std::string(key)]);
}

ConfigReader ConfigReader::section(std::string_view key, UnknownKeys unknown) {
  static const Json kEmpty = Json::object();
  const Json* v = lookup(key);
  if (v == nullptr) return ConfigReader(&kEmpty, key_path(key), diag_, unknown);
  if (!v->is_object()) {
    error(key, cat("expected a section ({...}), got ", describe(*v)));
    return ConfigReader(&kEmpty, key_path(key), diag_, unknown);
  }
  return ConfigReader(v, key_path(key), diag_, unknown);
}

void ConfigReader::set_effective(std::string_view key, const Json& value) {
  *effective_slot(diag_->effective, key_path(key)) = value;
}

void ConfigReader::set_derived(std::string_view key, const Json& value) {
  set_effective(key, value);
  diag_->derived.insert(key_path(key));
}

bool NumberRange::contains(double v) const {
  return std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
}

std::string NumberRange::describe() const {
  const bool has_lo = std::isfinite(lo), has_hi = std::isfinite(hi);
  if (has_lo && has_hi) return cat(lo_open ? "(" : "[", lo, ", ", hi, hi_open ? ")" : "]");
  if (has_lo) return cat(lo_open ? "> " : ">= ", lo);
  if (has_hi) return cat(hi_open ? "< " : "<= ", hi);
  return "finite";
}

int64_t ConfigReader::get_int(std::string_view key, int64_t def, int64_t min_value, int64_t max_value) {
  int64_t out = def;
  if (const Json* v = lookup(key)) {
    auto range = [&] {
      return max_value == INT64_MAX   ? (min_value == INT64_MIN ? std::string("a 64-bit integer")
                                                                : cat(">= ", min_value, " and below 2^63"))
             : min_value == INT64_MIN ? cat("<= ", max_value)
                                      : cat("between ", min_value, " and ", max_value);
    };
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      error(key, cat(v->get<uint64_t>(), " is out of range (must be ", range(), ")"));
    } else if (v->is_number_integer()) {
      out = v->get<int64_t>();
    } else if (v->is_number_float() && std::isfinite(v->get<double>()) &&
               v->get<double>() == std::floor(v->get<double>()) && std::abs(v->get<double>()) < 9.2e18) {
      out = static_cast<int64_t>(v->get<double>());
    } else if (v->is_number_float() && v->get<double>() == std::floor(v->get<double>())) {
      error(key, cat(describe(*v), " is out of range (must be ", range(), ")"));
    } else {
      error(key, cat("expected an integer, got ", describe(*v)));
    }
    if (out < min_value || out > max_value) {
      error(key, cat(out, " is out of range (must be ", range(), ")"));
      out = def;
    }
  }
  set_effective(key, out);
  return out;
}

double ConfigReader::get_float(std::string_view key, double def, const NumberRange& range) {
  double out = def;
  if (const Json* v = lookup(key)) {
    if (!v->is_number() || v->is_boolean()) {
      error(key, cat("expected a number, got ", describe(*v)));
    } else if (!range.contains(v->get<double>())) {
      error(key, cat(describe(*v), " is out of range (must be ", range.describe(), ")"));
    } else {
      out = v->get<double>();
    }
  }
  set_effective(key, out);
  return out;
}

bool ConfigReader::get_bool(std::string_view key, bool def) {
  bool out = def;
  if (const Json* v = lookup(key)) {
    if (v->is_boolean()) out = v->get<bool>();
    else error(key, cat("expected true or false, got ", describe(*v)));
  }
  set_effective(key, out);
  return out;
}

std::string ConfigReader::get_string(std::string_view key, const std::string& def) {
  std::string out = def;
  if (const Json* v = lookup(key)) {
    if (v->is_string()) out = v->get<std::string>();
    else error(key, cat("expected a string, got ", describe(*v)));
  }
  set_effective(key, out);
  return out;
}

std::string ConfigReader::get_choice(std::string_view key, const std::string& def,
                                     std::initializer_list<std::string_view> choices) {
  return get_choice(key, def, std::vector<std::string>(choices.begin(), choices.end()));
}

std::string ConfigReader::get_choice(std::string_view key, const std::string& def,
                                     const std::vector<std::string>& choices) {
  std::string out = get_string(key, def);
  if (std::find(choices.begin(), choices.end(), out) != choices.end()) return out;
  std::string list;
  for (const std::string& c : choices) list += cat(list.empty() ? "" : ", ", "\"", c, "\"");
  error(key, cat("\"", out, "\" is not one of ", list));
  return def;
}

std::vector<std::string> ConfigReader::get_choice_list(std::string_view key, const std::vector<std::string>& def,
                                                      const std::vector<std::string>& choices) {
  std::vector<std::string> out = get_string_list(key, def);
  for (const std::string& s : out) {
    if (std::find(choices.begin(), choices.end(), s) == choices.end()) {
      std::string list;
      for (const std::string& c : choices) list += cat(list.empty() ? "" : ", ", "\"", c, "\"");
      error(key, cat("\"", s, "\" is not one of ", list));
      set_effective(key, def);
      return def;
    }
  }
  return out;
}

// The list, or `def` when absent or not a list of strings; either is the
// effective value (--print-config shows it).
std::vector<std::string> ConfigReader::get_string_list(std::string_view key, const std::vector<std::string>& def) {
  std::vector<std::string> out = def;
  if (const Json* v = lookup(key)) {
    if (!v->is_array() || !std::all_of(v->begin(), v->end(), [](const Json& e) { return e.is_string(); })) {
      error(key, cat("expected a list of strings, got ", describe(*v)));
    } else {
      out = v->get<std::vector<std::string>>();
    }
  }
  set_effective(key, out);
  return out;
}

std::vector<double> ConfigReader::get_float_list(std::string_view key, const std::vector<double>& def,
                                                 size_t expected_size, const NumberRange& range) {
  std::vector<double> out = def;
  if (const Json* v = lookup(key)) {
    bool ok = v->is_array() && v->size() == expected_size;
    if (ok) {
      out.clear();
      for (const Json& e : *v) {
        if (!e.is_number()) ok = false;
        else out.push_back(e.get<double>());
      }
    }
    if (!ok) {
      error(key, cat("expected a list of ", expected_size, " numbers, got ", describe(*v)));
      out = def;
    } else if (!std::all_of(out.begin(), out.end(), [&](double x) { return range.contains(x); })) {
      error(key, cat(describe(*v), " is out of range (each must be ", range.describe(), ")"));
      out = def;
    }
  }
  set_effective(key, out);
  return out;
}

const Json& ConfigReader::get_raw(std::string_view key) {
  static const Json kNull;
  known_->insert(std::string(key));
  return has(key) ? (*obj_)[std::string(key)] : kNull;
}

void ConfigReader::refuse_unless(std::string_view key, const Json& allowed, std::string_view why) {
  known_->insert(std::string(key));
  if (!has(key)) return;
  const Json& v = (*obj_)[std::string(key)];
  if (v == allowed || (v.is_string() && v.get<std::string>() == "auto")) return;
  error(key, cat(describe(v), " is not supported (", why, ")"));
}

void ConfigReader::mark_known(std::string_view key) { known_->insert(std::string(key)); }

std::string ConfigReader::pick(std::string_view name, std::string_view alias) {
  mark_known(name);
  mark_known(alias);
  if (has(name) && has(alias)) {
    error(alias, cat("is the same setting as \"", key_path(name), "\"; give only one of them"));
  }
  return std::string(has(alias) ? alias : name);
}

bool ConfigReader::deprecated(std::string_view old_key, std::string_view replacement,
                              bool replacement_present) {
  mark_known(old_key);
  if (!has(old_key)) return false;
  if (replacement_present) {
    error(old_key, cat("is deprecated and replaced by \"", key_path(replacement),
                       "\"; the config gives both, remove \"", old_key, "\""));
    return false;
  }
  warn(old_key, cat("is deprecated; treated as \"", key_path(replacement), "\" (as DeepSpeed does)"));
  return true;
}

void ConfigReader::error(std::string_view key, std::string_view message) {
  diag_->errors.push_back(cat(key_path(key), ": ", message));
}

void ConfigReader::warn(std::string_view key, std::string_view message) {
  diag_->warnings.push_back(cat(key_path(key), ": ", message));
}

void ConfigReader::finish() {
  if (obj_ == nullptr) return;
  const std::vector<std::string> known(known_->begin(), known_->end());
  for (auto it = obj_->begin(); it != obj_->end(); ++it) {
    if (known_->count(it.key())) continue;
    if (path_.empty() && it.key() == kDerivedKeysKey) continue;  // --print-config's list, read back
    std::string suggestion = known_synonym(it.key(), known);
    if (suggestion.empty()) suggestion = closest_match(it.key(), known);
    if (!suggestion.empty()) suggestion = key_path(suggestion);
    if (suggestion.empty() && path_.empty()) suggestion = std::string(key_elsewhere(it.key()));
    std::string msg = cat("unknown key \"", key_path(it.key()), "\"");
    if (suggestion.empty() && unknown_ == UnknownKeys::kWarnUnlessNearMiss) {
      diag_->warnings.push_back(cat(msg, " ignored (DeepSpeed ignores unknown keys ",
                                    path_.empty() ? "at the top level" : cat("in \"", path_, "\""), ")"));
      continue;
    }
    if (!suggestion.empty()) msg += cat(" (did you mean \"", suggestion, "\"?)");
    if (diag_->allow_unknown_keys) {
      diag_->warnings.push_back(msg + "; ignored because of --allow-unknown-keys");
    } else if (unknown_ == UnknownKeys::kWarnUnlessNearMiss) {
      // DeepSpeed would ignore it; a near miss is a typo until the user says otherwise.
      diag_->errors.push_back(msg + "; fix it, or pass --allow-unknown-keys to ignore it as DeepSpeed would");
    } else {
      diag_->errors.push_back(msg);
    }
  }
}

// ---- Layered configs: where each key came from.

namespace {

bool is_below(std::string_view path, std::string_view ancestor) {
  return path.size() > ancestor.size() && path.compare(0, ancestor.size(), ancestor) == 0 &&
         path[ancestor.size()] == '.';
}

void record_leaves(const Json& j, const std::string& path, const std::string& source,
                   const std::function<void(const std::string&, const std::string&)>& leaf) {
  if (!j.is_object()) {
    leaf(path, source);
    return;
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    record_leaves(it.value(), path.empty() ? it.key() : cat(path, ".", it.key()), source, leaf);
  }
}

}  // namespace

void ConfigSources::record_leaf(const std::string& path, const std::string& source) {
  // The value replaces whatever was at `path` or below it, and a non-object
  // above it (merge_json and apply_override replace those too).
  for (auto it = leaves_.lower_bound(path); it != leaves_.end() && (it->first == path || is_below(it->first, path));) {
    it = leaves_.erase(it);
  }
  for (size_t dot = path.find('.'); dot != std::string::npos; dot = path.find('.', dot + 1)) {
    leaves_.erase(path.substr(0, dot));
  }
  leaves_[path] = source;
}

void ConfigSources::record_layer(const Json& layer, const std::string& source,
                                 const std::vector<std::string>& auto_filled) {
  ++layers_;
  auto_filled_.insert(auto_filled.begin(), auto_filled.end());
  record_leaves(layer, "", source, [&](const std::string& p, const std::string& s) {
    if (std::find(auto_filled.begin(), auto_filled.end(), p) == auto_filled.end()) record_leaf(p, s);
  });
}

void ConfigSources::record_override(std::string_view key_path, const std::string& source) {
  ++layers_;
  record_leaf(std::string(key_path), source);
}

std::string ConfigSources::source_of(std::string_view key_path) const {
  const std::string path(key_path);
  // The key itself, or the nearest key above it that holds a whole value.
  for (std::string p = path;;) {
    if (auto it = leaves_.find(p); it != leaves_.end()) return it->second;
    const size_t dot = p.rfind('.');
    if (dot == std::string::npos) break;
    p.resize(dot);
  }
  // A section: the source of every key below it, when they share one.
  std::string source;
  for (auto it = leaves_.lower_bound(path); it != leaves_.end() && is_below(it->first, path); ++it) {
    if (!source.empty() && source != it->second) return "";
    source = it->second;
  }
  return source;
}

std::string ConfigSources::annotate(std::string_view message) const {
  std::string path;
  constexpr std::string_view kUnknown = "unknown key \"";
  if (message.substr(0, kUnknown.size()) == kUnknown) {
    const size_t end = message.find('"', kUnknown.size());
    if (end != std::string_view::npos) path = std::string(message.substr(kUnknown.size(), end - kUnknown.size()));
  } else if (const size_t colon = message.find(": "); colon != std::string_view::npos) {
    path = std::string(message.substr(0, colon));
    if (path.find_first_of(" \"'") != std::string::npos) path.clear();  // not a key path
  }
  const std::string source = path.empty() ? "" : source_of(path);
  return source.empty() ? std::string(message) : cat(source, ": ", message);
}

absl::Status ConfigSources::annotate(const absl::Status& s) const {
  if (s.ok() || !layered()) return s;
  // ConfigDiagnostics::status(): "invalid config: E" or "invalid config (N errors):\n  E\n  (warning) W".
  const std::string msg(s.message());
  std::string out;
  size_t start = 0;
  for (bool first = true; start <= msg.size(); first = false) {
    size_t end = msg.find('\n', start);
    if (end == std::string::npos) end = msg.size();
    const std::string_view line = std::string_view(msg).substr(start, end - start);
    size_t body = 0;
    for (std::string_view prefix : {"invalid config: ", "  (warning) ", "  "}) {
      if (line.substr(0, prefix.size()) == prefix && (prefix != "invalid config: " || first)) {
        body = prefix.size();
        break;
      }
    }
    if (!first) out += "\n";
    out += cat(line.substr(0, body), annotate(line.substr(body)));
    start = end + 1;
  }
  return absl::Status(s.code(), out);
}

absl::StatusOr<Json> load_layered_config(const std::vector<std::string>& files,
                                         const std::vector<ConfigOverride>& overrides, ConfigSources* sources) {
  if (files.empty()) return absl::InvalidArgumentError("no config given: pass --config FILE");
  Json merged = Json::object();
  for (const std::string& f : files) {
    ZE_ASSIGN_OR_RETURN(Json j, load_json_file(f));
    std::vector<std::string> auto_filled;
    merge_json(merged, j, &auto_filled);
    if (sources != nullptr) sources->record_layer(j, f, auto_filled);
  }
  for (const ConfigOverride& o : overrides) {
    ZE_RETURN_IF_ERROR(apply_override(merged, o.assignment));
    if (sources != nullptr) sources->record_override(o.assignment.substr(0, o.assignment.find('=')), o.source);
  }
  return merged;
}

}  // namespace zero
