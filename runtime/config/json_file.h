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

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace zero {

using Json = nlohmann::ordered_json;  // keeps the user's key order in --print-config

// A DeepSpeed config nests 4 levels at most; this leaves room for any real one.
inline constexpr int kMaxJsonDepth = 64;

absl::StatusOr<Json> load_json_file(const std::string& path);
absl::StatusOr<Json> parse_json_text(std::string_view text, std::string_view source_name);

// Deep merge: keys of `overlay` replace or extend those of `base`.
void merge_json(Json& base, const Json& overlay);

// Applies "a.b.c=value" to `config`, creating objects along the path.
absl::Status apply_override(Json& config, std::string_view assignment);

}  // namespace zero
