// zero-train: train a model from a JSON config.
//
//   zero-train --config run.json [--config ds_config.json] [--set key.path=value]...
//              [--backend cpu|cuda] [--steps N] [--metrics FILE] [--print-config]
//              [--allow-unknown-keys]
//
// Exit status: 0 on success, 2 for bad usage or a bad config, 1 for any
// other failure (data, memory, disk, no GPU). Every error names what it is
// about.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/signals.h"
#include "core/strings.h"
#include "runtime/config/memory_preflight.h"
#include "runtime/config/run_config.h"
#include "runtime/tools/compute_setup.h"
#include "runtime/tools/path_preflight.h"
#include "runtime/tools/train_loop.h"

namespace {

constexpr const char* kUsage = R"(usage: zero-train --config FILE [options]

  --config FILE          JSON config (comments allowed); repeat to layer files,
                         later ones override earlier ones key by key
  --set KEY.PATH=VALUE   override one key (repeatable), e.g. --set optimizer.params.lr=3e-4
  --backend cpu|cuda     where ops run (run.backend; default cpu); cuda: one GPU per rank,
                         the rank's index on its node, collectives over NCCL
  --steps N              optimizer steps (overrides run.steps)
  --metrics FILE         write one JSON object per optimizer step (overrides run.metrics)
  --save-dir DIR         write checkpoints to DIR (run.save_dir)
  --save-every N         checkpoint every N optimizer steps and at the end (run.save_every)
  --keep K               keep only the newest K checkpoints (run.keep)
  --resume DIR|auto      continue from DIR's newest checkpoint; auto: --save-dir's, if any (run.resume)
  --init-from FILE       initialise the weights from a safetensors file (run.init_from)
  --print-config         print the effective config (defaults filled in) and exit
  --allow-unknown-keys   warn about unknown keys instead of failing
  --help                 this text
)";

struct Args {
  std::vector<std::string> configs, overrides;
  bool print_config = false, allow_unknown = false;
};

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "zero-train: %s\n\n%s", msg.c_str(), kUsage);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](std::string& out) {
      if (i + 1 >= argc) return false;
      out = argv[++i];
      return true;
    };
    std::string v;
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--config") {
      if (!value(v)) return usage_error("--config needs a file");
      args.configs.push_back(v);
    } else if (a == "--set") {
      if (!value(v)) return usage_error("--set needs KEY.PATH=VALUE");
      args.overrides.push_back(v);
    } else if (a == "--backend") {
      if (!value(v)) return usage_error("--backend needs cpu or cuda");
      args.overrides.push_back("run.backend=" + zero::Json(v).dump());
    } else if (a == "--steps") {
      if (!value(v)) return usage_error("--steps needs a number");
      args.overrides.push_back("run.steps=" + v);
    } else if (a == "--metrics") {
      if (!value(v)) return usage_error("--metrics needs a file");
      args.overrides.push_back("run.metrics=" + zero::Json(v).dump());
    } else if (a == "--save-dir" || a == "--resume" || a == "--init-from") {
      if (!value(v)) return usage_error(a + " needs a path");
      const std::string key = a == "--save-dir" ? "save_dir" : a == "--resume" ? "resume" : "init_from";
      args.overrides.push_back(zero::cat("run.", key, "=", zero::Json(v).dump()));
    } else if (a == "--save-every" || a == "--keep") {
      if (!value(v)) return usage_error(a + " needs a number");
      args.overrides.push_back(zero::cat("run.", a == "--keep" ? "keep" : "save_every", "=", v));
    } else if (a == "--print-config") {
      args.print_config = true;
    } else if (a == "--allow-unknown-keys") {
      args.allow_unknown = true;
    } else {
      return usage_error(zero::cat("unknown argument ", a));
    }
  }
  if (args.configs.empty()) return usage_error("no config given (--config FILE)");

  // MPI first: the batch triple depends on the world size, and under mpirun
  // every rank parses the same files.
  absl::StatusOr<std::unique_ptr<zero::Communicator>> comm = zero::create_communicator();
  if (!comm.ok()) {
    std::fprintf(stderr, "zero-train: cannot start the communicator: %s\n",
                 std::string(comm.status().message()).c_str());
    return 1;
  }
  const int rank = (*comm)->rank(), world = (*comm)->world_size();
  // SIGINT/SIGTERM: stop at the next step boundary, swap files removed at once
  // (core/signals.h).
  zero::install_signal_handlers(rank);
  zero::enable_graceful_stop();
  auto fail = [&](int code, const absl::Status& s) {
    if (rank == 0 || code == 1) {
      std::fprintf(stderr, "zero-train%s: %s\n", world > 1 ? zero::cat(" (rank ", rank, ")").c_str() : "",
                   std::string(s.message()).c_str());
    }
    return code;
  };

  absl::StatusOr<zero::Json> merged = zero::load_merged_config(args.configs, args.overrides);
  if (!merged.ok()) return fail(2, merged.status());
  zero::ConfigOptions options;
  options.allow_unknown_keys = args.allow_unknown;
  options.world_size = world;
  absl::StatusOr<zero::RunConfig> config = zero::parse_run_config(*merged, options);
  if (!config.ok()) return fail(2, config.status());
  if (rank == 0) {
    for (const std::string& w : config->warnings) std::fprintf(stderr, "zero-train: warning: %s\n", w.c_str());
  }
  if (args.print_config) {
    if (rank == 0) std::cout << zero::format_effective_config(*config);
    return 0;
  }
  if (const absl::Status s = zero::check_backend_supports(*config); !s.ok()) return fail(2, s);
  if (const absl::Status s = zero::check_run_paths(*config, rank); !s.ok()) return fail(2, s);
  const int ranks_on_node = std::max(1, (*comm)->local_size());
  // overlap_comm runs reductions on the communication thread beside compute;
  // where OpenMP already has every core, that thread takes one from compute
  // (1.15-1.4x slower steps measured on 2 cores: bench/zero_step_bench).
  // DeepSpeed's stage-3 default is revised then; a value the config gave is kept.
  const int threads = omp_get_max_threads();
  const int cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));  // the machine's, not this rank's binding
  if (world > 1 && config->engine.zero.overlap_comm && threads * ranks_on_node >= cores && rank == 0) {
    std::printf("overlap_comm: %s: the communication thread has no core of its own here (%d OpenMP thread%s per rank "
                "x %d rank%s on %d cores)%s\n",
                config->engine.zero.overlap_comm_given ? "on as configured, though" : "off",
                threads, threads == 1 ? "" : "s", ranks_on_node, ranks_on_node == 1 ? "" : "s", cores,
                config->engine.zero.overlap_comm_given ? "" : "; DeepSpeed's stage-3 default would turn it on (set "
                                                              "zero_optimization.overlap_comm to choose)");
  }
  if (config->engine.zero.overlap_comm && !config->engine.zero.overlap_comm_given && threads * ranks_on_node >= cores) {
    config->engine.zero.overlap_comm = false;
  }
  // Before anything is allocated: does this rank's plan (of the run as it
  // will be, overlap_comm decided) fit the memory it shares with the other
  // ranks on its machine?
  if (const absl::Status s =
          zero::check_memory_fits(*config, world, rank, ranks_on_node, zero::host_memory_available_bytes());
      !s.ok()) {
    return fail(absl::IsInvalidArgument(s) ? 2 : 1, s);
  }
  // The other ranks may be inside a collective this rank will never join
  // (NCCL's start-up, a training step): on several ranks a failure leaves
  // without finalising MPI, so the launcher ends the job instead of everyone
  // waiting.
  auto fail_job = [&](const absl::Status& s) {
    fail(1, s);
    if (world > 1) {
      std::fflush(stdout);
      std::fflush(stderr);
      std::_Exit(1);
    }
    return 1;
  };
  std::unique_ptr<zero::Communicator> bootstrap = *std::move(comm);
  absl::StatusOr<zero::ComputeSetup> setup = zero::make_compute_setup(*config, bootstrap);
  if (!setup.ok()) return fail_job(setup.status());
  const absl::StatusOr<int> stopped = zero::run_training(*config, *setup->backend, *setup->comm, std::cout);
  if (!stopped.ok()) return fail_job(stopped.status());
  return *stopped == 0 ? 0 : 128 + *stopped;  // a signal stopped it at a step boundary (130, 143)
}
