// JSON config files; see json_file.h.
#include "runtime/config/json_file.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "core/strings.h"

namespace zero {

namespace {

// Where a byte offset is, for a message: "line:col" (1-based) and that line
// (a window of at most 60 characters either side, marked where cut) with a
// caret under the offset.
std::string locate(std::string_view text, size_t offset) {
  size_t line = 1, line_start = 0;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  size_t end = text.find('\n', line_start);
  if (end == std::string_view::npos) end = text.size();
  constexpr size_t kSide = 60;
  const size_t from = offset > line_start + kSide ? offset - kSide : line_start;
  const size_t to = std::min(end, offset + kSide);
  const std::string shown = cat(from > line_start ? "..." : "", text.substr(from, to - from), to < end ? "..." : "");
  const size_t caret = offset - from + (from > line_start ? 3 : 0);
  return cat(line, ":", offset - line_start + 1, ":\n    ", shown, "\n    ", std::string(caret, ' '), "^");
}

// The first place where objects/arrays nest deeper than kMaxJsonDepth
// (outside strings and comments), or npos.
size_t too_deep_at(std::string_view text) {
  int depth = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"') {
      for (++i; i < text.size() && text[i] != '"'; ++i)
        if (text[i] == '\\') ++i;
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      i = text.find('\n', i);
      if (i == std::string_view::npos) return std::string_view::npos;
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '*') {
      i = text.find("*/", i + 2);
      if (i == std::string_view::npos) return std::string_view::npos;
      ++i;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxJsonDepth) return i;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return std::string_view::npos;
}

// Rejects duplicate keys while parsing (the default parser keeps the last).
struct DuplicateKeyChecker {
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  bool operator()(int depth, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
        open_objects.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        open_objects.pop_back();
        break;
      case Json::parse_event_t::key: {
        const std::string key = parsed.get<std::string>();
        if (!open_objects.back().insert(key).second && duplicate.empty()) duplicate = key;
        break;
      }
      default:
        break;
    }
    return true;
  }
};

}  // namespace

absl::StatusOr<Json> parse_json_text(std::string_view text, std::string_view source_name) {
  if (const size_t deep = too_deep_at(text); deep != std::string_view::npos) {
    const std::string where = locate(text, deep);
    const size_t colon = where.find(":\n");
    return absl::InvalidArgumentError(cat(source_name, ":", where.substr(0, colon), ": nested more than ",
                                          kMaxJsonDepth, " levels deep (a config nests a few levels)",
                                          where.substr(colon + 1)));
  }
  DuplicateKeyChecker checker;
  Json j;
  try {
    j = Json::parse(text.begin(), text.end(),
                    [&](int depth, Json::parse_event_t event, Json& parsed) {
                      return checker(depth, event, parsed);
                    },
                    /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const Json::parse_error& e) {
    const std::string where = locate(text, e.byte == 0 ? 0 : e.byte - 1);
    const size_t colon = where.find(":\n");
    std::string what = e.what();
    const size_t pos = what.find("syntax error");
    if (pos != std::string::npos) what = what.substr(pos);
    return absl::InvalidArgumentError(
        cat(source_name, ":", where.substr(0, colon), ": invalid JSON (", what, ")", where.substr(colon + 1)));
  } catch (const Json::exception& e) {
    // out_of_range: a number no double holds (1e999).
    std::string what = e.what();
    const size_t pos = what.find("] ");
    if (pos != std::string::npos) what = what.substr(pos + 2);
    return absl::InvalidArgumentError(cat(source_name, ": ", what, " (numbers must fit a double)"));
  }
  if (!checker.duplicate.empty()) {
    return absl::InvalidArgumentError(
        cat(source_name, ": duplicate key \"", checker.duplicate, "\" (each key may appear once per object)"));
  }
  if (!j.is_object()) {
    return absl::InvalidArgumentError(cat(source_name, ": the config must be a JSON object ({...}), not ",
                                          j.type_name()));
  }
  return j;
}

absl::StatusOr<Json> load_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(cat("config file ", path, ": cannot open (does it exist?)"));
  std::stringstream buf;
  buf << in.rdbuf();
  return parse_json_text(buf.str(), path);
}

const Json& json_at_path(const Json& j, std::string_view path) {
  static const Json kNull;
  const Json* node = &j;
  while (!path.empty()) {
    const size_t dot = path.find('.');
    const std::string key(path.substr(0, dot));
    if (!node->is_object() || !node->contains(key)) return kNull;
    node = &(*node)[key];
    path = dot == std::string_view::npos ? std::string_view() : path.substr(dot + 1);
  }
  return *node;
}

bool is_auto_value(const Json& v) { return v.is_string() && v.get_ref<const std::string&>() == "auto"; }

namespace {

void merge_at(Json& base, const Json& overlay, const std::string& path, std::vector<std::string>* auto_filled) {
  for (auto it = overlay.begin(); it != overlay.end(); ++it) {
    const std::string key_path = path.empty() ? it.key() : cat(path, ".", it.key());
    const bool present = base.contains(it.key());
    if (it.value().is_object() && present && base[it.key()].is_object()) {
      merge_at(base[it.key()], it.value(), key_path, auto_filled);
    } else if (is_auto_value(it.value()) && present && !base[it.key()].is_null() && !is_auto_value(base[it.key()])) {
      if (auto_filled != nullptr) auto_filled->push_back(key_path);
    } else {
      base[it.key()] = it.value();
    }
  }
}

}  // namespace

void merge_json(Json& base, const Json& overlay, std::vector<std::string>* auto_filled) {
  merge_at(base, overlay, "", auto_filled);
}

absl::Status apply_override(Json& config, std::string_view assignment) {
  const size_t eq = assignment.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    return absl::InvalidArgumentError(
        cat("--set ", assignment, ": expected key.path=value, e.g. --set optimizer.params.lr=3e-4"));
  }
  const std::string_view path = assignment.substr(0, eq);
  const std::string_view raw = assignment.substr(eq + 1);
  if (std::count(path.begin(), path.end(), '.') >= kMaxJsonDepth) {
    return absl::InvalidArgumentError(cat("--set: the key path is more than ", kMaxJsonDepth, " levels deep"));
  }
  Json value;
  if (too_deep_at(raw) != std::string_view::npos) {
    return absl::InvalidArgumentError(cat("--set ", path, ": the value nests more than ", kMaxJsonDepth, " levels deep"));
  }
  try {
    value = Json::parse(raw.begin(), raw.end());
  } catch (const Json::exception&) {
    value = std::string(raw);  // a bare word (or a number no double holds): a string
  }
  Json* node = &config;
  size_t start = 0;
  for (;;) {
    const size_t dot = path.find('.', start);
    const std::string key(path.substr(start, dot == std::string_view::npos ? path.size() - start : dot - start));
    if (key.empty()) return absl::InvalidArgumentError(cat("--set ", assignment, ": empty key in the path"));
    if (dot == std::string_view::npos) {
      (*node)[key] = value;
      return absl::OkStatus();
    }
    Json& child = (*node)[key];
    if (child.is_null()) child = Json::object();
    if (!child.is_object()) {
      return absl::InvalidArgumentError(
          cat("--set ", assignment, ": ", path.substr(0, dot), " is a ", child.type_name(), ", not a section"));
    }
    node = &child;
    start = dot + 1;
  }
}

}  // namespace zero
