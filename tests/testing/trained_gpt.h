// A small GPT (or Llama) engine on one rank trained `steps` AdamW steps on
// one fixed batch of 2 x 8 tokens below 41: the checkpoint and export tests'
// starting point (the model's vocabulary must be at least 41).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "graph/gpt.h"
#include "kernels/cpu/cpu_backend.h"
#include "runtime/engine/engine.h"

namespace zero::testing {

struct TrainedGpt {
  CpuBackend backend;
  std::unique_ptr<Engine> engine;
  std::vector<int32_t> ids, targets;
  TrainedGpt(const GptConfig& model, int steps, uint64_t seed = EngineConfig{}.seed) {
    EngineConfig ec;
    ec.micro_batch_size = 2;
    ec.seed = seed;
    engine = initialize(std::make_unique<Gpt>(model), ec, backend).value();
    for (int i = 0; i < 16; ++i) ids.push_back(i % 41), targets.push_back((i + 3) % 41);
    for (int s = 0; s < steps; ++s) {
      engine->forward({Tensor::wrap(ids.data(), {2, 8}, DType::kI32), Tensor::wrap(targets.data(), {2, 8}, DType::kI32)})
          .value();
      EXPECT_TRUE(engine->backward().ok());
      EXPECT_TRUE(engine->step().ok());
    }
  }
  // The fp32 master weights of parameter `name`.
  std::vector<float> weights(const std::string& name) {
    for (Parameter* p : engine->model().parameters())
      if (p->name() == name) return engine->master_values(*p);
    ADD_FAILURE() << "no parameter " << name;
    return {};
  }
};

}  // namespace zero::testing
