// The command line of a benchmark program that takes flags of its own before
// Google Benchmark's (io_bench, tokenizer_bench):
//   parse_int         a whole decimal integer in [lo, hi];
//   Flag              one flag --name=VALUE, made by string_flag or int_flag;
//   take_flags        takes the program's flags and --help/-h out of argv,
//                     leaving the rest for Google Benchmark; a bad value is
//                     named on stderr as
//                     `program: --name: "value" is not WHAT (see --help)`;
//   list_tests_only   whether --benchmark_list_tests is given (and not false);
//   start_benchmarks  all of it in order: the program's flags, --help,
//                     Google Benchmark's flags, registering the benchmarks,
//                     and listing them without any set-up when that is all
//                     that is asked (so a program that writes files writes
//                     none then).
#pragma once

#include <benchmark/benchmark.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace zero::bench {

// A whole decimal integer in [lo, hi], or false.
inline bool parse_int(const std::string& s, int64_t lo, int64_t hi, int64_t* out) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || errno != 0 || end != s.c_str() + s.size() || v < lo || v > hi) return false;
  *out = v;
  return true;
}

// One of the program's flags, given as --name=VALUE ("--name" alone is not it,
// and goes on to Google Benchmark).
struct Flag {
  std::string name;                              // "--rounds"
  std::function<bool(const std::string&)> set;   // takes the value; false when it is not `what`
  std::string what;                              // "a number of rounds (1 or more)"
};

// A flag whose value is any string, stored in *out.
inline Flag string_flag(std::string name, std::string* out) {
  return {std::move(name), [out](const std::string& value) {
            *out = value;
            return true;
          },
          ""};
}

// A flag whose value is a whole number in [lo, hi], handed to `set`.
inline Flag int_flag(std::string name, int64_t lo, int64_t hi, std::string what, std::function<void(int64_t)> set) {
  return {std::move(name),
          [lo, hi, set = std::move(set)](const std::string& value) {
            int64_t v = 0;
            if (!parse_int(value, lo, hi, &v)) return false;
            set(v);
            return true;
          },
          std::move(what)};
}

enum class Parsed { kRun, kHelp, kBad };

// Takes `flags` and --help/-h out of argv, in order (the rest stay, for Google
// Benchmark); kBad at the first bad value, after naming it on stderr.
inline Parsed take_flags(const char* program, const std::vector<Flag>& flags, int* argc, char** argv) {
  int out = 1;
  bool help = false;
  for (int i = 1; i < *argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      help = true;
      continue;
    }
    const Flag* flag = nullptr;
    for (const Flag& f : flags) {
      if (a.rfind(f.name + "=", 0) == 0) {
        flag = &f;
        break;
      }
    }
    if (flag == nullptr) {
      argv[out++] = argv[i];
      continue;
    }
    const std::string value = a.substr(flag->name.size() + 1);
    if (!flag->set(value)) {
      std::fprintf(stderr, "%s: %s: \"%s\" is not %s (see --help)\n", program, flag->name.c_str(), value.c_str(),
                   flag->what.c_str());
      return Parsed::kBad;
    }
  }
  *argc = out;
  return help ? Parsed::kHelp : Parsed::kRun;
}

// --benchmark_list_tests given (and not false): nothing is measured.
inline bool list_tests_only(const std::vector<char*>& args) {
  bool list = false;
  for (const char* a : args) {
    const std::string s = a;
    if (s.rfind("--benchmark_list_tests", 0) != 0) continue;
    const std::string value = s.size() > 22 && s[22] == '=' ? s.substr(23) : "true";
    list = !(value == "false" || value == "0" || value == "no");
  }
  return list;
}

// Reads the command line: the program's `flags` (take_flags), then Google
// Benchmark's (each of `defaults`, "--benchmark_X=VALUE", added first unless
// the command line sets --benchmark_X), then registers the benchmarks with
// `register_all`, which may read what the flags set. Returns the exit code
// when there is nothing to measure: 2 after a bad or unknown flag; 0 after
// --help (`usage`, then Google Benchmark's flags) or after listing the
// benchmarks (--benchmark_list_tests). nullopt: the program sets up, then
// calls benchmark::RunSpecifiedBenchmarks() and benchmark::Shutdown().
inline std::optional<int> start_benchmarks(const char* program, const char* usage, const std::vector<Flag>& flags,
                                           const std::vector<std::string>& defaults,
                                           const std::function<void()>& register_all, int argc, char** argv) {
  const Parsed parsed = take_flags(program, flags, &argc, argv);
  if (parsed == Parsed::kBad) return 2;
  if (parsed == Parsed::kHelp) {
    std::fputs(usage, stdout);
    benchmark::PrintDefaultHelp();
    return 0;
  }
  std::vector<char*> args(argv, argv + argc);
  std::vector<std::string> added;  // reserved, so the pointers in `args` stay good
  added.reserve(defaults.size());
  for (const std::string& d : defaults) {
    const std::string name = d.substr(0, d.find('='));
    bool chosen = false;
    for (const char* a : args) chosen |= std::string(a).rfind(name, 0) == 0;
    if (!chosen) args.push_back(added.emplace_back(d).data());
  }
  const bool list_only = list_tests_only(args);
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 2;
  register_all();
  if (list_only) {
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
  }
  return std::nullopt;
}

}  // namespace zero::bench
