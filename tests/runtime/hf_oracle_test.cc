// Our model against Hugging Face transformers' own numbers: the golden
// models of tests/data/hf/{llama,llama3,gpt2,qwen2,qwen3,gemma} (tiny random
// models saved by transformers 5.24, tests/reference/make_hf_golden.py) with
// the logits, loss and every gradient PyTorch computed for one batch of 2 x
// 16 tokens.
//  * config.json (transformers 5.x's form) read by gpt_config_from_hf, the
//    weights by load_hf_weights into a one-rank fp32 engine (ZeRO stage 0
//    and 3): the loss within 1e-5 of the golden one (relative), the logits
//    within 1e-5 of the largest |logit|, and after backward every gradient
//    within 1e-4 of its tensor's largest |gradient| (stage 0, element by
//    element, Hugging Face's names and layout: GPT-2's Conv1D transposed,
//    the tied head's gradient in the token table's); at stage 3, where no
//    rank holds whole gradients, each parameter's gradient norm within 1e-4
//    of the golden tensor's (relative).
//    The golden values are fp32 with fp32-vs-fp64 noise of ~1e-6 (the
//    files' metadata); a wrong rotation direction, a transposed weight or a
//    missing llama3 frequency band is far outside these bounds.
//  * A zero-step round trip: the loaded engine saved as a checkpoint with
//    its config (hf_config_json), consolidated to a Hugging Face directory
//    in the source's dtype (fp32; bf16 for llama3), gives back exactly the
//    source's tensor names, dtypes, shapes and bytes, and a config.json that
//    reads back as the same model, of the same model_type. With ZE_KEEP_HF_EXPORT=DIR the exports
//    are kept in DIR/<model> (for tests/reference/check_hf_export.py).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <ostream>
#include <set>

#include "graph/context.h"
#include "graph/gpt.h"
#include "graph/moe.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/hf_weights.h"
#include "runtime/config/hf_config.h"
#include "runtime/config/json_file.h"
#include "runtime/engine/engine.h"
#include "tests/testing/hf_files.h"

namespace zero {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kBatch = 2, kSeq = 16;

std::string model_dir(const std::string& name) { return std::string(ZE_SOURCE_DIR) + "/tests/data/hf/" + name; }

std::string fresh_dir(const std::string& name) {
  const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string d = std::string(t->test_suite_name()) + "." + t->name() + "." + name;
  for (char& ch : d)
    if (ch == '/') ch = '_';
  d = ::testing::TempDir() + "/" + d;
  fs::remove_all(d);
  return d;
}

// golden.safetensors: the batch, PyTorch's logits, loss and gradients.
struct Golden {
  std::vector<int32_t> ids, targets;
  std::vector<float> logits;
  float loss = 0.0f;
  std::optional<float> aux_loss;  // a mixture of experts': load_balancing_loss_func's value
  std::map<std::string, std::vector<float>> grads;  // by Hugging Face's name
  std::map<std::string, Shape> grad_shapes;
};

Golden read_golden(const std::string& dir) {
  Golden g;
  absl::StatusOr<HfWeights> w = HfWeights::open(dir + "/golden.safetensors");
  EXPECT_TRUE(w.ok()) << w.status();
  if (!w.ok()) return g;
  g.ids = testing::hf_i32(*w, "input_ids");
  g.targets = testing::hf_i32(*w, "targets");
  g.logits = testing::hf_fp32(*w, "logits");
  g.loss = testing::hf_fp32(*w, "loss").at(0);
  if (w->tensors().count("aux_loss") > 0) g.aux_loss = testing::hf_fp32(*w, "aux_loss").at(0);
  for (const auto& [name, t] : w->tensors()) {
    if (name.rfind("grad.", 0) != 0) continue;
    g.grads[name.substr(5)] = testing::hf_fp32(*w, name);
    g.grad_shapes[name.substr(5)] = t.shape;
  }
  return g;
}

GptConfig read_config(const std::string& dir) {
  absl::StatusOr<Json> j = load_json_file(dir + "/config.json");
  EXPECT_TRUE(j.ok()) << j.status();
  absl::StatusOr<GptConfig> c = gpt_config_from_hf(*j, dir + "/config.json");
  EXPECT_TRUE(c.ok()) << c.status();
  return c.value_or(GptConfig{});
}

std::unique_ptr<Engine> loaded_engine(Backend& backend, const GptConfig& config, const std::string& dir,
                                      ZeroStage stage) {
  EngineConfig ec;
  ec.micro_batch_size = kBatch;
  ec.zero.stage = stage;
  absl::StatusOr<std::unique_ptr<Engine>> e = initialize(std::make_unique<Gpt>(config), ec, backend);
  EXPECT_TRUE(e.ok()) << e.status();
  if (!e.ok()) return nullptr;
  const absl::Status s = load_hf_weights(**e, config, dir);
  EXPECT_TRUE(s.ok()) << s;
  return s.ok() ? *std::move(e) : nullptr;
}

double max_abs(const std::vector<float>& v) {
  double m = 0.0;
  for (float x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

struct OracleCase {
  std::string model;
  ZeroStage stage;
};
void PrintTo(const OracleCase& c, std::ostream* os) { *os << c.model << " at ZeRO stage " << stage_number(c.stage); }

class HfOracleTest : public ::testing::TestWithParam<OracleCase> {};

TEST_P(HfOracleTest, LossLogitsAndGradientsMatchTransformers) {
  const std::string name = GetParam().model;
  const ZeroStage stage = GetParam().stage;
  const std::string dir = model_dir(name);
  GptConfig config = read_config(dir);
  config.seq_len = kSeq;
  const Golden golden = read_golden(dir);
  ASSERT_EQ(golden.ids.size(), static_cast<size_t>(kBatch * kSeq));
  ASSERT_EQ(golden.logits.size(), static_cast<size_t>(kBatch * kSeq * config.vocab_size));

  CpuBackend backend;
  std::unique_ptr<Engine> engine = loaded_engine(backend, config, dir, stage);
  ASSERT_NE(engine, nullptr);
  std::vector<int32_t> ids = golden.ids, targets = golden.targets;
  const Batch batch{Tensor::wrap(ids.data(), {kBatch, kSeq}, DType::kI32),
                    Tensor::wrap(targets.data(), {kBatch, kSeq}, DType::kI32)};

  // Logits: the model's forward through a context of our own (stage 0,
  // where the parameters are whole and need no gathering).
  if (stage == ZeroStage::k0) {
    Context ctx(backend, DType::kF32);
    ctx.set_grad_enabled(false);
    Tensor input = backend.empty({kBatch, kSeq}, DType::kI32, MemCategory::kActivations);
    backend.copy(input, batch.inputs);
    const Tensor logits = ctx.forward(engine->model(), input);
    ASSERT_TRUE(ctx.take_status().ok());
    ASSERT_EQ(logits.shape(), (Shape{kBatch, kSeq, config.vocab_size}));
    const std::vector<float> ours = download_fp32(backend, logits.view({logits.numel()}));
    const double scale = max_abs(golden.logits);
    double worst = 0.0;
    int64_t at = 0;
    for (size_t i = 0; i < ours.size(); ++i) {
      const double d = std::fabs(static_cast<double>(ours[i]) - golden.logits[i]);
      if (d > worst) worst = d, at = static_cast<int64_t>(i);
    }
    std::printf("%s: logits max |ours - transformers| / max |logit| = %.3g (max |logit| %.4g, at %lld)\n",
                name.c_str(), worst / scale, scale, static_cast<long long>(at));
    EXPECT_LE(worst, 1e-5 * scale) << name << ": logit " << at << " is " << ours[static_cast<size_t>(at)]
                                   << ", transformers says " << golden.logits[static_cast<size_t>(at)];
  }

  // The loss: the engine's mean over the micro-batch's 32 tokens (one
  // micro-batch, one rank: no further division).
  absl::StatusOr<float> loss = engine->forward(batch);
  ASSERT_TRUE(loss.ok()) << loss.status();
  const double loss_rel = std::fabs(static_cast<double>(*loss) - golden.loss) / std::fabs(golden.loss);
  std::printf("%s stage %d: loss %.8f, transformers %.8f, relative difference %.3g\n", name.c_str(),
              stage_number(stage), *loss, golden.loss, loss_rel);
  EXPECT_LE(loss_rel, 1e-5) << name << ": loss " << *loss << ", transformers says " << golden.loss;
  if (golden.aux_loss) {
    // A mixture of experts' loss is cross-entropy + router_aux_loss_coef x the
    // load-balancing loss, which its gradients carry too.
    const MoeLosses* moe = model_of(engine->model()).moe_losses();
    ASSERT_NE(moe, nullptr) << name;
    std::printf("%s: load-balancing loss %.8f, transformers %.8f\n", name.c_str(), moe->last_aux_loss(),
                *golden.aux_loss);
    EXPECT_NEAR(moe->last_aux_loss(), *golden.aux_loss, 1e-5 * *golden.aux_loss) << name;
  }
  ASSERT_TRUE(engine->backward().ok());

  // Gradients, under Hugging Face's names and layouts.
  std::set<std::string> seen;
  double worst_rel = 0.0;
  std::string worst_name;
  for (Parameter* p : engine->model().parameters()) {
    // Hugging Face's tensors of this parameter: itself, or a fused one's
    // parts (q_proj, k_proj, v_proj of our qkv_proj), each compared alone.
    std::vector<FusedPart> parts = fused_parts(config, p->name());
    if (parts.empty()) parts.push_back({p->name(), p->shape()[0]});
    const std::vector<float> ours_all = stage == ZeroStage::k0 ? engine->grad_values(*p) : std::vector<float>();
    double want_sq = 0.0;  // stage 3: the whole parameter's norm
    int64_t first = 0;     // the part's first element in ours
    for (const FusedPart& part : parts) {
      const std::string hf = hf_tensor_name(config, part.name);
      seen.insert(hf);
      auto it = golden.grads.find(hf);
      ASSERT_NE(it, golden.grads.end()) << "no golden gradient grad." << hf << " for " << p->name();
      std::vector<float> want = it->second;
      const int64_t numel = parts.size() == 1 ? p->numel() : p->numel() / p->shape()[0] * part.rows;
      ASSERT_EQ(static_cast<int64_t>(want.size()), numel) << hf;
      if (hf_stores_transposed(config, p->name())) {  // [in, out] -> our [out, in]
        const int64_t rows = p->shape()[0], cols = p->shape()[1];
        ASSERT_EQ(golden.grad_shapes.at(hf), (Shape{cols, rows})) << hf;
        std::vector<float> t(want.size());
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) t[static_cast<size_t>(r * cols + c)] = want[static_cast<size_t>(c * rows + r)];
        want = std::move(t);
      }
      const double scale = max_abs(want);
      ASSERT_GT(scale, 0.0) << hf;
      if (stage == ZeroStage::k0) {
        const std::vector<float> ours(ours_all.begin() + first, ours_all.begin() + first + numel);
        double worst = 0.0;
        size_t at = 0;
        for (size_t i = 0; i < ours.size(); ++i) {
          const double d = std::fabs(static_cast<double>(ours[i]) - want[i]);
          if (d > worst) worst = d, at = i;
        }
        if (worst / scale > worst_rel) worst_rel = worst / scale, worst_name = hf;
        EXPECT_LE(worst, 1e-4 * scale) << name << ": gradient of " << hf << " (" << p->name() << ") element " << at
                                       << " is " << ours[at] << ", transformers says " << want[at] << " (max |grad| "
                                       << scale << ", relative error " << worst / scale << ")";
      } else {
        for (float g : want) want_sq += static_cast<double>(g) * g;
      }
      first += numel;
    }
    if (stage != ZeroStage::k0) {
      // No rank holds whole gradients at stage 3: compare each parameter's norm.
      const std::string hf = hf_tensor_name(config, p->name());
      const double ours = std::sqrt(engine->state().local_grad_square_sum([&](const Parameter& q) { return &q == p; }));
      const double rel = std::fabs(ours - std::sqrt(want_sq)) / std::sqrt(want_sq);
      if (rel > worst_rel) worst_rel = rel, worst_name = hf;
      EXPECT_LE(rel, 1e-4) << name << ": |gradient of " << hf << "| is " << ours << ", transformers' "
                           << std::sqrt(want_sq);
    }
  }
  std::printf("%s stage %d: worst gradient %s, %s %.3g\n", name.c_str(), stage_number(stage), worst_name.c_str(),
              stage == ZeroStage::k0 ? "max |ours - transformers| / max |grad| =" : "relative norm difference",
              worst_rel);
  // Every golden gradient was compared (nothing of the model is left out).
  std::set<std::string> golden_names;
  for (const auto& [n, g] : golden.grads) golden_names.insert(n);
  EXPECT_EQ(seen, golden_names);
}

INSTANTIATE_TEST_SUITE_P(Models, HfOracleTest,
                         ::testing::Values(OracleCase{"llama", ZeroStage::k0}, OracleCase{"llama3", ZeroStage::k0},
                                           OracleCase{"gpt2", ZeroStage::k0}, OracleCase{"qwen2", ZeroStage::k0},
                                           OracleCase{"qwen3", ZeroStage::k0}, OracleCase{"gemma", ZeroStage::k0},
                                           OracleCase{"llama", ZeroStage::k3}, OracleCase{"llama3", ZeroStage::k3},
                                           OracleCase{"gpt2", ZeroStage::k3}, OracleCase{"qwen2", ZeroStage::k3},
                                           OracleCase{"qwen3", ZeroStage::k3}, OracleCase{"gemma", ZeroStage::k3},
                                           OracleCase{"mixtral", ZeroStage::k0}, OracleCase{"qwen2_moe", ZeroStage::k0},
                                           OracleCase{"qwen3_moe", ZeroStage::k0}, OracleCase{"mixtral", ZeroStage::k3},
                                           OracleCase{"qwen2_moe", ZeroStage::k3}, OracleCase{"qwen3_moe", ZeroStage::k3}),
                         [](const ::testing::TestParamInfo<OracleCase>& info) {
                           return info.param.model + "_stage" + std::to_string(stage_number(info.param.stage));
                         });


class HfRoundTripTest : public ::testing::TestWithParam<std::string> {};

TEST_P(HfRoundTripTest, ExportAfterLoadingIsTheSourceBitForBit) {
  const std::string name = GetParam();
  const std::string dir = model_dir(name);
  const GptConfig source_config = read_config(dir);
  GptConfig config = source_config;
  config.seq_len = kSeq;
  absl::StatusOr<HfWeights> source = HfWeights::open(dir);
  ASSERT_TRUE(source.ok()) << source.status();
  const std::string dtype_name = source->tensors().begin()->second.dtype;
  const DType dtype = dtype_name == "BF16" ? DType::kBF16 : DType::kF32;

  CpuBackend backend;
  std::unique_ptr<Engine> engine = loaded_engine(backend, config, dir, ZeroStage::k0);
  ASSERT_NE(engine, nullptr);
  const std::string ckpt = fresh_dir("ckpt");
  absl::StatusOr<std::string> tag = save_checkpoint(*engine, {ckpt, "", 0, hf_config_json(config, dtype)});
  ASSERT_TRUE(tag.ok()) << tag.status();

  std::string out = fresh_dir("export");
  if (const char* keep = std::getenv("ZE_KEEP_HF_EXPORT"); keep != nullptr && *keep != '\0') {
    out = std::string(keep) + "/" + name;
    fs::remove_all(out);
  }
  // The sharded source exports sharded too (shards of at most 64 KiB).
  const int64_t shard_bytes = source->files().size() > 1 ? int64_t{64} << 10 : int64_t{1} << 40;
  const absl::Status s = consolidate_to_hf(ckpt, "", out, dtype, shard_bytes);
  ASSERT_TRUE(s.ok()) << s;
  std::printf("%s: exported to %s\n", name.c_str(), out.c_str());

  absl::StatusOr<HfWeights> exported = HfWeights::open(out);
  ASSERT_TRUE(exported.ok()) << exported.status();
  if (source->files().size() > 1) {
    EXPECT_GT(exported->files().size(), 1u);
  }
  testing::expect_same_hf_tensors(*exported, *source, name);

  absl::StatusOr<Json> written = load_json_file(out + "/config.json");
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ((*written)["torch_dtype"], dtype == DType::kBF16 ? "bfloat16" : "float32");
  absl::StatusOr<GptConfig> back = gpt_config_from_hf(*written, out + "/config.json");
  ASSERT_TRUE(back.ok()) << back.status();
  testing::expect_same_model(source_config, *back);
  absl::StatusOr<Json> source_json = load_json_file(dir + "/config.json");
  ASSERT_TRUE(source_json.ok()) << source_json.status();
  EXPECT_EQ((*written)["model_type"], (*source_json)["model_type"]);
  EXPECT_EQ((*written)["architectures"], (*source_json)["architectures"]);
}

INSTANTIATE_TEST_SUITE_P(Models, HfRoundTripTest,
                         ::testing::Values("llama", "llama3", "gpt2", "qwen2", "qwen3", "gemma", "mixtral",
                                           "qwen2_moe", "qwen3_moe"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace zero
