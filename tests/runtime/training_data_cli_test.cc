// zero-train's data formats as a user meets them (runtime/tools/training_data.h):
//  * text through a tokenizer, tokenized as the run starts: the loss falls,
//    and the run is the very run zero-data tokenize's shard gives (the same
//    losses, bit for bit); JSON lines likewise;
//  * what cannot match the model is refused, exit 2, naming both sides:
//    text without a tokenizer for a BPE-sized model (and "bytes" trains on
//    purpose), byte shards for a 50k-vocabulary model, shards of a larger
//    vocabulary, a tokenizer with more ids than the model;
//  * SFT, prompt/completion and messages on a tiny Llama: the loss falls,
//    with and without packing, which trains the same number of tokens;
//    from the golden Llama at lr 0 the first step's loss is transformers'
//    (tests/data/sft); two ranks train what one rank trains; the prompts'
//    tokens are not counted as trained; a malformed line exits 2 naming
//    file:line.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <regex>

#include <nlohmann/json.hpp>

#include "runtime/data/token_source.h"
#include "tests/testing/run_command.h"
#include "tests/testing/test_files.h"

namespace zero {
namespace {

using Result = testing::CommandResult;
const std::string kSource = ZE_SOURCE_DIR;
const std::string kGpt2Tokenizer = kSource + "/tests/data/tokenizers/gpt2";  // 2001 ids
const std::string kSftDir = kSource + "/tests/data/sft";                     // 96 ids

Result train(const std::string& args, int ranks = 1) {
  const std::string launcher =
      ranks == 1 ? ""
                 : std::string(ZE_MPIEXEC) + " --allow-run-as-root --oversubscribe -np " + std::to_string(ranks) + " ";
  return testing::run_command("cd " + kSource + " && timeout 300 " + launcher + ZE_TRAIN_BIN + " " + args);
}

std::string write(const std::string& name, const std::string& text) { return testing::write_test_file(name, text); }

std::vector<double> losses(const std::string& metrics) {
  std::vector<double> out;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line)["loss"].get<double>());
  return out;
}

// "done: N steps in ..., loss A -> B"
bool first_and_last(const std::string& out, double& first, double& last) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex("done: [0-9]+ steps in [^,]*, loss ([0-9.]+) -> ([0-9.]+)"))) return false;
  first = std::stod(m[1]);
  last = std::stod(m[2]);
  return true;
}

// A tiny GPT-2 whose 2048-entry vocabulary holds the test GPT-2 tokenizer's 2001 ids.
const char* kTinyGpt = R"({
  "model": {"n_layer": 2, "n_head": 2, "d_model": 32, "vocab_size": 2048, "seq_len": 16},
  "data": {"format": "text", "path": "/usr/share/common-licenses"},
  "run": {"steps": 40},
  "train_micro_batch_size_per_gpu": 8,
  "steps_per_print": 10,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}
})";

TEST(TrainingDataCliTest, TextThroughATokenizerTrainsAndIsZeroDataTokenizesRun) {
  const std::string config = write("run.json", kTinyGpt), m1 = testing::test_path("m1.jsonl"),
                    m2 = testing::test_path("m2.jsonl");
  Result r = train("--config " + config + " --set data.tokenizer=" + kGpt2Tokenizer + " --metrics " + m1);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The start-up line: documents, tokens, the tokenizer and the time taken.
  EXPECT_TRUE(std::regex_search(r.output, std::regex("data: 1[0-9] documents from 1[0-9] text files, [0-9]+ bytes "
                                                     "tokenized by .*tests/data/tokenizers/gpt2 \\(byte-level BPE, "
                                                     "2001 tokens.*\\) in [0-9.]+ s on [0-9]+ threads?: [0-9]+ tokens "
                                                     "in memory")))
      << r.output;
  double first = 0, last = 0;
  ASSERT_TRUE(first_and_last(r.output, first, last)) << r.output;
  EXPECT_NEAR(first, std::log(2048.0), 0.5);
  EXPECT_LT(last, first - 1.0) << r.output;

  // The same text as zero-data tokenize's shard: the same run, bit for bit.
  const std::string prefix = testing::fresh_test_dir("shards") + "/licenses";
  const Result prep = testing::run_command(std::string(ZE_DATA_BIN) + " tokenize --tokenizer " + kGpt2Tokenizer +
                                           " --input /usr/share/common-licenses --val-fraction 0 --out " + prefix);
  ASSERT_EQ(prep.exit_code, 0) << prep.output;
  r = train("--config " + config + " --set data.format=llmc --set data.path=" + prefix + "_train_000000.bin" +
            " --metrics " + m2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(losses(m1), losses(m2));
  EXPECT_EQ(losses(m1).size(), 40u);
}

TEST(TrainingDataCliTest, JsonLinesThroughATokenizerTrain) {
  std::string lines;
  for (int i = 0; i < 200; ++i) {
    lines += nlohmann::json({{"body", "Line " + std::to_string(i % 17) + ": the quick brown fox jumps over the lazy "
                                      "dog, again and again."}, {"id", i}}).dump() + "\n";
  }
  const std::string data = write("docs.jsonl", lines);
  Result r = train("--config " + write("run.json", kTinyGpt) + " --set data.format=jsonl --set data.jsonl_field=body" +
                   " --set data.path=" + data + " --set data.tokenizer=" + kGpt2Tokenizer + " --steps 30");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("data: 200 documents from 1 JSON-lines file (field \"body\")"), std::string::npos)
      << r.output;
  double first = 0, last = 0;
  ASSERT_TRUE(first_and_last(r.output, first, last)) << r.output;
  EXPECT_LT(last, first - 1.0) << r.output;
  // A missing field is named with its file and line.
  r = train("--config " + write("run.json", kTinyGpt) + " --set data.format=jsonl --set data.path=" + data +
            " --set data.tokenizer=" + kGpt2Tokenizer);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(data + ":1: no field \"text\""), std::string::npos) << r.output;
}

// Text without a tokenizer reads bytes: for a model of vocabulary 256 (the
// quickstart's) that is what it is for; for a BPE-sized model it is refused.
TEST(TrainingDataCliTest, TextWithoutATokenizerForABpeModelIsRefusedNamingBothSides) {
  const std::string config = write("run.json", kTinyGpt);
  Result r = train("--config " + config);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  for (const char* want : {"data.format: \"text\" without a tokenizer reads the files' bytes as tokens "
                           "(vocabulary 256)",
                           "the model has a vocabulary of 2048 (model.vocab_size)", "Set data.tokenizer",
                           "zero-data tokenize --tokenizer DIR",
                           "data.format \"bytes\" to train on bytes on purpose"}) {
    EXPECT_NE(r.output.find(want), std::string::npos) << want << "\n" << r.output;
  }
  r = train("--config " + config + " --set data.format=bytes --steps 2");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // A key given for a format it does not apply to is refused by name.
  r = train("--config " + config + " --set data.format=bytes --set data.tokenizer=" + kGpt2Tokenizer);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("data.tokenizer: applies to data.format \"text\", \"jsonl\" and \"sft\""), std::string::npos)
      << r.output;
  r = train("--config " + config + " --set data.packing=true --set data.tokenizer=" + kGpt2Tokenizer);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("data.packing: applies to data.format \"sft\" only"), std::string::npos) << r.output;
}

TEST(TrainingDataCliTest, ShardsAndTokenizersThatDoNotFitTheModelAreRefused) {
  const std::string config = write("run.json", kTinyGpt);
  // Byte shards (zero-data bytes-to-llmc) into a GPT-2-sized vocabulary.
  const std::string bytes = testing::test_path("bytes.bin");
  const Result prep = testing::run_command(std::string(ZE_DATA_BIN) +
                                           " bytes-to-llmc --input /usr/share/common-licenses --out " + bytes);
  ASSERT_EQ(prep.exit_code, 0) << prep.output;
  Result r = train("--config " + config + " --set model.vocab_size=50304 --set data.format=llmc --set data.path=" +
                   bytes);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  for (const char* want : {"the shards hold bytes (written for a vocabulary of 256: zero-data bytes-to-llmc)",
                           "the model has a vocabulary of 50304 (model.vocab_size)",
                           "zero-data tokenize --tokenizer"}) {
    EXPECT_NE(r.output.find(want), std::string::npos) << want << "\n" << r.output;
  }
  // The same shards for a byte model train.
  r = train("--config " + config + " --set model.vocab_size=256 --set data.format=llmc --set data.path=" + bytes +
            " --steps 2");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // Shards of a tokenizer with more ids than the model has, though every id they hold fits.
  const std::string big = testing::test_path("big.bin");
  ASSERT_TRUE(write_token_shard(big, std::vector<int32_t>(5000, 7), 128256).ok());
  r = train("--config " + config + " --set data.format=llmc --set data.path=" + big);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("written by a tokenizer of 128256 ids (header[3]), but the model has a vocabulary of 2048 "
                          "(model.vocab_size)"),
            std::string::npos)
      << r.output;
  // A tokenizer with more ids than the model.
  r = train("--config " + config + " --set model.vocab_size=1000 --set data.tokenizer=" + kGpt2Tokenizer);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("(byte-level BPE, 2001 tokens"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("has 2001 ids, but the model has a vocabulary of 1000 (model.vocab_size)"),
            std::string::npos)
      << r.output;
}

// A tiny Llama whose 96-entry vocabulary is the SFT test tokenizer's.
const char* kTinyLlama = R"({
  "model": {"arch": "llama", "n_layer": 2, "n_head": 2, "n_kv_head": 1, "d_model": 64, "d_ff": 128,
            "vocab_size": 96, "seq_len": 32},
  "data": {"format": "sft", "seed": 5},
  "run": {"steps": 30},
  "train_micro_batch_size_per_gpu": 4,
  "steps_per_print": 10,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.005}}
})";

// examples.jsonl (prompt/completion and messages) 10 times over.
std::string sft_data() {
  const std::string one = testing::read_file(kSftDir + "/examples.jsonl");
  std::string many;
  for (int i = 0; i < 10; ++i) many += one;
  return write("sft.jsonl", many);
}

TEST(TrainingDataCliTest, SftOfPromptsAndConversationsLearnsPackedOrNot) {
  const std::string config = write("run.json", kTinyLlama), data = sft_data();
  const std::string base = "--config " + config + " --set data.path=" + data + " --set data.tokenizer=" + kSftDir +
                           "/tokenizer";
  int64_t trained[2] = {0, 0};
  for (bool packing : {false, true}) {
    SCOPED_TRACE(packing ? "packed" : "one example per row");
    Result r = train(base + (packing ? " --set data.packing=true" : ""));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.output, m, std::regex("data: SFT: 60 examples from 1 JSON-lines file, [0-9]+ bytes "
                                                          "tokenized by .* in [0-9.]+ s on [0-9]+ threads?: ([0-9]+) "
                                                          "tokens, ([0-9]+) of them trained")))
        << r.output;
    EXPECT_EQ(std::stoll(m[1]), 10 * (17 + 16 + 24 + 13 + 33 + 8)) << r.output;
    trained[packing] = std::stoll(m[2]);
    EXPECT_NE(r.output.find(packing ? "packed into " : "one example per row"), std::string::npos) << r.output;
    double first = 0, last = 0;
    ASSERT_TRUE(first_and_last(r.output, first, last)) << r.output;
    EXPECT_LT(last, first - 1.0) << r.output;
  }
  EXPECT_EQ(trained[0], 350);
  EXPECT_EQ(trained[1], trained[0]);

  // Longer prompts: more tokens, none more trained.
  std::string longer;
  for (int i = 0; i < 60; ++i) {
    longer += nlohmann::json({{"prompt", "say hello, say hello, say hello.\n"}, {"completion", "hello."}}).dump();
    longer += "\n";
  }
  std::string shorter;
  for (int i = 0; i < 60; ++i) {
    shorter += nlohmann::json({{"prompt", "say hello.\n"}, {"completion", "hello."}}).dump() + "\n";
  }
  const std::string shorter_prompts = write("short.jsonl", shorter);
  const std::string longer_prompts = write("long.jsonl", longer);
  std::smatch a, b;
  Result r1 = train(base + " --steps 1 --set data.path=" + shorter_prompts);
  Result r2 = train(base + " --steps 1 --set data.path=" + longer_prompts);
  const std::regex counts("([0-9]+) tokens, ([0-9]+) of them trained");
  ASSERT_TRUE(std::regex_search(r1.output, a, counts)) << r1.output;
  ASSERT_TRUE(std::regex_search(r2.output, b, counts)) << r2.output;
  EXPECT_LT(std::stoll(a[1]), std::stoll(b[1]));
  EXPECT_EQ(std::stoll(a[2]), std::stoll(b[2]));
}

// From the golden Llama at lr 0 with all six examples in one micro-batch,
// the first step's loss is transformers' on them (tests/data/sft/golden.json),
// the tokenizer given beside --init-from (that directory has none). Validation
// on the same file reports the same loss.
TEST(TrainingDataCliTest, SftFirstStepLossFromTheGoldenLlamaIsTransformers) {
  const nlohmann::json golden = nlohmann::json::parse(testing::read_file(kSftDir + "/golden.json"));
  const std::string metrics = testing::test_path("m.jsonl");
  Result r = train("--config configs/ds/fp32-adamw.json --init-from tests/data/hf/llama --set model.seq_len=32"
                   " --set data.format=sft --set data.path=" + kSftDir + "/examples.jsonl --set data.tokenizer=" +
                   kSftDir + "/tokenizer --set train_micro_batch_size_per_gpu=6 --set gradient_accumulation_steps=1"
                   " --set optimizer.params.lr=0 --set optimizer.params.weight_decay=0 --steps 1 --metrics " + metrics +
                   " --set data.val_path=" + kSftDir + "/examples.jsonl --set run.eval_every=1 --set run.eval_steps=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const double want = golden["unpacked"]["loss"].get<double>();
  const std::vector<double> got = losses(metrics);
  ASSERT_EQ(got.size(), 1u);
  std::printf("zero-train's first SFT step from tests/data/hf/llama: loss %.8f, transformers %.8f\n", got[0], want);
  EXPECT_NEAR(got[0], want, 1e-5 * want);
  const nlohmann::json last = nlohmann::json::parse(testing::read_file(metrics));
  EXPECT_NEAR(last["val_loss"].get<double>(), want, 1e-5 * want);
}

// Every rank reads and encodes the data itself: two data-parallel ranks at
// micro 2 train on the rows one rank takes in two micro-steps of 2, and get
// its losses. (Not one rank at micro 4: the loss is each micro-batch's mean
// over its trained tokens, as DeepSpeed's, and SFT rows differ in how many
// they hold.)
TEST(TrainingDataCliTest, SftOnTwoRanksIsOneRanksRun) {
  const std::string config = write("run.json", kTinyLlama), data = sft_data();
  const std::string base = "--config " + config + " --set data.path=" + data + " --set data.tokenizer=" + kSftDir +
                           "/tokenizer --steps 6 --set data.packing=true --set train_micro_batch_size_per_gpu=2";
  const std::string one = testing::test_path("one.jsonl"), two = testing::test_path("two.jsonl");
  Result r = train(base + " --set gradient_accumulation_steps=2 --metrics " + one);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = train(base + " --set gradient_accumulation_steps=1 --metrics " + two, 2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<double> a = losses(one), b = losses(two);
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 6u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5 * a[i]) << "step " << i + 1;
}

TEST(TrainingDataCliTest, AMalformedSftLineExitsTwoNamingFileAndLine) {
  const std::string good = R"({"prompt": "say hello.\n", "completion": "hello."})";
  const std::string data = write("bad.jsonl", good + "\n" + good + "\n" + R"({"prompt": "say hello.\n", "completion")" +
                                                  "\n");
  const std::string base = "--config " + write("run.json", kTinyLlama) + " --set data.tokenizer=" + kSftDir +
                           "/tokenizer --set data.path=";
  Result r = train(base + data);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("data.path: " + data + ":3: not valid JSON (column"), std::string::npos) << r.output;
  // Too long for seq_len: its length, and what to do.
  r = train(base + data + " --set model.seq_len=8");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(data + ":1: the example is 13 tokens, longer than model.seq_len + 1 = 9"), std::string::npos)
      << r.output;
  // A conversation without a reply.
  const std::string chat = write("chat.jsonl", R"({"messages": [{"role": "user", "content": "hi"}]})" "\n");
  r = train(base + chat);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(chat + ":1: the conversation has no assistant message"), std::string::npos) << r.output;
  // SFT needs a tokenizer.
  r = train("--config " + write("run.json", kTinyLlama) + " --set data.path=" + data);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("data.tokenizer: data.format \"sft\" reads text through a tokenizer, and none is set"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace zero
