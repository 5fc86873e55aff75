// Every config key zero-train understands, declared once: its path, type,
// default, bounds (or choices), one-line meaning, and the field of RunConfig
// it sets. The parser reads each section through these declarations
// (read_declared_keys: type, bounds and choices checked, the effective value
// recorded for --print-config), the section code after it applies only the
// rules that join several keys, and the README's key table is printed from
// them (config_key_table, checked against the README by
// tests/runtime/config_schema_test.cc). The declarations live beside their
// sections' rules (run_config.cc, data_section.cc,
// deepspeed_training_sections.cc, deepspeed_zero_sections.cc), written with config_key_builders.h.
//
// A key DeepSpeed defines but ZeroEngine does not implement is declared as
// refused: it is accepted at its one harmless value and refused at any other
// with its reason. A key accepted without effect (a torch implementation
// choice, say) is declared with no field. The few keys whose form no
// declaration expresses (the batch-size triple, run.resume's "auto",
// optimizer.type's case rules, the deprecated aliases) are declared for the
// table and read by their section's code (`by_code`).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/config/config_reader.h"
#include "runtime/config/run_config.h"

namespace zero {

enum class KeyKind { kBool, kInt, kNumber, kString, kChoice, kChoiceList, kStringList, kNumberList, kRefused };

struct ConfigKey {
  std::string path;   // "zero_optimization.reduce_bucket_size"
  std::string alias;  // a second name for it in the same section ("stage3_prefetch_bucket_size"), or ""
  KeyKind kind = KeyKind::kBool;
  int64_t min_int = INT64_MIN, max_int = INT64_MAX;  // kInt
  NumberRange range;                                 // kNumber, and each element of kNumberList
  size_t list_size = 0;                              // kNumberList
  std::vector<std::string> choices;                  // kChoice, and each element of kChoiceList
  Json allowed;                                      // kRefused: the one value accepted
  std::string meaning;                               // one line; for kRefused, why it is refused
  std::string shown_default;                         // the README's default when not get()'s value
  bool optional = false;  // read only when given (and not null): absent leaves the field unset
  bool by_code = false;   // declared here, read by its section's code
  // Read only when this holds for the keys read before it (SGD's params,
  // one schedule's params); elsewhere the key is unknown.
  std::function<bool(const RunConfig&)> applies;
  // The value in effect (on a fresh RunConfig: the default) as JSON; null when unset.
  std::function<Json(RunConfig&)> get;
  // Stores a value read and checked; absent for keys accepted without effect.
  std::function<void(RunConfig&, const Json&)> set;
  // What "auto" becomes when no earlier config layer gave the key a value:
  // the Hugging Face Trainer's fill-in, from the keys read before it, or an
  // error saying why nothing fills it in. Unset: the key's default.
  std::function<absl::StatusOr<Json>(const RunConfig&)> auto_value;
  std::string auto_shown;  // the README's words for it ("the optimizer's lr")

  std::string section() const;  // the path up to its last dot ("" at the top)
  std::string name() const;     // the last part of the path

  // Builder helpers for the declarations.
  ConfigKey also(std::string a) const;
  ConfigKey when(std::function<bool(const RunConfig&)> f) const;
  ConfigKey shown(std::string text) const;
  ConfigKey read_by_code() const;
  ConfigKey on_auto(std::string shown, std::function<absl::StatusOr<Json>(const RunConfig&)> f) const;
};

// Every declared key, in the README table's order.
const std::vector<ConfigKey>& config_schema();

// Reads every declared key of the section `r` is at (as `section`, when the
// config spells the section another way: DeepSpeed's legacy "bfloat16") into
// `config`, in declaration order.
void read_declared_keys(ConfigReader& r, RunConfig& config, std::string_view section);
inline void read_declared_keys(ConfigReader& r, RunConfig& config) { read_declared_keys(r, config, r.path()); }

// The README's tables of keys (Markdown): the keys read, then the keys refused.
std::string config_key_table();

}  // namespace zero
