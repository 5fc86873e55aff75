// Megatron tensor parallelism composed with ZeRO over the data group: a GPT
// on a mesh of T tensor x D data ranks trains what one rank trains on the
// same global batch, at every ZeRO stage. Under mpirun with W ranks the
// meshes with T x D = W of T in {1, 2, 4} and D in {1, 2} run (W = 1, 2, 4, 8
// cover all six); the model has 4 heads and a vocabulary of 37, which divides
// by neither 2 nor 4 (the vocabulary-parallel layers split it unevenly).
//
// Per mesh and stage, over 20 steps of SGD with momentum (as the stage
// parity test, zero/zero_parity_test.cc, and for the same reason):
//  * the loss matches one rank's within 1e-5 relative, the gradient norm
//    within 5e-5 (1e-6 at step 1);
//  * parameters are bitwise identical across the data replicas, and the
//    replicated ones (layer norms, position table, row-parallel biases)
//    across the tensor group too;
//  * the full weights reassembled from the tensor slices of the fp32 master
//    match one rank's within 1e-5 of the largest;
//  * each rank holds the replicated parameters whole and 1/T of the split
//    ones (the vocabulary rows by even_split), exactly;
//  * the tensor group moves Megatron's volume in forward + backward: per
//    layer 2 all-reduces of B*S*C forward and 2 backward, plus the
//    embedding's (forward) and the head's (backward), plus the loss's N + 2N
//    floats, as the communicator counts them.
// Each of those holds with sequence parallelism too (Megatron-SP: the
// tensor group's volume is then its all-gathers and reduce-scatters, plus
// the sums of the layer norms' and position table's gradients).
// With dropout 0.1 the losses match one rank's too: masks are keyed by the
// global sample and position, whether the dropouts act on the full
// activations every tensor rank holds or on its sequence shard.
//
// Llama (TensorParallelLlamaTest), Qwen2, Qwen3 and Gemma
// (TensorParallelFamiliesTest) match one rank the same way, with and
// without sequence parallelism, and so does a Llama whose heads and MLP
// width T does not divide (TensorParallelUnevenHeadsTest: 9 query heads
// over 3 key/value heads at T = 2 and 3, each rank its key/value heads'
// query heads).
//
// Checkpoints (TensorParallelCheckpointTest): a run at T = 2 saves the
// unsplit tensors (its slices as contiguous or strided segments); that
// checkpoint resumes at T = 1 on one rank, at T = 1 over the whole world
// (stage 3), at the largest T the heads allow (stage 0) and at T = 2 (stage 2),
// and every resumed run's losses equal the uninterrupted run's within 1e-5;
// consolidated, it is the same safetensors file (names, shapes, layout) as a
// T = 1 run's at the same step, its values within 1e-5 of the largest. So
// does a checkpoint of the uneven head split, resumed at T = 1 and T = 2.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>

#include "comm/device_mesh.h"
#include "core/strings.h"
#include "graph/gpt.h"
#include "graph/parallel_layers.h"
#include "kernels/cpu/cpu_backend.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/engine/engine.h"
#include "tests/testing/counting_rows.h"
#include "tests/testing/mpi_test_main.h"
#include "tests/testing/same_model_file.h"

#include <unistd.h>

#include <cstring>

namespace zero {
namespace {

using testing::fnv;
using testing::same_everywhere;
using testing::world;

const GptConfig kModel{.n_layer = 2, .n_head = 4, .d_model = 16, .vocab_size = 37, .seq_len = 8};
constexpr int64_t kGlobalBatch = 24;  // divides over 1, 2, 4 and 8 data-parallel ranks
constexpr int kSteps = 20;
const OptimizerConfig kSgd{.type = OptimizerType::kSGD, .lr = 0.1f, .weight_decay = 0.01f, .momentum = 0.9f};

struct RunResult {
  std::vector<double> losses, norms;
  std::map<std::string, std::vector<float>> master;  // full (reassembled) fp32 master weights by name
  bool data_replicas_identical = true, tensor_replicas_identical = true;
  int64_t local_parameters = 0;
  int64_t tensor_bytes_first_pass = -1;  // the tensor group's bytes over the first forward + backward
};

EngineConfig engine_config(int stage, int data_size) {
  EngineConfig ec;
  ec.zero.stage = zero_stage(stage);
  ec.zero.reduce_bucket_size = ec.zero.allgather_bucket_size = ec.zero.prefetch_bucket_size = 500;
  ec.zero.param_persistence_threshold = 20;
  ec.zero.sub_group_size = 1000;
  ec.micro_batch_size = kGlobalBatch / data_size;
  ec.pre_divide = data_size;
  ec.optimizer = kSgd;
  ec.gradient_clipping = 1.0f;
  return ec;
}

// What a run adds to the plain one.
struct Options {
  std::optional<int64_t> segments;  // activation_checkpointing.number_checkpoints
  bool partition = false;           // activation_checkpointing.partition_activations
  bool cpu_checkpointing = false;   // segment inputs to host memory (forced on the CPU backend)
  bool cpu_offload = false;         // ZeRO-Offload of the optimizer (and at stage 3 the parameters), forced
};

// An engine on a mesh of `tensor` x (comm's size / tensor) over `comm`.
struct Trainer {
  std::unique_ptr<DeviceMesh> mesh;
  CpuBackend backend;
  std::unique_ptr<Engine> engine;
  testing::CountingRows rows{kModel.seq_len, kModel.vocab_size};

  // Forward and backward of optimizer step `step`'s micro-batch (its global batch's rows of this data rank).
  void pass(int step) {
    const int data_size = mesh->shape().data, data_rank = mesh->coordinates().data;
    const int64_t mb = engine->config().micro_batch_size;
    EXPECT_TRUE(engine->forward(rows.make((step * data_size + data_rank) * mb, mb)).ok());
    EXPECT_TRUE(engine->backward().ok());
  }
  // The optimizer step after pass(); the loss is NaN when it failed.
  StepResult update() {
    absl::StatusOr<StepResult> r = engine->step();
    EXPECT_TRUE(r.ok()) << r.status();
    if (r.ok()) return *r;
    StepResult failed;
    failed.loss = NAN;
    return failed;
  }
  // The mean loss of optimizer step `step` (its global batch).
  double step(int step) {
    pass(step);
    return update().loss;
  }
};

std::unique_ptr<Trainer> make_trainer(Communicator& comm, int stage, int tensor, float dropout = 0.0f,
                                      bool sequence_parallel = false, const Options& options = {},
                                      const GptConfig& arch = kModel) {
  auto t = std::make_unique<Trainer>();
  absl::StatusOr<std::unique_ptr<DeviceMesh>> m = DeviceMesh::create(comm, tensor);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return nullptr;
  t->mesh = std::move(*m);
  EngineConfig ec = engine_config(stage, t->mesh->shape().data);
  ec.activation_checkpointing.number_checkpoints = options.segments;
  ec.activation_checkpointing.partition_activations = options.partition;
  ec.activation_checkpointing.cpu_checkpointing = options.cpu_checkpointing;
  ec.force_offload_path = options.cpu_checkpointing || options.cpu_offload;
  if (options.cpu_offload) {
    ec.zero.offload_optimizer.device = OffloadDevice::kCpu;
    if (stage == 3) ec.zero.offload_param.device = OffloadDevice::kCpu;
  }
  GptConfig model = arch;
  model.dropout = dropout;
  absl::StatusOr<std::unique_ptr<Engine>> e = Engine::create(
      std::make_unique<Gpt>(model, &t->mesh->tensor(), sequence_parallel), ec, t->backend, *t->mesh);
  EXPECT_TRUE(e.ok()) << e.status();
  if (!e.ok()) return nullptr;
  t->engine = std::move(*e);
  return t;
}

// A run over `comm` at tensor size `tensor` (the rest data-parallel).
RunResult train_on(Communicator& comm, int stage, int tensor, float dropout, bool sequence_parallel,
                   const Options& options, const GptConfig& arch) {
  std::unique_ptr<Trainer> t = make_trainer(comm, stage, tensor, dropout, sequence_parallel, options, arch);
  RunResult out;
  if (t == nullptr) return out;
  Engine& e = *t->engine;
  const DeviceMesh& mesh = *t->mesh;
  for (Parameter* p : e.model().parameters()) out.local_parameters += p->numel();
  for (int step = 0; step < kSteps; ++step) {
    const int64_t tensor_bytes = mesh.tensor().bytes_communicated();
    t->pass(step);
    if (step == 0) out.tensor_bytes_first_pass = mesh.tensor().bytes_communicated() - tensor_bytes;
    const StepResult r = t->update();
    if (std::isnan(r.loss)) return out;
    out.losses.push_back(r.loss);
    out.norms.push_back(r.grad_norm);
    uint64_t all = 0xcbf29ce484222325ull, replicated = all;
    for (Parameter* p : e.model().parameters()) {
      absl::StatusOr<std::vector<float>> v = e.state().gather_parameter(*p);
      EXPECT_TRUE(v.ok()) << v.status();
      if (!v.ok()) continue;
      all = fnv(*v, all);
      if (!p->slice()) replicated = fnv(*v, replicated);
    }
    out.data_replicas_identical = out.data_replicas_identical && same_everywhere(mesh.data(), all);
    out.tensor_replicas_identical = out.tensor_replicas_identical && same_everywhere(mesh.tensor(), replicated);
  }
  // The full master weights: each tensor rank places its slice in the
  // unsplit tensor, and the slices are summed over the tensor group.
  out.master = testing::full_master_weights(e, mesh.tensor());
  return out;
}

// tensor = 0: the reference, one rank on a communicator of its own.
RunResult train(int stage, int tensor, float dropout = 0.0f, bool sequence_parallel = false,
                const Options& options = {}, const GptConfig& arch = kModel) {
  const std::unique_ptr<Communicator> own = tensor == 0 ? make_local_communicator() : nullptr;
  return train_on(own ? *own : world(), stage, std::max(tensor, 1), dropout, sequence_parallel, options, arch);
}

const RunResult& reference(float dropout) {
  static std::map<float, RunResult> cache;
  auto it = cache.find(dropout);
  if (it == cache.end()) it = cache.emplace(dropout, train(0, 0, dropout)).first;
  return it->second;
}

// The tensor sizes that run at this world size (T x D = W, D in {1, 2}).
std::vector<int> tensor_sizes() {
  std::vector<int> out;
  for (int t : {1, 2, 4})
    for (int d : {1, 2})
      if (t * d == world().world_size()) out.push_back(t);
  return out;
}

void expect_matches(const RunResult& got, const RunResult& ref, const std::string& what) {
  testing::expect_same_trajectory(got.losses, got.norms, ref.losses, ref.norms, what);
  EXPECT_TRUE(got.data_replicas_identical) << what << ": parameters differ across data replicas";
  EXPECT_TRUE(got.tensor_replicas_identical) << what << ": replicated parameters differ across the tensor group";
  ASSERT_EQ(got.master.size(), ref.master.size()) << what;
  testing::expect_same_weights(got.master, ref.master, what);
}

// Replicated parameters whole, split ones by 1/T (the vocabulary's rows by even_split).
int64_t expected_local_parameters(int tensor, int tensor_rank) {
  const int64_t c = kModel.d_model, t = tensor;
  const int64_t split_per_block = (3 * c * c + 3 * c) + c * c + (4 * c * c + 4 * c) + 4 * c * c;
  const int64_t replicated_per_block = 2 * c + c + 2 * c + c;  // ln_1, attn c_proj bias, ln_2, mlp c_proj bias
  const int64_t vocab_rows = even_split(kModel.vocab_size, tensor, tensor_rank).size;
  return kModel.n_layer * (split_per_block / t + replicated_per_block) + vocab_rows * c + kModel.seq_len * c + 2 * c;
}

// Megatron's forward + backward volume in the tensor group, as the
// communicator counts it: an all-reduce of n floats 2 (T-1)/T n, an
// all-gather or reduce-scatter of n floats (T-1)/T n. u: one all-gather of
// the activations [rows, C].
int64_t expected_tensor_bytes(int tensor, int64_t rows, bool sequence_parallel) {
  auto all_reduce = [&](int64_t floats) { return 2 * (tensor - 1) * floats * 4 / tensor; };
  const int64_t c = kModel.d_model, activation = rows * c, loss = all_reduce(rows) + all_reduce(2 * rows);
  // Per layer 2 all-reduces forward (after attention and MLP) and 2 backward
  // (their inputs' dx); the embedding's forward, the head's dx backward.
  if (!sequence_parallel) return (4 * kModel.n_layer + 2) * all_reduce(activation) + loss;
  const int64_t u = (tensor - 1) * (activation / tensor) * 4;
  // Per sublayer forward: all-gather the input, reduce-scatter the output;
  // backward: all-gather dy, all-gather the input again, reduce-scatter dx.
  // The embedding reduce-scatters forward and all-gathers dy; the head
  // gathers forward, and backward gathers again and reduce-scatters dx. The
  // layer norms (weight and bias, 2 per layer + ln_f) and the position table
  // sum their gradients.
  const int64_t per_layer = 2 * (2 + 3) * u;
  return kModel.n_layer * per_layer + 2 * u + 3 * u + loss + (2 * kModel.n_layer + 1) * 2 * all_reduce(c) +
         all_reduce(kModel.seq_len * c);
}

class TensorParallelTest : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(TensorParallelTest, MatchesOneRankOnTheSameGlobalBatch) {
  const auto [stage, sp] = GetParam();
  for (int tensor : tensor_sizes()) {
    const int data = world().world_size() / tensor;
    const std::string what = "T=" + std::to_string(tensor) + " D=" + std::to_string(data) + " stage " +
                             std::to_string(stage) + (sp ? " sequence-parallel" : "");
    const RunResult got = train(stage, tensor, 0.0f, sp);
    expect_matches(got, reference(0.0f), what);
    const int tensor_rank = world().rank() % tensor;
    EXPECT_EQ(got.local_parameters, expected_local_parameters(tensor, tensor_rank)) << what;
    const int64_t rows = kGlobalBatch / data * kModel.seq_len;
    EXPECT_EQ(got.tensor_bytes_first_pass, tensor == 1 ? 0 : expected_tensor_bytes(tensor, rows, sp)) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Stages, TensorParallelTest, ::testing::Combine(::testing::Values(0, 1, 2, 3), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<int, bool>>& info) {
                           return "stage" + std::to_string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_sequence_parallel" : "");
                         });

TEST(TensorParallelDropoutTest, MatchesOneRankWithDropout) {
  for (int tensor : tensor_sizes()) {
    for (int stage : {0, 3}) {
      for (bool sp : {false, true}) {
        const std::string what = "dropout 0.1, T=" + std::to_string(tensor) + " stage " + std::to_string(stage) +
                                 (sp ? " sequence-parallel" : "");
        expect_matches(train(stage, tensor, 0.1f, sp), reference(0.1f), what);
      }
    }
  }
}

// The Llama family split the same way: q/k/v_proj and gate/up_proj
// column-parallel (8 query heads and 4 key/value heads divided by T), o_proj
// and down_proj row-parallel, the RMSNorms whole (summed over the group with
// sequence parallelism), the untied head (and, tied, the table) by
// vocabulary rows.
TEST(TensorParallelLlamaTest, MatchesOneRankTiedAndUntied) {
  for (bool tied : {false, true}) {
    const GptConfig llama{.arch = ModelArch::kLlama, .n_layer = 2, .n_head = 8, .d_model = 32, .vocab_size = 37,
                          .seq_len = 8, .n_kv_head = 4, .d_ff = 40, .tie_word_embeddings = tied};
    const RunResult ref = train(0, 0, 0.0f, false, {}, llama);
    for (int tensor : tensor_sizes()) {
      for (int stage : {0, 3}) {
        for (bool sp : {false, true}) {
          const std::string what = std::string("Llama ") + (tied ? "tied" : "untied") + ", T=" +
                                   std::to_string(tensor) + " stage " + std::to_string(stage) +
                                   (sp ? " sequence-parallel" : "");
          expect_matches(train(stage, tensor, 0.0f, sp, {}, llama), ref, what);
        }
      }
    }
  }
}

// Qwen2, Qwen3 and Gemma split the same way, each with what it adds to
// Llama: Qwen2's q/k/v biases split with their columns; Qwen3's q/k norms
// whole on every rank, which normalises its own heads with them (their
// gradients summed over the tensor group, so the replicas stay equal);
// heads of their own width (8, where d_model / n_head is 4: o_proj's input
// is 64 wide, split by heads); Gemma's (1 + w) norms (summed over the group
// with sequence parallelism), embedding scale, GeGLU and tied table, and
// logit soft-capping (flag of any family) on each rank's vocabulary slice.
TEST(TensorParallelFamiliesTest, QwenAndGemmaMatchOneRank) {
  for (const ModelArch arch : {ModelArch::kQwen2, ModelArch::kQwen3, ModelArch::kGemma}) {
    GptConfig model{.arch = arch, .n_layer = 2, .n_head = 8, .d_model = 32, .vocab_size = 37, .seq_len = 8,
                    .n_kv_head = 4, .d_ff = 40, .tie_word_embeddings = arch == ModelArch::kGemma};
    if (arch != ModelArch::kQwen2) model.d_head = 8;
    if (arch == ModelArch::kGemma) model.logit_softcap = 0.5f;  // on each rank's vocabulary slice
    const RunResult ref = train(0, 0, 0.0f, false, {}, model);
    for (int tensor : tensor_sizes()) {
      for (const auto& [stage, sp] : {std::pair{0, false}, std::pair{3, true}}) {
        const std::string what = cat(model.family_name(), ", T=", tensor, " stage ", stage,
                                     sp ? " sequence-parallel" : "");
        expect_matches(train(stage, tensor, 0.0f, sp, {}, model), ref, what);
      }
    }
  }
}

// Heads the tensor size does not divide, as AutoTP splits SmolLM-135M's:
// 9 query heads over 3 key/value heads, the key/value heads split as evenly
// as can be (even_split) and each with its 3 query heads, so at T = 2 rank 0
// computes key/value heads 0-1 (query heads 0-5) and rank 1 head 2 (6-8); at
// T = 3 one each. The MLP's 40 features split 20 / 20 and 14 / 13 / 13.
// Each rank holds exactly those slices, and the run matches one rank's. T = 3
// runs on the first 3 ranks of a world of 4 or more.
TEST(TensorParallelUnevenHeadsTest, NineQueryHeadsOverThreeKeyValueHeadsMatchOneRank) {
  const GptConfig model{.arch = ModelArch::kLlama, .n_layer = 2, .n_head = 9, .d_model = 32, .vocab_size = 37,
                        .seq_len = 8, .n_kv_head = 3, .d_ff = 40, .d_head = 8};
  const RunResult ref = train(0, 0, 0.0f, false, {}, model);
  const int w = world().world_size();
  // The first 3 ranks' group (color 0), the others' (color 1, idle).
  absl::StatusOr<std::unique_ptr<Communicator>> three = world().split(w >= 3 && world().rank() < 3 ? 0 : 1,
                                                                      world().rank());
  ASSERT_TRUE(three.ok()) << three.status();
  for (int tensor : {2, 3}) {
    Communicator* comm = tensor == 2 ? (w % 2 == 0 ? &world() : nullptr)
                                     : (w >= 3 && world().rank() < 3 ? three->get() : nullptr);
    if (comm == nullptr) continue;
    const int tensor_rank = comm->rank() % tensor;
    // Local parameters: per layer q_proj and o_proj 32 x (8 per query head),
    // k_proj and v_proj 32 x 8 per key/value head, gate/up/down 32 per MLP
    // feature, two norms whole; the untied table and head by vocabulary rows;
    // the final norm.
    const int64_t kv = even_split(3, tensor, tensor_rank).size, ff = even_split(40, tensor, tensor_rank).size;
    const int64_t per_layer = 2 * 32 * (3 * kv * 8) + 2 * 32 * (kv * 8) + 3 * 32 * ff + 2 * 32;
    const int64_t expected = 2 * per_layer + 2 * even_split(37, tensor, tensor_rank).size * 32 + 32;
    for (const auto& [stage, sp] : {std::pair{0, false}, std::pair{3, false}, std::pair{3, true}}) {
      const std::string what = cat("9 query / 3 key-value heads, T=", tensor, " D=", comm->world_size() / tensor,
                                   " stage ", stage, sp ? " sequence-parallel" : "");
      if (sp && model.seq_len % tensor != 0) continue;  // sequence shards need seq_len / T positions
      const RunResult got = train_on(*comm, stage, tensor, 0.0f, sp, {}, model);
      expect_matches(got, ref, what);
      EXPECT_EQ(got.local_parameters, expected) << what << ", tensor rank " << tensor_rank;
    }
  }
}

// partition_activations: each tensor rank keeps half of every checkpointed
// block input and gathers it back for the recompute; the losses and the
// weights are bitwise those of keeping the whole inputs (the recompute sees
// the same bits), with the inputs in host memory too.
TEST(TensorParallelCheckpointingTest, PartitionedActivationsTrainBitwiseAsWholeOnes) {
  if (world().world_size() % 2 != 0) GTEST_SKIP() << "needs a tensor group of 2";
  for (bool cpu : {false, true}) {
    const RunResult whole = train(1, 2, 0.0f, false, {.segments = 2, .cpu_checkpointing = cpu});
    const RunResult parts = train(1, 2, 0.0f, false, {.segments = 2, .partition = true, .cpu_checkpointing = cpu});
    ASSERT_EQ(whole.losses.size(), parts.losses.size());
    for (size_t s = 0; s < whole.losses.size(); ++s) {
      EXPECT_EQ(whole.losses[s], parts.losses[s]) << "step " << s + 1 << (cpu ? " (cpu_checkpointing)" : "");
    }
    EXPECT_EQ(whole.master, parts.master) << (cpu ? "cpu_checkpointing" : "");
    expect_matches(parts, reference(0.0f), "partition_activations");
  }
}

// ZeRO-Offload composes with tensor parallelism unchanged: the optimizer
// state (and at stage 3 the parameter shard) of each tensor slice in host
// memory, through the device path (forced on the CPU backend).
TEST(TensorParallelOffloadTest, OffloadedRunsMatchOneRank) {
  for (int tensor : tensor_sizes()) {
    if (tensor == 1) continue;
    for (int stage : {2, 3}) {
      const std::string what = "cpu offload, T=" + std::to_string(tensor) + " stage " + std::to_string(stage);
      expect_matches(train(stage, tensor, 0.0f, false, {.cpu_offload = true}), reference(0.0f), what);
    }
  }
}

// The directory every rank of this run shares (rank 0 names it).
std::string shared_dir(const std::string& what) {
  int32_t pid = static_cast<int32_t>(::getpid());
  EXPECT_TRUE(world().broadcast_async(&pid, 1, DType::kI32, 0)->wait().ok());
  return std::filesystem::temp_directory_path().string() + "/ze_tp_" + what + "_" + std::to_string(pid);
}

// Rank 0 consolidates the checkpoints saved at T = 2 ("t2") and T = 1 ("t1")
// at `step`: the same model file, to rounding. Then the directory goes.
void expect_t2_consolidates_as_t1(const std::string& dir, int step) {
  if (world().rank() == 0) {
    const std::string tag = "global_step" + std::to_string(step);
    EXPECT_TRUE(consolidate_to_safetensors(dir + "/t2", tag, dir + "/t2.safetensors", DType::kF32).ok());
    EXPECT_TRUE(consolidate_to_safetensors(dir + "/t1", tag, dir + "/t1.safetensors", DType::kF32).ok());
    testing::expect_same_model_file(dir + "/t2.safetensors", dir + "/t1.safetensors");
  }
  EXPECT_TRUE(world().barrier_async()->wait().ok());
  if (world().rank() == 0) std::filesystem::remove_all(dir);
}

TEST(TensorParallelCheckpointTest, ACheckpointAtTwoResumesAtAnyTensorSizeAndConsolidatesTheSame) {
  const int w = world().world_size();
  if (w % 2 != 0) GTEST_SKIP() << "saving at T = 2 needs an even world";
  const std::string dir = shared_dir("ckpt");
  constexpr int kSaveAt = 3, kMore = 3;
  // The uninterrupted run at T = 2, stage 1, saving after kSaveAt steps.
  std::vector<double> want;
  {
    std::unique_ptr<Trainer> t = make_trainer(world(), 1, 2);
    ASSERT_NE(t, nullptr);
    for (int s = 0; s < kSaveAt; ++s) t->step(s);
    absl::StatusOr<std::string> tag = save_checkpoint(*t->engine, {.dir = dir + "/t2"});
    ASSERT_TRUE(tag.ok()) << tag.status();
    for (int s = kSaveAt; s < kSaveAt + kMore; ++s) want.push_back(t->step(s));
  }
  // The same steps at T = 1 over the world, saved for the consolidation check.
  {
    std::unique_ptr<Trainer> t = make_trainer(world(), 2, 1);
    ASSERT_NE(t, nullptr);
    for (int s = 0; s < kSaveAt; ++s) t->step(s);
    ASSERT_TRUE(save_checkpoint(*t->engine, {.dir = dir + "/t1"}).ok());
  }
  struct Resume {
    bool one_rank;  // in-process, on a communicator of its own
    int stage, tensor;
  };
  const int widest = std::min(w, 4);  // the model has 4 heads
  for (const Resume& r : {Resume{true, 2, 1}, Resume{false, 3, 1}, Resume{false, 0, widest}, Resume{false, 2, 2}}) {
    const std::string what = std::string(r.one_rank ? "one rank" : "the world") + ", stage " +
                             std::to_string(r.stage) + ", T=" + std::to_string(r.tensor);
    std::unique_ptr<Communicator> own = r.one_rank ? make_local_communicator() : nullptr;
    std::unique_ptr<Trainer> t = make_trainer(r.one_rank ? *own : world(), r.stage, r.tensor);
    ASSERT_NE(t, nullptr) << what;
    absl::Status loaded = load_checkpoint(*t->engine, dir + "/t2");
    ASSERT_TRUE(loaded.ok()) << what << ": " << loaded;
    EXPECT_EQ(t->engine->global_step(), kSaveAt) << what;
    for (int s = kSaveAt; s < kSaveAt + kMore; ++s) {
      const double got = t->step(s);
      EXPECT_NEAR(got, want[s - kSaveAt], 1e-5 * want[s - kSaveAt]) << what << ", step " << s + 1;
    }
  }
  expect_t2_consolidates_as_t1(dir, kSaveAt);
}

// The same with heads split unevenly (9 query / 3 key-value heads at T = 2:
// q_proj's rows 48 + 24, o_proj's columns likewise, the MLP's 40 as 20 + 20):
// the slices are segments of the unsplit tensors as before, so the
// checkpoint resumes on one rank at T = 1 and at T = 2, and consolidates to
// a T = 1 run's file.
TEST(TensorParallelCheckpointTest, AnUnevenHeadSplitResumesUnsplitAndConsolidatesTheSame) {
  const int w = world().world_size();
  if (w % 2 != 0) GTEST_SKIP() << "saving at T = 2 needs an even world";
  const GptConfig model{.arch = ModelArch::kLlama, .n_layer = 2, .n_head = 9, .d_model = 32, .vocab_size = 37,
                        .seq_len = 8, .n_kv_head = 3, .d_ff = 40, .d_head = 8};
  const std::string dir = shared_dir("uneven_ckpt");
  constexpr int kSaveAt = 3, kMore = 3;
  std::vector<double> want;
  {
    std::unique_ptr<Trainer> t = make_trainer(world(), 3, 2, 0.0f, false, {}, model);
    ASSERT_NE(t, nullptr);
    for (int s = 0; s < kSaveAt; ++s) t->step(s);
    ASSERT_TRUE(save_checkpoint(*t->engine, {.dir = dir + "/t2"}).ok());
    for (int s = kSaveAt; s < kSaveAt + kMore; ++s) want.push_back(t->step(s));
  }
  {
    std::unique_ptr<Trainer> t = make_trainer(world(), 2, 1, 0.0f, false, {}, model);
    ASSERT_NE(t, nullptr);
    for (int s = 0; s < kSaveAt; ++s) t->step(s);
    ASSERT_TRUE(save_checkpoint(*t->engine, {.dir = dir + "/t1"}).ok());
  }
  for (const bool one_rank : {true, false}) {
    const std::string what = one_rank ? "one rank, T=1" : "the world, T=2 stage 0";
    std::unique_ptr<Communicator> own = one_rank ? make_local_communicator() : nullptr;
    std::unique_ptr<Trainer> t = make_trainer(one_rank ? *own : world(), one_rank ? 2 : 0, one_rank ? 1 : 2, 0.0f,
                                              false, {}, model);
    ASSERT_NE(t, nullptr) << what;
    absl::Status loaded = load_checkpoint(*t->engine, dir + "/t2");
    ASSERT_TRUE(loaded.ok()) << what << ": " << loaded;
    for (int s = kSaveAt; s < kSaveAt + kMore; ++s) {
      const double got = t->step(s);
      EXPECT_NEAR(got, want[s - kSaveAt], 1e-5 * want[s - kSaveAt]) << what << ", step " << s + 1;
    }
  }
  expect_t2_consolidates_as_t1(dir, kSaveAt);
}

// A model built without the mesh's tensor group is refused, naming the fix.
TEST(TensorParallelErrorsTest, AModelNotBuiltOnTheTensorGroupIsRefused) {
  if (world().world_size() < 2) GTEST_SKIP() << "needs a tensor group of 2";
  absl::StatusOr<std::unique_ptr<DeviceMesh>> mesh = DeviceMesh::create(world(), 2);
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  CpuBackend backend;
  EngineConfig ec;
  ec.micro_batch_size = 1;
  absl::StatusOr<std::unique_ptr<Engine>> e = Engine::create(std::make_unique<Gpt>(kModel), ec, backend, **mesh);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(e.status().message()).find("tensor group"), std::string::npos) << e.status();
}

}  // namespace
}  // namespace zero
