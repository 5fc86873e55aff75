// SFT rows (runtime/data/sft_dataset.h) against transformers, and what a
// user of data.format "sft" notices:
//  * Oracle (tests/data/sft/make_sft_golden.py): the examples of
//    tests/data/sft/examples.jsonl (prompt/completion and ChatML messages,
//    one of exactly seq_len + 1 tokens) tokenized by a tiny tokenizer whose
//    96 ids fit the golden Llama of tests/data/hf/llama. Our ids and labels
//    equal TRL's; the engine's loss on the rows, one example per right-padded
//    row, equals LlamaForCausalLM's loss with labels -100 on the prompt and
//    the padding (to 1e-5, relative), and is far from the loss with every
//    token trained; packed rows give transformers' loss on the same packed
//    rows under plain causal attention with positions running through.
//  * Packing trains exactly the tokens one example per row trains, in fewer rows.
//  * An epoch visits every row once; the order depends on (seed, sample) only.
//  * Errors name file:line: a malformed line, an example longer than
//    seq_len + 1 (with its length), a conversation without a reply, a line
//    with neither shape.
#include "runtime/data/sft_dataset.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <set>

#include "graph/gpt.h"
#include "kernels/cpu/cpu_backend.h"
#include "runtime/checkpoint/hf_weights.h"
#include "runtime/config/hf_config.h"
#include "runtime/config/json_file.h"
#include "runtime/engine/engine.h"
#include "tests/testing/test_files.h"

namespace zero {
namespace {

const std::string kSource = ZE_SOURCE_DIR;
const std::string kSftDir = kSource + "/tests/data/sft";
const std::string kModelDir = kSource + "/tests/data/hf/llama";

const Tokenizer& tokenizer() {
  static const std::unique_ptr<Tokenizer> t = [] {
    absl::StatusOr<std::unique_ptr<Tokenizer>> loaded = load_tokenizer(kSftDir + "/tokenizer");
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    return loaded.ok() ? *std::move(loaded) : nullptr;
  }();
  return *t;
}

const Json& golden() {
  static const Json g = load_json_file(kSftDir + "/golden.json").value();
  return g;
}

absl::StatusOr<std::unique_ptr<SftRows>> rows_of(const std::string& path, int64_t seq_len, bool packing,
                                                int threads = 2) {
  SftDataOptions o;
  o.inputs = {path};
  o.seq_len = seq_len;
  o.packing = packing;
  o.threads = threads;
  return read_sft_rows(tokenizer(), o);
}

std::unique_ptr<SftRows> golden_rows(bool packing) {
  absl::StatusOr<std::unique_ptr<SftRows>> rows =
      rows_of(kSftDir + "/examples.jsonl", golden()["seq_len"].get<int64_t>(), packing);
  EXPECT_TRUE(rows.ok()) << rows.status();
  return rows.ok() ? *std::move(rows) : nullptr;
}

struct Filled {
  std::vector<int32_t> inputs, targets;
};

// Every row of `rows`, in order.
Filled fill_all(const SampleSet& rows) {
  const int64_t n = rows.size(), t = rows.seq_len();
  Filled f{std::vector<int32_t>(n * t), std::vector<int32_t>(n * t)};
  for (int64_t r = 0; r < n; ++r) EXPECT_TRUE(rows.fill(r, f.inputs.data() + r * t, f.targets.data() + r * t).ok());
  return f;
}

int64_t count_targets(const std::vector<int32_t>& targets) {
  return std::count_if(targets.begin(), targets.end(), [](int32_t t) { return t >= 0; });
}

// The golden Llama, fp32, one rank; micro-batch `rows`.
std::unique_ptr<Engine> golden_engine(Backend& backend, int64_t rows) {
  const Json config = load_json_file(kModelDir + "/config.json").value();
  GptConfig g = gpt_config_from_hf(config, kModelDir).value();
  g.seq_len = golden()["seq_len"].get<int64_t>();
  EngineConfig ec;
  ec.micro_batch_size = rows;
  absl::StatusOr<std::unique_ptr<Engine>> e = initialize(std::make_unique<Gpt>(g), ec, backend);
  EXPECT_TRUE(e.ok()) << e.status();
  EXPECT_TRUE(load_hf_weights(**e, g, kModelDir).ok());
  return *std::move(e);
}

double engine_loss(Engine& engine, Filled& f, int64_t rows, int64_t seq_len) {
  const Batch batch{Tensor::wrap(f.inputs.data(), {rows, seq_len}, DType::kI32),
                    Tensor::wrap(f.targets.data(), {rows, seq_len}, DType::kI32)};
  absl::StatusOr<float> loss = engine.evaluate(batch);
  EXPECT_TRUE(loss.ok()) << loss.status();
  return loss.value_or(NAN);
}

TEST(SftDatasetTest, IdsAndLabelsEqualTrls) {
  std::unique_ptr<SftRows> rows = golden_rows(/*packing=*/false);
  ASSERT_NE(rows, nullptr);
  const Json& examples = golden()["examples"];
  ASSERT_EQ(rows->size(), static_cast<int64_t>(examples.size()));
  const int64_t seq_len = rows->seq_len();
  const int32_t pad = golden()["pad_id"].get<int32_t>();
  EXPECT_EQ(rows->pad_id(), pad);
  Filled f = fill_all(*rows);
  for (size_t r = 0; r < examples.size(); ++r) {
    SCOPED_TRACE("examples.jsonl:" + std::to_string(examples[r]["line"].get<int>()));
    const std::vector<int32_t> ids = examples[r]["ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> labels = examples[r]["labels"].get<std::vector<int32_t>>();
    for (int64_t t = 0; t < seq_len; ++t) {
      const size_t at = r * seq_len + t;
      EXPECT_EQ(f.inputs[at], t < static_cast<int64_t>(ids.size()) ? ids[t] : pad) << "input " << t;
      const int32_t want = t + 1 < static_cast<int64_t>(labels.size()) ? labels[t + 1] : -100;
      EXPECT_EQ(f.targets[at], want == -100 ? -1 : want) << "target " << t;
    }
  }
  EXPECT_EQ(rows->stats().trained_tokens, golden()["trained_tokens"].get<int64_t>());
  EXPECT_EQ(count_targets(f.targets), golden()["trained_tokens"].get<int64_t>());
}

TEST(SftDatasetTest, LossEqualsTransformersWithThePromptMasked) {
  std::unique_ptr<SftRows> rows = golden_rows(/*packing=*/false);
  ASSERT_NE(rows, nullptr);
  CpuBackend backend;
  std::unique_ptr<Engine> engine = golden_engine(backend, rows->size());
  ASSERT_NE(engine, nullptr);
  Filled f = fill_all(*rows);
  const double ours = engine_loss(*engine, f, rows->size(), rows->seq_len());
  const double theirs = golden()["unpacked"]["loss"].get<double>();
  const double unmasked = golden()["all_tokens"]["loss"].get<double>();
  std::printf("SFT loss, one example per row: ours %.8f, transformers %.8f (relative difference %.2g); every token "
              "trained: %.8f\n", ours, theirs, std::fabs(ours - theirs) / theirs, unmasked);
  EXPECT_NEAR(ours, theirs, 1e-5 * theirs);
  EXPECT_GT(std::fabs(ours - unmasked), 1e-2) << "the mask makes no difference: the oracle proves nothing";

  // The same through training's path: forward() of the engine is the loss the run reports.
  const Batch batch{Tensor::wrap(f.inputs.data(), {rows->size(), rows->seq_len()}, DType::kI32),
                    Tensor::wrap(f.targets.data(), {rows->size(), rows->seq_len()}, DType::kI32)};
  absl::StatusOr<float> trained = engine->forward(batch);
  ASSERT_TRUE(trained.ok()) << trained.status();
  EXPECT_NEAR(*trained, theirs, 1e-5 * theirs);
}

TEST(SftDatasetTest, PackedRowsEqualTransformersOnTheSamePackedRows) {
  std::unique_ptr<SftRows> packed = golden_rows(/*packing=*/true);
  ASSERT_NE(packed, nullptr);
  const Json& layout = golden()["packed"]["rows"];
  ASSERT_EQ(packed->size(), static_cast<int64_t>(layout.size()));
  // Row by row, the golden layout's examples one after another.
  Filled f = fill_all(*packed);
  const Json& examples = golden()["examples"];
  for (size_t r = 0; r < layout.size(); ++r) {
    std::vector<int32_t> ids;
    for (const Json& e : layout[r]) {
      const auto more = examples[e.get<size_t>()]["ids"].get<std::vector<int32_t>>();
      ids.insert(ids.end(), more.begin(), more.end());
    }
    for (size_t t = 0; t < ids.size() && t < static_cast<size_t>(packed->seq_len()); ++t) {
      EXPECT_EQ(f.inputs[r * packed->seq_len() + t], ids[t]) << "row " << r << " position " << t;
    }
  }
  CpuBackend backend;
  std::unique_ptr<Engine> engine = golden_engine(backend, packed->size());
  ASSERT_NE(engine, nullptr);
  const double ours = engine_loss(*engine, f, packed->size(), packed->seq_len());
  const double theirs = golden()["packed"]["loss"].get<double>();
  std::printf("SFT loss, packed: ours %.8f, transformers %.8f (relative difference %.2g)\n", ours, theirs,
              std::fabs(ours - theirs) / theirs);
  EXPECT_NEAR(ours, theirs, 1e-5 * theirs);
}

// What a user notices: packing trains the same tokens in fewer rows.
TEST(SftDatasetTest, PackingTrainsTheSameTokensInFewerRows) {
  std::unique_ptr<SftRows> plain = golden_rows(false), packed = golden_rows(true);
  ASSERT_NE(plain, nullptr);
  ASSERT_NE(packed, nullptr);
  EXPECT_EQ(plain->stats().trained_tokens, packed->stats().trained_tokens);
  EXPECT_EQ(count_targets(fill_all(*plain).targets), count_targets(fill_all(*packed).targets));
  EXPECT_LT(packed->size(), plain->size());
  EXPECT_NE(plain->describe().find("one example per row"), std::string::npos) << plain->describe();
  EXPECT_NE(packed->describe().find("packed into 4 rows"), std::string::npos) << packed->describe();
  EXPECT_NE(packed->describe().find("35 of them trained"), std::string::npos) << packed->describe();
}

TEST(SftDatasetTest, TheSameRowsOnAnyThreadCount) {
  for (bool packing : {false, true}) {
    std::unique_ptr<SftRows> one = rows_of(kSftDir + "/examples.jsonl", 32, packing, 1).value();
    std::unique_ptr<SftRows> three = rows_of(kSftDir + "/examples.jsonl", 32, packing, 3).value();
    const Filled a = fill_all(*one), b = fill_all(*three);
    EXPECT_EQ(a.inputs, b.inputs);
    EXPECT_EQ(a.targets, b.targets);
  }
}

// SFT rows are drawn one epoch at a time: every row once, in a seeded order
// that one rank and four ranks see alike.
TEST(SftDatasetTest, AnEpochVisitsEveryRowOnce) {
  std::unique_ptr<DataLoader> loader = DataLoader::create(golden_rows(false), 7, SampleOrder::kEpochs);
  const int64_t n = loader->samples().size();
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::set<int64_t> seen;
    for (int64_t g = epoch * n; g < (epoch + 1) * n; ++g) seen.insert(loader->row_of_sample(g));
    EXPECT_EQ(static_cast<int64_t>(seen.size()), n) << "epoch " << epoch;
  }
  std::vector<int64_t> first, second, other_seed;
  std::unique_ptr<DataLoader> again = DataLoader::create(golden_rows(false), 7, SampleOrder::kEpochs);
  std::unique_ptr<DataLoader> other = DataLoader::create(golden_rows(false), 8, SampleOrder::kEpochs);
  for (int64_t g = 3 * n - 1; g >= 0; --g) {  // in another order: a pure function of g
    first.push_back(loader->row_of_sample(g));
    second.push_back(again->row_of_sample(g));
    other_seed.push_back(other->row_of_sample(g));
  }
  EXPECT_EQ(first, second);
  EXPECT_NE(first, other_seed);
  // Two data-parallel ranks at micro 2 take the rows one rank at micro 4 takes.
  Batch whole = loader->micro_batch(1, 0, 0, 1, 4, 1).value();
  const std::vector<int32_t> expected(whole.targets.i32(), whole.targets.i32() + whole.targets.numel());
  for (int r = 0; r < 2; ++r) {
    Batch part = loader->micro_batch(1, 0, r, 2, 2, 1).value();
    EXPECT_TRUE(std::equal(part.targets.i32(), part.targets.i32() + part.targets.numel(),
                           expected.begin() + r * 2 * loader->seq_len()));
  }
}

std::string error_of(const std::string& text, int64_t seq_len = 32) {
  const std::string path = testing::write_test_file("data.jsonl", text);
  absl::StatusOr<std::unique_ptr<SftRows>> rows = rows_of(path, seq_len, false);
  EXPECT_FALSE(rows.ok());
  return rows.ok() ? "" : std::string(rows.status().message());
}

TEST(SftDatasetTest, BadExamplesAreNamedByFileAndLine) {
  const std::string path = testing::test_path("data.jsonl");
  const std::string good = R"({"prompt": "say hello.\n", "completion": "hello."})";
  std::string msg = error_of(good + "\n\n" + R"({"prompt": "x", "completion": )" + "\n");
  EXPECT_NE(msg.find(path + ":3: not valid JSON (column"), std::string::npos) << msg;
  msg = error_of(good + "\n" + R"({"messages": [{"role": "user", "content": "hi"}]})" + "\n");
  EXPECT_NE(msg.find(path + ":2: the conversation has no assistant message"), std::string::npos) << msg;
  msg = error_of(good + "\n" + R"({"text": "hello"})" + "\n");
  EXPECT_NE(msg.find(path + ":2: an SFT example needs \"messages\", or \"prompt\" and \"completion\"; this one has "
                     "\"text\""), std::string::npos) << msg;
  // Longer than seq_len + 1: its length, and what to do.
  msg = error_of(good + "\n", /*seq_len=*/8);
  EXPECT_NE(msg.find(path + ":1: the example is 13 tokens, longer than model.seq_len + 1 = 9"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("raise model.seq_len"), std::string::npos) << msg;
  msg = error_of("\n  \n");
  EXPECT_NE(msg.find("no SFT examples in " + path), std::string::npos) << msg;
}

}  // namespace
}  // namespace zero
