// How config keys are declared (runtime/config/config_schema.h): one
// builder per kind, each binding a key to a field of RunConfig. Included only
// by the files that declare keys (run_config.cc, data_section.cc and the
// deepspeed_*_sections.cc files, each beside the rules of its sections).
#pragma once

#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "runtime/config/config_schema.h"

namespace zero::config_keys {

// A field of RunConfig: ZE_FIELD(engine.zero.stage).
#define ZE_FIELD(member) [](RunConfig& c) -> auto& { return c.member; }

template <typename Ref>
using FieldType = std::remove_reference_t<std::invoke_result_t<Ref, RunConfig&>>;

// A float field's value as the double it was written as: the shortest
// decimal that rounds to it (0.999f shows as 0.999, not 0.99900001).
inline double as_double(float f) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof(buf), f);
  return std::strtod(std::string(buf, r.ptr).c_str(), nullptr);
}
inline double as_double(double d) { return d; }

inline ConfigKey base(std::string path, KeyKind kind, std::string meaning) {
  ConfigKey k;
  k.path = std::move(path);
  k.kind = kind;
  k.meaning = std::move(meaning);
  return k;
}

template <typename Ref>
ConfigKey boolean(std::string path, Ref ref, std::string meaning) {
  ConfigKey k = base(std::move(path), KeyKind::kBool, std::move(meaning));
  k.get = [ref](RunConfig& c) { return Json(static_cast<bool>(ref(c))); };
  k.set = [ref](RunConfig& c, const Json& v) { ref(c) = v.get<bool>(); };
  return k;
}

// Integers (int, int64_t, uint64_t fields; std::optional<int64_t> with `optional`).
template <typename Ref>
ConfigKey integer(std::string path, Ref ref, int64_t lo, int64_t hi, std::string meaning) {
  ConfigKey k = base(std::move(path), KeyKind::kInt, std::move(meaning));
  k.min_int = lo;
  k.max_int = hi;
  using T = FieldType<Ref>;
  if constexpr (std::is_same_v<T, std::optional<int64_t>>) {
    k.optional = true;
    k.get = [ref](RunConfig& c) { return ref(c) ? Json(*ref(c)) : Json(); };
    k.set = [ref](RunConfig& c, const Json& v) { ref(c) = v.get<int64_t>(); };
  } else {
    k.get = [ref](RunConfig& c) { return Json(static_cast<int64_t>(ref(c))); };
    k.set = [ref](RunConfig& c, const Json& v) { ref(c) = static_cast<T>(v.get<int64_t>()); };
  }
  return k;
}

// Numbers (float, double fields; std::optional<double> with `optional`).
template <typename Ref>
ConfigKey number(std::string path, Ref ref, NumberRange range, std::string meaning) {
  ConfigKey k = base(std::move(path), KeyKind::kNumber, std::move(meaning));
  k.range = range;
  using T = FieldType<Ref>;
  if constexpr (std::is_same_v<T, std::optional<double>>) {
    k.optional = true;
    k.get = [ref](RunConfig& c) { return ref(c) ? Json(*ref(c)) : Json(); };
    k.set = [ref](RunConfig& c, const Json& v) { ref(c) = v.get<double>(); };
  } else {
    k.get = [ref](RunConfig& c) { return Json(as_double(ref(c))); };
    k.set = [ref](RunConfig& c, const Json& v) { ref(c) = static_cast<T>(v.get<double>()); };
  }
  return k;
}

template <typename Ref>
ConfigKey text(std::string path, Ref ref, std::string meaning) {
  ConfigKey k = base(std::move(path), KeyKind::kString, std::move(meaning));
  k.get = [ref](RunConfig& c) { return Json(ref(c)); };
  k.set = [ref](RunConfig& c, const Json& v) { ref(c) = v.get<std::string>(); };
  return k;
}

// One of `values` (name, value); a string field takes the name itself.
template <typename Ref, typename E = FieldType<Ref>>
ConfigKey choice(std::string path, Ref ref, std::vector<std::pair<std::string, E>> values, std::string meaning) {
  ConfigKey k = base(std::move(path), KeyKind::kChoice, std::move(meaning));
  for (const auto& [name, value] : values) k.choices.push_back(name);
  k.get = [ref, values](RunConfig& c) {
    for (const auto& [name, value] : values) {
      if (ref(c) == value) return Json(name);
    }
    return Json();
  };
  k.set = [ref, values](RunConfig& c, const Json& v) {
    for (const auto& [name, value] : values) {
      if (v.get<std::string>() == name) ref(c) = value;
    }
  };
  return k;
}

// One of `values`, each called by the enum's own name function.
template <typename Ref, typename E = FieldType<Ref>, typename NameFn>
ConfigKey enum_choice(std::string path, Ref ref, std::vector<E> values, NameFn name, std::string meaning) {
  std::vector<std::pair<std::string, E>> named;
  for (E v : values) named.emplace_back(std::string(name(v)), v);
  return choice(std::move(path), ref, std::move(named), std::move(meaning));
}

template <typename Ref>
ConfigKey text_choice(std::string path, Ref ref, std::vector<std::string> names, std::string meaning) {
  std::vector<std::pair<std::string, std::string>> values;
  for (const std::string& n : names) values.emplace_back(n, n);
  return choice(std::move(path), ref, std::move(values), std::move(meaning));
}

// A list of strings, each one of `names` (a std::vector<std::string> field).
template <typename Ref>
ConfigKey choice_list(std::string path, Ref ref, std::vector<std::string> names, std::string meaning) {
  ConfigKey k = base(std::move(path), KeyKind::kChoiceList, std::move(meaning));
  k.choices = std::move(names);
  k.get = [ref](RunConfig& c) { return Json(ref(c)); };
  k.set = [ref](RunConfig& c, const Json& v) { ref(c) = v.get<std::vector<std::string>>(); };
  return k;
}

// A list of any strings (a std::vector<std::string> field).
template <typename Ref>
ConfigKey text_list(std::string path, Ref ref, std::string meaning) {
  ConfigKey k = base(std::move(path), KeyKind::kStringList, std::move(meaning));
  k.get = [ref](RunConfig& c) { return Json(ref(c)); };
  k.set = [ref](RunConfig& c, const Json& v) { ref(c) = v.get<std::vector<std::string>>(); };
  return k;
}

// Accepted at any value of its type, with no effect here (the meaning says why).
inline ConfigKey accepted(std::string path, KeyKind kind, Json def, std::string meaning) {
  ConfigKey k = base(std::move(path), kind, std::move(meaning));
  k.get = [def](RunConfig&) { return def; };
  return k;
}

// Refused unless at `allowed` (DeepSpeed's value that asks for nothing).
inline ConfigKey refused(std::string path, Json allowed, std::string why) {
  ConfigKey k = base(std::move(path), KeyKind::kRefused, std::move(why));
  k.allowed = std::move(allowed);
  k.get = [a = k.allowed](RunConfig&) { return a; };
  return k;
}

inline constexpr int64_t kMax = INT64_MAX;
inline const NumberRange kNonNegative = NumberRange::at_least(0.0);
inline const NumberRange kPositive = NumberRange::above(0.0);
inline const NumberRange kRatio = NumberRange::between(0.0, 1.0);

// Each file's declarations, in the README table's order.
std::vector<ConfigKey> run_config_keys();  // run_config.cc: model, data, run, DeepSpeed's top level
std::vector<ConfigKey> data_keys();        // data_section.cc: data (run_config_keys places them)
std::vector<ConfigKey> lora_keys();        // lora_section.cc: model.lora (run_config_keys places them)
std::vector<ConfigKey> moe_keys();         // moe_section.cc: the model's experts (likewise)
std::vector<ConfigKey> elasticity_keys();  // elasticity_section.cc: elasticity (run_config_keys places them)
std::vector<ConfigKey> training_keys();    // deepspeed_training_sections.cc: optimizer, scheduler, precision
std::vector<ConfigKey> zero_keys();        // deepspeed_zero_sections.cc: zero_optimization, aio, checkpoints

}  // namespace zero::config_keys
