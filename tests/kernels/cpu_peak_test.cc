// The CPU's arithmetic peak from its ISA and clock (kernels/cpu/cpu_peak.h),
// zero-train's MFU denominator: FLOP/cycle per ISA and GEMM precision,
// hyperthreads not counted twice, the clock's sources in order, no peak
// without a clock, and on this machine the same figure every time it is read.
#include "kernels/cpu/cpu_peak.h"

#include <gtest/gtest.h>

namespace zero::cpu {
namespace {

CpuFacts facts(std::set<std::string> flags, int cores, std::string model_name = "", double cpuinfo_mhz = 0) {
  CpuFacts f;
  f.flags = std::move(flags);
  f.physical_cores = cores;
  f.model_name = std::move(model_name);
  f.cpuinfo_mhz = cpuinfo_mhz;
  return f;
}

TEST(CpuPeakTest, Avx2CoresTimesFlopPerCycleTimesTheClock) {
  // 4 threads on 2 physical cores: hyperthreads share their core's FMA units.
  const CpuPeak p = cpu_peak(facts({"avx2", "fma"}, 2, "Intel(R) Xeon(R) CPU E5-2620 v4 @ 2.10GHz"), DType::kF32, 4);
  EXPECT_EQ(p.cores, 2);
  EXPECT_EQ(p.flop_per_cycle, 32);  // 2 units x 8 lanes x 2 (FMA)
  EXPECT_DOUBLE_EQ(p.ghz, 2.1);
  EXPECT_DOUBLE_EQ(p.tflops, 2 * 32 * 2.1 / 1000);
  EXPECT_EQ(p.describe(), "the fp32 FMA peak of 2 cores x 32 FLOP/cycle x 2.1 GHz (AVX2, 2 vector units per core "
                          "assumed; clock from the model name)");
}

TEST(CpuPeakTest, ThePrecisionTheGemmsRunInChoosesTheInstructions) {
  const std::set<std::string> avx512 = {"avx2", "fma", "avx512f"};
  EXPECT_EQ(cpu_peak(facts(avx512, 1, "", 2000), DType::kF32, 1).flop_per_cycle, 64);
  // bf16 GEMMs without AVX512-BF16 are widened: the fp32 peak.
  EXPECT_EQ(cpu_peak(facts(avx512, 1, "", 2000), DType::kBF16, 1).flop_per_cycle, 64);
  std::set<std::string> bf16 = avx512;
  bf16.insert("avx512_bf16");
  const CpuPeak dot = cpu_peak(facts(bf16, 1, "", 2000), DType::kBF16, 1);
  EXPECT_EQ(dot.flop_per_cycle, 128);
  EXPECT_EQ(dot.precision, "bf16 dot-product");
  EXPECT_EQ(cpu_peak(facts(bf16, 1, "", 2000), DType::kF32, 1).flop_per_cycle, 64);
  bf16.insert("amx_bf16");
  EXPECT_EQ(cpu_peak(facts(bf16, 1, "", 2000), DType::kBF16, 1).flop_per_cycle, 1024);
  EXPECT_EQ(cpu_peak(facts({}, 1, "", 2000), DType::kF32, 1).isa, "SSE");
  // The bench counts the same FLOPs per instruction.
  EXPECT_EQ(fma_instruction_flop(DType::kF32, 512), 32);
  EXPECT_EQ(fma_instruction_flop(DType::kBF16, 512), 64);
}

TEST(CpuPeakTest, TheNominalClockComesFirstAndNoClockIsNoPeak) {
  CpuFacts f = facts({"avx512f"}, 2, "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz", 2893.2);
  f.max_mhz = 3200;
  EXPECT_EQ(cpu_peak(f, DType::kF32, 2).clock_source, "the model name");
  f.base_mhz = 2000;
  EXPECT_EQ(cpu_peak(f, DType::kF32, 2).clock_source, "cpufreq base_frequency");
  f.base_mhz = 0;
  f.model_name = "AMD EPYC 7B13 64-Core Processor";
  EXPECT_EQ(cpu_peak(f, DType::kF32, 2).clock_source, "cpufreq cpuinfo_max_freq");
  f.max_mhz = 0;
  const CpuPeak vm = cpu_peak(f, DType::kF32, 2);
  EXPECT_EQ(vm.clock_source, "/proc/cpuinfo cpu MHz");
  EXPECT_DOUBLE_EQ(vm.ghz, 2.8932);
  f.cpuinfo_mhz = 0;
  const CpuPeak none = cpu_peak(f, DType::kF32, 2);
  EXPECT_EQ(none.tflops, 0);
  EXPECT_NE(none.describe().find("clock is unknown"), std::string::npos) << none.describe();
}

TEST(CpuPeakTest, ThisMachinesPeakIsTheSameEveryTime) {
  const CpuFacts f = read_cpu_facts();
  EXPECT_FALSE(f.flags.empty());
  EXPECT_GE(f.physical_cores, 1);
  const CpuPeak a = cpu_peak(f, DType::kF32, 2);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(cpu_peak(read_cpu_facts(), DType::kF32, 2).describe(), a.describe());
  EXPECT_EQ(cpu_flag("avx512f"), f.flags.count("avx512f") > 0);
}

}  // namespace
}  // namespace zero::cpu
