// Strict config reading; see config_reader.h.
#include "runtime/config/config_reader.h"

#include <algorithm>
#include <cmath>

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
  if (v.is_string() && v.get<std::string>() == "auto") return nullptr;  // DeepSpeed: "auto" = default
  return &v;
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
    const std::string suggestion = closest_match(it.key(), known);
    std::string msg = cat("unknown key \"", key_path(it.key()), "\"");
    if (suggestion.empty() && unknown_ == UnknownKeys::kWarnUnlessNearMiss) {
      diag_->warnings.push_back(cat(msg, " ignored (DeepSpeed ignores unknown keys ",
                                    path_.empty() ? "at the top level" : cat("in \"", path_, "\""), ")"));
      continue;
    }
    if (!suggestion.empty()) msg += cat(" (did you mean \"", key_path(suggestion), "\"?)");
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

}  // namespace zero
