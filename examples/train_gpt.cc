// Training a GPT with ZeroEngine's C++ API only (no config file, no CLI):
// build the model, initialize the engine, and run forward / backward / step
// per micro-batch, as with deepspeed.initialize().
//
//   train_gpt [TEXT_PATH] [STEPS]
//
// TEXT_PATH: a file, directory or glob of text (default: the license texts).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "graph/gpt.h"
#include "kernels/cpu/cpu_backend.h"
#include "runtime/data/data_loader.h"
#include "runtime/engine/engine.h"

int main(int argc, char** argv) {
  constexpr const char* kUsage =
      "usage: train_gpt [TEXT_PATH] [STEPS]\n"
      "  trains a 2-layer byte-level GPT through ZeroEngine's C++ API on TEXT_PATH (a file, directory or glob;\n"
      "  default /usr/share/common-licenses) for STEPS optimizer steps (default 50)\n";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a.size() > 1 && a[0] == '-') {
      std::fprintf(stderr, "train_gpt: unknown option %s\n%s", argv[i], kUsage);
      return 2;
    }
  }
  const std::string path = argc > 1 ? argv[1] : "/usr/share/common-licenses";
  char* end = nullptr;
  const int64_t steps = argc > 2 ? std::strtoll(argv[2], &end, 10) : 50;
  if (argc > 2 && (end == argv[2] || *end != '\0' || steps < 1)) {
    std::fprintf(stderr, "train_gpt: STEPS must be a positive integer, not \"%s\"\n%s", argv[2], kUsage);
    return 2;
  }

  zero::GptConfig model{.n_layer = 2, .n_head = 4, .d_model = 64, .vocab_size = 256, .seq_len = 32};
  zero::EngineConfig config;
  config.micro_batch_size = 8;
  config.gradient_accumulation_steps = 2;
  config.optimizer = {.type = zero::OptimizerType::kAdamW, .lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .weight_decay = 0.01f};

  auto source = zero::open_text_bytes(path);
  if (!source.ok()) {
    std::fprintf(stderr, "%s\n", std::string(source.status().message()).c_str());
    return 1;
  }
  auto data = zero::DataLoader::create(std::move(source).value(), model.seq_len, /*seed=*/1);
  if (!data.ok()) {
    std::fprintf(stderr, "%s\n", std::string(data.status().message()).c_str());
    return 1;
  }

  zero::CpuBackend backend;
  auto engine = zero::initialize(std::make_unique<zero::Gpt>(model), config, backend);
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", std::string(engine.status().message()).c_str());
    return 1;
  }
  for (int64_t step = 0; step < steps; ++step) {
    zero::StepResult r;
    for (int64_t micro = 0; micro < config.gradient_accumulation_steps; ++micro) {
      absl::StatusOr<zero::Batch> batch =
          (*data)->micro_batch(step, micro, 0, 1, config.micro_batch_size, config.gradient_accumulation_steps);
      if (!batch.ok()) {
        std::fprintf(stderr, "%s\n", std::string(batch.status().message()).c_str());
        return 1;
      }
      absl::Status s = (*engine)->forward(*batch).status();
      if (s.ok()) s = (*engine)->backward();
      if (!s.ok()) {
        std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
        return 1;
      }
      absl::StatusOr<zero::StepResult> stepped = (*engine)->step();
      if (!stepped.ok()) {
        std::fprintf(stderr, "%s\n", std::string(stepped.status().message()).c_str());
        return 1;
      }
      r = *stepped;
    }
    if (r.global_step % 10 == 0 || step == 0) {
      std::printf("step %3lld  loss %.4f  grad_norm %.3f\n", static_cast<long long>(r.global_step), r.loss,
                  r.grad_norm);
    }
  }
  return 0;
}
