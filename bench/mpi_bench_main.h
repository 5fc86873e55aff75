// main() for benchmarks that run under mpirun: every rank runs every
// benchmark (they contain collectives, so all ranks must), only rank 0
// reports. The program defines register_benchmarks(Communicator&) and
// includes this header once.
#pragma once

#include <benchmark/benchmark.h>

#include "comm/communicator.h"

namespace zero {
void register_benchmarks(Communicator& comm);
}

namespace zero::bench_internal {

class QuietReporter : public benchmark::ConsoleReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace zero::bench_internal

int main(int argc, char** argv) {
  auto comm = zero::create_communicator();
  if (!comm.ok()) return 1;
  zero::register_benchmarks(**comm);
  benchmark::Initialize(&argc, argv);
  // A mistyped flag is not ignored; every rank has the same arguments, so all stop.
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if ((*comm)->rank() == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    zero::bench_internal::QuietReporter quiet;
    benchmark::RunSpecifiedBenchmarks(&quiet);
  }
  benchmark::Shutdown();
  return 0;
}
