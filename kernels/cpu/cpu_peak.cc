// This CPU's arithmetic peak from its ISA and clock; see cpu_peak.h.
#include "kernels/cpu/cpu_peak.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_format.h"

namespace zero::cpu {

namespace {

// The value of a /proc/cpuinfo line "key\t: value", or "" when the line is another key's.
std::string cpuinfo_value(const std::string& line, const std::string& key) {
  if (line.rfind(key, 0) != 0) return "";
  const size_t colon = line.find(':');
  if (colon == std::string::npos || line.find_first_not_of(" \t", key.size()) != colon) return "";
  const size_t begin = line.find_first_not_of(' ', colon + 1);
  return begin == std::string::npos ? "" : line.substr(begin);
}

// A number in kHz from a sysfs file, in MHz; 0 when absent.
double sysfs_khz_as_mhz(const std::string& path) {
  std::ifstream in(path);
  double khz = 0;
  return in >> khz && khz > 0 ? khz / 1000.0 : 0.0;
}

std::string sysfs_text(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  in >> s;
  return s;
}

// "... @ 2.10GHz" -> 2100; 0 when the name gives no clock.
double model_name_mhz(const std::string& name) {
  const size_t at = name.rfind('@');
  if (at == std::string::npos) return 0;
  const char* p = name.c_str() + at + 1;
  char* end = nullptr;
  const double v = std::strtod(p, &end);
  if (end == p || v <= 0) return 0;
  const std::string unit(end);
  if (unit.find("GHz") != std::string::npos) return v * 1000.0;
  if (unit.find("MHz") != std::string::npos) return v;
  return 0;
}

}  // namespace

CpuFacts read_cpu_facts() {
  CpuFacts f;
  std::ifstream in("/proc/cpuinfo");
  bool have_flags = false, have_name = false, have_mhz = false;
  for (std::string line; std::getline(in, line) && !(have_flags && have_name && have_mhz);) {
    if (std::string v = cpuinfo_value(line, "flags"); !have_flags && !v.empty()) {
      std::istringstream words(v);
      for (std::string w; words >> w;) f.flags.insert(w);
      have_flags = true;
    } else if (std::string n = cpuinfo_value(line, "model name"); !have_name && !n.empty()) {
      f.model_name = n;
      have_name = true;
    } else if (std::string m = cpuinfo_value(line, "cpu MHz"); !have_mhz && !m.empty()) {
      f.cpuinfo_mhz = std::strtod(m.c_str(), nullptr);
      have_mhz = true;
    }
  }
  const std::string freq = "/sys/devices/system/cpu/cpu0/cpufreq/";
  f.base_mhz = sysfs_khz_as_mhz(freq + "base_frequency");
  f.max_mhz = sysfs_khz_as_mhz(freq + "cpuinfo_max_freq");
  // Physical cores among the CPUs this process may run on.
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    std::set<std::pair<std::string, std::string>> cores;
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (!CPU_ISSET(c, &set)) continue;
      const std::string topo = absl::StrFormat("/sys/devices/system/cpu/cpu%d/topology/", c);
      std::string package = sysfs_text(topo + "physical_package_id"), core = sysfs_text(topo + "core_id");
      if (package.empty() || core.empty()) package = "cpu", core = std::to_string(c);  // no topology: count CPUs
      cores.insert({package, core});
    }
    f.physical_cores = static_cast<int>(cores.size());
  }
  return f;
}

bool cpu_flag(const std::string& flag) { return read_cpu_facts().flags.count(flag) > 0; }

CpuPeak cpu_peak(const CpuFacts& facts, DType gemm_dtype, int threads) {
  auto has = [&](const char* flag) { return facts.flags.count(flag) > 0; };
  const bool bf16 = gemm_dtype == DType::kBF16;
  CpuPeak p;
  if (bf16 && has("amx_bf16")) {
    p.precision = "bf16 AMX", p.isa = "AMX-BF16", p.flop_per_cycle = 1024;
  } else if (bf16 && has("avx512_bf16")) {
    p.precision = "bf16 dot-product", p.isa = "AVX512-BF16";
    p.flop_per_cycle = kFmaPipes * fma_instruction_flop(DType::kBF16, 512);
  } else if (has("avx512f")) {
    p.precision = "fp32 FMA", p.isa = "AVX-512", p.flop_per_cycle = kFmaPipes * fma_instruction_flop(DType::kF32, 512);
  } else if (has("avx2") && has("fma")) {
    p.precision = "fp32 FMA", p.isa = "AVX2", p.flop_per_cycle = kFmaPipes * fma_instruction_flop(DType::kF32, 256);
  } else {
    p.precision = "fp32 multiply-add", p.isa = "SSE", p.flop_per_cycle = kFmaPipes * 128 / 32;
  }
  p.cores = std::max(1, facts.physical_cores > 0 ? std::min(threads, facts.physical_cores) : threads);
  double mhz = 0;
  if (facts.base_mhz > 0) {
    mhz = facts.base_mhz, p.clock_source = "cpufreq base_frequency";
  } else if (const double named = model_name_mhz(facts.model_name); named > 0) {
    mhz = named, p.clock_source = "the model name";
  } else if (facts.max_mhz > 0) {
    mhz = facts.max_mhz, p.clock_source = "cpufreq cpuinfo_max_freq";
  } else if (facts.cpuinfo_mhz > 0) {
    mhz = facts.cpuinfo_mhz, p.clock_source = "/proc/cpuinfo cpu MHz";
  }
  p.ghz = mhz / 1000.0;
  p.tflops = static_cast<double>(p.cores) * p.flop_per_cycle * p.ghz / 1000.0;
  return p;
}

std::string CpuPeak::describe() const {
  if (tflops <= 0) {
    return absl::StrFormat("no %s peak: this CPU's clock is unknown (no cpufreq, no \"@ x GHz\" in its model name, "
                           "no cpu MHz in /proc/cpuinfo)",
                           precision);
  }
  const bool amx = isa == "AMX-BF16";
  return absl::StrFormat("the %s peak of %d core%s x %d FLOP/cycle x %.4g GHz (%s%s; clock from %s)", precision, cores,
                         cores == 1 ? "" : "s", flop_per_cycle, ghz, isa,
                         amx ? "" : absl::StrFormat(", %d vector units per core assumed", kFmaPipes), clock_source);
}

}  // namespace zero::cpu
