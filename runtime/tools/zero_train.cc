// zero-train: train a model from a JSON config.
//
//   zero-train --config run.json [--config ds_config.json] [--set key.path=value]...
//              [--backend cpu|cuda] [--steps N] [--metrics FILE] [--print-config]
//              [--allow-unknown-keys]
//
// The files layer in order, later ones overriding earlier ones key by key;
// then every --set and every option that sets a config key (kKeyFlags)
// applies in the order given. Exit status: 0 on success, 2 for bad usage, a
// bad config or data that does not read or fit the model (a malformed line,
// a byte shard for a BPE model), 1 for any other failure (reading the data,
// memory, disk, no GPU). Every
// error names what it is about; with several layers, a key's error names the
// file (or option) it came from.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <new>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "comm/comm_thread.h"
#include "comm/communicator.h"
#include "comm/mpi_communicator.h"
#include "core/signals.h"
#include "core/strings.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/config/config_reader.h"
#include "runtime/config/memory_preflight.h"
#include "runtime/config/run_config.h"
#include "runtime/tools/cli.h"
#include "runtime/tools/compute_setup.h"
#include "runtime/tools/path_preflight.h"
#include "runtime/tools/train_loop.h"

namespace {

constexpr const char* kUsage = R"(usage: zero-train --config FILE [--config FILE]... [--set KEY.PATH=VALUE]... [options]

Trains a model from JSON configs (comments allowed): ZeroEngine's model, data
and run sections beside DeepSpeed's keys. Files layer in order, later ones
overriding earlier ones key by key; then each --set and each option that sets
a config key applies, in the order given.
)";

// How an option's value becomes the JSON of its key.
enum class KeyValue {
  kString,  // quoted: a path, a name
  kAsTyped, // as typed: a number (the config reader names the key if it is not one)
};

// The options that set one config key; a new one is a row here.
struct KeyFlag {
  const char* flag;
  const char* value_name;
  const char* key;
  KeyValue value;
  const char* help;
};
constexpr KeyFlag kKeyFlags[] = {
    {"--backend", "cpu|cuda", "run.backend", KeyValue::kString,
     "where ops run (default cpu); cuda: one GPU per rank, the rank's index on its node, collectives over NCCL"},
    {"--steps", "N", "run.steps", KeyValue::kAsTyped, "optimizer steps"},
    {"--metrics", "FILE", "run.metrics", KeyValue::kString, "write one JSON object per optimizer step"},
    {"--save-dir", "DIR", "run.save_dir", KeyValue::kString, "write checkpoints to DIR"},
    {"--save-every", "N", "run.save_every", KeyValue::kAsTyped,
     "checkpoint every N optimizer steps and at the end"},
    {"--keep", "K", "run.keep", KeyValue::kAsTyped, "keep only the newest K checkpoints"},
    {"--resume", "DIR|auto", "run.resume", KeyValue::kString,
     "continue from DIR's newest checkpoint (its model, weights, optimizer state and step); auto: --save-dir's, if "
     "any, else start as without --resume"},
    {"--init-from", "DIR|FILE", "run.init_from", KeyValue::kString,
     "initialise the weights from a Hugging Face directory (its config.json and tokenizer files too) or a "
     "safetensors file; a checkpoint --resume finds wins"},
    {"--peak-tflops", "X", "run.peak_tflops", KeyValue::kAsTyped,
     "one rank's peak TFLOP/s for MFU (default: the CPU's ISA x clock peak; on a GPU, a GEMM rate measured at start)"},
};

struct Args {
  std::vector<std::string> configs;
  std::vector<zero::ConfigOverride> overrides;  // --set and kKeyFlags, in command-line order
  bool print_config = false, allow_unknown = false;
};

// This rank and the world's size, for the timeout handler (a plain function).
int g_rank = 0, g_world = 1;

// A wait gave up on a collective that is still running on the communication
// thread (a frozen or dead peer: comm/comm_thread.h). That MPI call cannot be
// cancelled, and it reads and writes the engine's buffers until it returns,
// which it does as soon as the peer resumes. Returning the error would
// destroy the Engine (freeing those buffers) on the way out of run_training,
// before fail_job could leave: a use-after-free when the data arrives, then a
// hang joining the thread or in MPI_Finalize. So the rank reports the timeout
// and ends here, from inside the wait, with nothing unwound or freed and MPI
// not finalised, as MPI_Abort-style runtimes do: exit 1 like any failure, and
// mpirun then ends the job (the peer, frozen or resumed, is terminated).
// The message is the wait's own (the collective and the timeout); the
// caller's context that the error would have picked up on its way out is
// the price of not unwinding.
[[noreturn]] void end_on_comm_timeout(const absl::Status& s) {
  static std::mutex once;  // a second waiter waits here for the first's exit
  once.lock();
  std::cout.flush();
  std::fflush(stdout);
  std::fprintf(stderr, "zero-train%s: %s\n", g_world > 1 ? zero::cat(" (rank ", g_rank, ")").c_str() : "",
               std::string(s.message()).c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

}  // namespace

int run(int argc, char** argv) {
  CLI::App app;
  zero::cli::init_app(app, "zero-train", kUsage);
  const CLI::Option* config_opt =
      app.add_option("--config")
          ->type_name("FILE")
          ->description("JSON config; repeat to layer files, later ones override earlier ones key by key")
          ->take_all();
  const CLI::Option* set_opt = app.add_option("--set")
                                   ->type_name("KEY.PATH=VALUE")
                                   ->description("override one key (repeatable), e.g. --set optimizer.params.lr=3e-4")
                                   ->take_all();
  std::map<const CLI::Option*, const KeyFlag*> key_flags;
  for (const KeyFlag& f : kKeyFlags) {
    key_flags[app.add_option(f.flag)
                  ->type_name(f.value_name)
                  ->description(zero::cat(f.help, " (", f.key, ")"))
                  ->take_all()] = &f;
  }
  Args args;
  app.add_flag("--print-config", args.print_config,
               "print the effective config as JSON (defaults filled in; derived keys listed under \"__derived__\") "
               "and exit");
  app.add_flag("--allow-unknown-keys", args.allow_unknown, "warn about unknown keys instead of failing");
  if (const std::optional<int> exit_code = zero::cli::parse(app, argc, argv)) return *exit_code;
  for (const zero::cli::Occurrence& o : zero::cli::options_in_order(app)) {
    if (o.option == config_opt) {
      args.configs.push_back(o.value);
    } else if (o.option == set_opt) {
      args.overrides.push_back({o.value, "--set"});
    } else if (const auto it = key_flags.find(o.option); it != key_flags.end()) {
      const KeyFlag& f = *it->second;
      const std::string json = f.value == KeyValue::kString ? zero::Json(o.value).dump() : o.value;
      args.overrides.push_back({zero::cat(f.key, "=", json), f.flag});
    }
  }
  if (args.configs.empty()) return zero::cli::usage_error(app, "no config given (--config FILE)");

  // MPI first: the batch triple depends on the world size, and under mpirun
  // every rank parses the same files.
  absl::StatusOr<std::unique_ptr<zero::Communicator>> comm = zero::create_communicator();
  if (!comm.ok()) {
    std::fprintf(stderr, "zero-train: cannot start the communicator: %s\n",
                 std::string(comm.status().message()).c_str());
    return 1;
  }
  const int rank = (*comm)->rank(), world = (*comm)->world_size();
  g_rank = rank, g_world = world;
  zero::set_comm_timeout_handler(end_on_comm_timeout);
  // SIGINT/SIGTERM: end at once during set-up, stop at the next step boundary
  // once training runs (run_training enables that); swap files are removed at
  // once either way (core/signals.h).
  zero::install_signal_handlers(rank);
  auto fail = [&](int code, const absl::Status& s) {
    if (rank == 0 || code == 1) {
      std::fprintf(stderr, "zero-train%s: %s\n", world > 1 ? zero::cat(" (rank ", rank, ")").c_str() : "",
                   std::string(s.message()).c_str());
    }
    return code;
  };

  zero::ConfigSources sources;
  absl::StatusOr<zero::Json> merged = zero::load_layered_config(args.configs, args.overrides, &sources);
  if (!merged.ok()) return fail(2, merged.status());
  zero::ConfigOptions options;
  options.allow_unknown_keys = args.allow_unknown;
  options.auto_filled = sources.auto_filled();
  options.world_size = world;
  options.resumed_model = zero::resumed_checkpoint_model;  // a resumed checkpoint's model is the run's
  absl::StatusOr<zero::RunConfig> config = zero::parse_run_config(*merged, options);
  if (!config.ok()) return fail(2, sources.annotate(config.status()));
  if (rank == 0) {
    for (const std::string& w : config->warnings) {
      std::fprintf(stderr, "zero-train: warning: %s\n", (sources.layered() ? sources.annotate(w) : w).c_str());
    }
  }
  if (args.print_config) {
    if (rank == 0) std::cout << zero::format_effective_config(*config);
    return 0;
  }
  if (const absl::Status s = zero::check_backend_supports(*config); !s.ok()) return fail(2, sources.annotate(s));
  if (const absl::Status s = zero::check_run_paths(*config, rank); !s.ok()) return fail(2, sources.annotate(s));
  // Under mpirun: how many OpenMP threads each rank runs, and why (comm/mpi_communicator.h).
  if (const auto* mpi = dynamic_cast<const zero::MpiCommunicator*>(comm->get()); mpi != nullptr && rank == 0) {
    std::printf("threads: %s\n", mpi->rank_threads().description.c_str());
  }
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
  // The data, read (and tokenized) by every rank before anything is built:
  // data that does not read or does not fit the model is a usage error (exit 2).
  absl::StatusOr<zero::TrainingData> data = zero::open_training_data(*config, threads);
  if (!data.ok()) return fail(zero::data_error_exit_code(data.status()), sources.annotate(data.status()));
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
  const absl::StatusOr<int> stopped =
      zero::run_training(*config, *std::move(data), *setup->backend, *setup->comm, std::cout);
  // model.freeze patterns that match no parameter are found once the model
  // is built, the same on every rank: a usage error.
  if (!stopped.ok() && absl::IsInvalidArgument(stopped.status()) &&
      absl::StartsWith(stopped.status().message(), "model.freeze: ")) {
    return fail(2, stopped.status());
  }
  if (!stopped.ok()) return fail_job(stopped.status());
  return *stopped == 0 ? 0 : 128 + *stopped;  // a signal stopped it at a step boundary (130, 143)
}

int main(int argc, char** argv) {
  // An allocation of the C++ library that fails (a host vector sized by a
  // huge config) ends the run as an error, not an abort.
  try {
    return run(argc, argv);
  } catch (const std::bad_alloc&) {
    std::fflush(stdout);
    std::fprintf(stderr, "zero-train: out of host memory (a host allocation failed); lower the batch or the model\n");
    return 1;
  }
}
