// JSON config files; see json_file.h.
#include "runtime/config/json_file.h"

#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "runtime/base/strings.h"

namespace zero {

namespace {

// Line and column (1-based) of a byte offset, and the text of that line.
void locate(std::string_view text, size_t offset, size_t& line, size_t& col, std::string& line_text) {
  line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  col = offset - line_start + 1;
  size_t end = text.find('\n', line_start);
  line_text = std::string(text.substr(line_start, end == std::string_view::npos ? text.size() - line_start
                                                                               : end - line_start));
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
  DuplicateKeyChecker checker;
  Json j;
  try {
    j = Json::parse(text.begin(), text.end(),
                    [&](int depth, Json::parse_event_t event, Json& parsed) {
                      return checker(depth, event, parsed);
                    },
                    /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const Json::parse_error& e) {
    size_t line = 0, col = 0;
    std::string line_text;
    const size_t at = e.byte == 0 ? 0 : e.byte - 1;
    locate(text, at, line, col, line_text);
    std::string what = e.what();
    const size_t pos = what.find("syntax error");
    if (pos != std::string::npos) what = what.substr(pos);
    return absl::InvalidArgumentError(cat(source_name, ":", line, ":", col, ": invalid JSON (", what,
                                          ")\n    ", line_text, "\n    ", std::string(col > 0 ? col - 1 : 0, ' '), "^"));
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

void merge_json(Json& base, const Json& overlay) {
  for (auto it = overlay.begin(); it != overlay.end(); ++it) {
    if (it.value().is_object() && base.contains(it.key()) && base[it.key()].is_object()) {
      merge_json(base[it.key()], it.value());
    } else {
      base[it.key()] = it.value();
    }
  }
}

absl::Status apply_override(Json& config, std::string_view assignment) {
  const size_t eq = assignment.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    return absl::InvalidArgumentError(
        cat("--set ", assignment, ": expected key.path=value, e.g. --set optimizer.params.lr=3e-4"));
  }
  const std::string_view path = assignment.substr(0, eq);
  const std::string_view raw = assignment.substr(eq + 1);
  Json value;
  try {
    value = Json::parse(raw.begin(), raw.end());
  } catch (const Json::parse_error&) {
    value = std::string(raw);  // a bare word: a string
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
