// Typed, strict reading of a JSON config, one section at a time.
//
// A ConfigReader is a view of one JSON object (a section) at a key path. Every
// get_*() names a key the program understands, returns its value or the
// default, and records the effective value (for --print-config). finish()
// then reports every key of the section that nothing asked for, with a
// did-you-mean among the keys that were asked for. Errors and warnings
// accumulate in ConfigDiagnostics, so one run reports all of them, each
// naming the full key path, the value and what is expected.
//
// DeepSpeed conventions kept here: integer keys accept integral floats such
// as 1e9 but not 1.5. A value of exactly "auto" is what the Hugging Face
// Trainer would fill in: the value an earlier config layer gave the key
// (merge_json keeps it), else the key's own rule (ConfigKey::auto_value:
// the optimizer's lr for a warm-up's peak, run.steps for a schedule's
// length, the hidden size for ZeRO-3's buckets), else the key's default.
// Every key that was "auto" is listed as derived by --print-config.
//
// Unknown keys follow DeepSpeed's strictness per section. Where DeepSpeed
// forbids them (its pydantic sections: zero_optimization, offload_*, fp16,
// bf16, ...; and ZeroEngine's own model, data, run) an unknown key is an
// error. Where DeepSpeed ignores them (the top level and its dict-read
// sections: aio, activation_checkpointing, checkpoint, ...) a key that is a
// near miss of a known one is still an error (a typo would otherwise do
// nothing), and any other is a warning naming it. --allow-unknown-keys turns
// every unknown-key error into a warning.
#pragma once

#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/config/json_file.h"

namespace zero {

// The top-level key under which --print-config lists the keys whose values
// the program derived; ignored when read back as a config.
inline constexpr std::string_view kDerivedKeysKey = "__derived__";

struct ConfigDiagnostics {
  std::vector<std::string> errors;
  std::vector<std::string> warnings;
  bool allow_unknown_keys = false;  // unknown keys become warnings
  Json effective = Json::object();  // every key read, with the value in effect
  std::set<std::string> derived;    // paths whose value the program derived
  std::set<std::string> autos;      // paths given as "auto" (shown as derived once read)

  // OK, or INVALID_ARGUMENT listing every error.
  absl::Status status() const;
};

// The values a numeric key accepts: [lo, hi], either end open. Every number
// must also be finite.
struct NumberRange {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;

  static NumberRange at_least(double lo) { return {lo, std::numeric_limits<double>::infinity(), false, false}; }
  static NumberRange above(double lo) { return {lo, std::numeric_limits<double>::infinity(), true, false}; }
  static NumberRange between(double lo, double hi) { return {lo, hi, false, false}; }
  static NumberRange unit_open() { return {0.0, 1.0, false, true}; }  // [0, 1): a probability of keeping, a beta
  bool contains(double v) const;
  std::string describe() const;  // "[0, 1)", ">= 0", "> 0"
};

// How a section treats keys nothing asked for (see above).
enum class UnknownKeys {
  kError,                 // DeepSpeed forbids extra fields here
  kWarnUnlessNearMiss,    // DeepSpeed ignores them here
};

class ConfigReader {
 public:
  ConfigReader(const Json& root, ConfigDiagnostics& diag) : ConfigReader(&root, "", &diag) {}

  // A nested section; an absent key reads as an empty section.
  ConfigReader section(std::string_view key, UnknownKeys unknown = UnknownKeys::kError);
  // How this section treats unknown keys (the root's is set by its owner).
  void set_unknown_keys(UnknownKeys unknown) { unknown_ = unknown; }
  bool has(std::string_view key) const;
  // The key is present with the value "auto" (marks it as known).
  bool is_auto(std::string_view key);
  const std::string& path() const { return path_; }
  std::string key_path(std::string_view key) const;
  ConfigDiagnostics& diagnostics() { return *diag_; }

  // An integer in [min_value, max_value]; integers past int64 are out of range.
  int64_t get_int(std::string_view key, int64_t def, int64_t min_value = INT64_MIN, int64_t max_value = INT64_MAX);
  // A finite number in `range`.
  double get_float(std::string_view key, double def, const NumberRange& range = {});
  bool get_bool(std::string_view key, bool def);
  std::string get_string(std::string_view key, const std::string& def);
  // A string from a fixed set; the error lists the choices.
  std::string get_choice(std::string_view key, const std::string& def,
                         std::initializer_list<std::string_view> choices);
  std::string get_choice(std::string_view key, const std::string& def, const std::vector<std::string>& choices);
  // A list of strings, each from a fixed set (any length; duplicates kept).
  std::vector<std::string> get_choice_list(std::string_view key, const std::vector<std::string>& def,
                                           const std::vector<std::string>& choices);
  // A list of strings, any (any length; duplicates kept).
  std::vector<std::string> get_string_list(std::string_view key, const std::vector<std::string>& def);
  std::vector<double> get_float_list(std::string_view key, const std::vector<double>& def,
                                     size_t expected_size, const NumberRange& range = {});
  // The raw value (null when absent), marking the key as known.
  const Json& get_raw(std::string_view key);

  // A key we know but do not support unless it has `allowed` (its disabled
  // default): any other value is an error "<path>: <value> is not supported (<why>)".
  void refuse_unless(std::string_view key, const Json& allowed, std::string_view why);
  // Marks key as understood without reading it (read elsewhere).
  void mark_known(std::string_view key);

  // DeepSpeed accepts some keys under two names (a field and its alias, e.g.
  // prefetch_bucket_size / stage3_prefetch_bucket_size). Returns the one the
  // config uses (or `name`); both present is an error.
  std::string pick(std::string_view name, std::string_view alias);
  // A deprecated key: when present, warns that it maps to `replacement` and
  // returns true; present together with the replacement is an error.
  bool deprecated(std::string_view old_key, std::string_view replacement, bool replacement_present);

  void error(std::string_view key, std::string_view message);
  void warn(std::string_view key, std::string_view message);
  // Records a value the program derived (shown as derived by --print-config).
  void set_derived(std::string_view key, const Json& value);
  void set_effective(std::string_view key, const Json& value);

  // Reports unknown keys of this section (with did-you-mean).
  void finish();

 private:
  ConfigReader(const Json* obj, std::string path, ConfigDiagnostics* diag, UnknownKeys unknown = UnknownKeys::kError);
  // The value at key, or nullptr when absent or "auto".
  const Json* lookup(std::string_view key);

  const Json* obj_;
  std::string path_;
  ConfigDiagnostics* diag_;
  std::shared_ptr<std::set<std::string>> known_;
  UnknownKeys unknown_;
};

// The closest of `candidates` to `word` by edit distance, or "" when none is close.
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);
// The candidate that is another framework's name for `word` (learning_rate:
// lr, max_grad_norm: gradient_clipping), or "".
std::string known_synonym(std::string_view word, const std::vector<std::string>& candidates);

// Where each key of a layered config came from: the file that set it last,
// or the command-line option ("--set", "--steps", ...) that overrode it. With
// several layers, an error about a key names its source
// ("b.json: zero_optimization.stage: 7 is out of range ...").
class ConfigSources {
 public:
  // Every leaf of `layer` (merged over the earlier ones by merge_json) comes
  // from `source`, but for the "auto" leaves an earlier layer filled in
  // (`auto_filled`, merge_json's list), which keep their source.
  void record_layer(const Json& layer, const std::string& source, const std::vector<std::string>& auto_filled = {});
  // The value at `key_path` ("a.b.c") was replaced by an override from `source`.
  void record_override(std::string_view key_path, const std::string& source);
  // The source of the key, of the nearest key above it that a layer set as a
  // whole, or of every key below it when they share one; "" when unknown.
  std::string source_of(std::string_view key_path) const;
  // More than one layer: only then do messages name sources.
  bool layered() const { return layers_ > 1; }
  // The key paths a layer gave as "auto" that an earlier layer had set.
  const std::set<std::string>& auto_filled() const { return auto_filled_; }
  // "<source>: <message>" when the message is about a key (it starts with
  // the key path, or says unknown key "<path>") whose source is known.
  std::string annotate(std::string_view message) const;
  // Every line of a config error annotated (see annotate); `s` unchanged
  // when not layered.
  absl::Status annotate(const absl::Status& s) const;

 private:
  void record_leaf(const std::string& path, const std::string& source);

  std::map<std::string, std::string> leaves_;  // key path -> source
  std::set<std::string> auto_filled_;
  int layers_ = 0;
};

// One --set-style override and the option that gave it, for error messages.
struct ConfigOverride {
  std::string assignment;  // "key.path=value"
  std::string source = "--set";
};

// Loads and merges the files in order, then applies the overrides in order
// (all files first, as zero-train always has); `sources`, when given, learns
// where each key came from.
absl::StatusOr<Json> load_layered_config(const std::vector<std::string>& files,
                                         const std::vector<ConfigOverride>& overrides,
                                         ConfigSources* sources = nullptr);

}  // namespace zero
