// A model of the user's own through ZeroEngine's C++ API: the MLP-Mixer of
// examples/mixer.h (forward only) classifying the synthetic stripe images of
// examples/synthetic_images.h, under ZeRO-3 with activation checkpointing of
// its blocks and the optimizer offloaded to CPU memory. Under mpirun each
// rank trains on its own slice of every global batch; every rank prints the
// global batch's mean loss per step:
//
//   mpirun -np 2 train_mixer [STEPS] [MICRO_BATCH]
//   rank 0 step   1 loss 1.386021
//
// STEPS optimizer steps (default 30) of MICRO_BATCH images per rank (default 16).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "comm/communicator.h"
#include "kernels/cpu/cpu_backend.h"
#include "mixer.h"
#include "runtime/engine/engine.h"
#include "synthetic_images.h"

namespace {

constexpr const char* kUsage =
    "usage: train_mixer [STEPS] [MICRO_BATCH]\n"
    "  trains an MLP-Mixer on synthetic stripe images through ZeroEngine's C++ API (ZeRO-3, activation\n"
    "  checkpointing, optimizer on the CPU) for STEPS optimizer steps (default 30) of MICRO_BATCH images per\n"
    "  rank (default 16); run it under mpirun for several ranks\n";

// A positive integer argument, or -1.
int64_t positive(const char* arg) {
  char* end = nullptr;
  const long long v = std::strtoll(arg, &end, 10);
  return end != arg && *end == '\0' && v > 0 ? v : -1;
}

int fail(const absl::Status& s) {
  std::fprintf(stderr, "train_mixer: %s\n", std::string(s.message()).c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
  }
  const int64_t steps = argc > 1 ? positive(argv[1]) : 30;
  const int64_t micro_batch = argc > 2 ? positive(argv[2]) : 16;
  if (argc > 3 || steps < 0 || micro_batch < 0) {
    std::fprintf(stderr, "train_mixer: STEPS and MICRO_BATCH must be positive integers\n%s", kUsage);
    return 2;
  }

  auto comm = zero::create_communicator();  // MPI under mpirun, else one rank
  if (!comm.ok()) return fail(comm.status());
  const int rank = (*comm)->rank(), world = (*comm)->world_size();

  example::SyntheticImages images({.side = 16, .patch = 4, .classes = 4});
  const example::MixerConfig model{.patches = images.patches(), .patch_dim = images.patch_dim(), .classes = 4};

  zero::EngineConfig config;
  config.micro_batch_size = micro_batch;
  config.pre_divide = world;  // gradients average over the ranks
  config.optimizer = {.type = zero::OptimizerType::kAdamW, .lr = 3e-3f, .weight_decay = 0.01f};
  config.zero.stage = zero::ZeroStage::k3;
  // Partition every parameter: by default (as DeepSpeed) tensors under 100k
  // elements stay whole on every rank, which would be all of this model.
  config.zero.param_persistence_threshold = 0;
  config.zero.offload_optimizer.device = zero::OffloadDevice::kCpu;
  // The CPU backend computes in host memory already, so "cpu" alone moves
  // nothing; this runs the path a GPU rank takes (optimizer state and step on
  // a host backend of its own, gradients and weights copied through staging).
  config.force_offload_path = true;
  config.activation_checkpointing.number_checkpoints = model.blocks;  // each block its own segment

  zero::CpuBackend backend;
  auto engine = zero::initialize(std::make_unique<example::Mixer>(model), config, backend, comm->get());
  if (!engine.ok()) return fail(engine.status());
  if (rank == 0) {
    std::printf("mixer: %lld parameters, %d rank(s), ZeRO-3, optimizer on the CPU, %zu checkpointed blocks\n",
                static_cast<long long>((*engine)->num_parameters()), world, (*engine)->num_checkpoint_segments());
  }

  for (int64_t step = 0; step < steps; ++step) {  // one micro-batch per step (gradient_accumulation_steps 1)
    const int64_t first = zero::first_global_sample(step, world, rank, micro_batch);
    const zero::Batch batch = images.batch(first, micro_batch);
    absl::Status s = (*engine)->forward(batch).status();
    if (s.ok()) s = (*engine)->backward();
    if (!s.ok()) return fail(s);
    absl::StatusOr<zero::StepResult> r = (*engine)->step();
    if (!r.ok()) return fail(r.status());
    // The mean over the global batch (every rank's micro-batch): the same on every rank.
    std::printf("rank %d step %3lld loss %.6f\n", rank, static_cast<long long>(r->global_step), r->loss);
    std::fflush(stdout);
  }
  return 0;
}
