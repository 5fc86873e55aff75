// Reading and combining JSON config files.
//  * Comments (// and /* */) are accepted, as DeepSpeed's hjson loader does.
//  * Duplicate keys in one object are an error (as in DeepSpeed).
//  * Parse errors name the file, line and column and quote the line (a window
//    of it around the column: a one-line file may be megabytes long).
//  * Objects and arrays nest at most kMaxJsonDepth deep (checked before
//    parsing, so a hostile file cannot exhaust the stack); a number too large
//    for a double is an error naming it.
//  * Several files merge in order, later ones overriding earlier ones key by
//    key (objects merge recursively; anything else is replaced).
//  * `key.path=value` overrides one key; the value is read as JSON when it
//    parses (numbers, true/false, objects, quoted strings), else as a string.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace zero {

using Json = nlohmann::ordered_json;  // keeps the user's key order in --print-config

// A DeepSpeed config nests 4 levels at most; this leaves room for any real one.
inline constexpr int kMaxJsonDepth = 64;

absl::StatusOr<Json> load_json_file(const std::string& path);
absl::StatusOr<Json> parse_json_text(std::string_view text, std::string_view source_name);

// Deep merge: keys of `overlay` replace or extend those of `base`, except
// that a value of exactly "auto" (the Hugging Face Trainer's "fill this in")
// does not replace a value `base` already has: the earlier layer's value is
// what it asks for. The paths where that happened ("optimizer.params.lr") are
// appended to `auto_filled` when given.
void merge_json(Json& base, const Json& overlay, std::vector<std::string>* auto_filled = nullptr);

// The value at a dotted path ("a.b.c"), or null when any part is absent.
const Json& json_at_path(const Json& j, std::string_view path);

// True for the string "auto".
bool is_auto_value(const Json& v);

// Applies "a.b.c=value" to `config`, creating objects along the path.
absl::Status apply_override(Json& config, std::string_view assignment);

}  // namespace zero
