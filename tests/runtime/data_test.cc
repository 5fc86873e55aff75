// Training data: llm.c token shards are validated field by field with errors
// that name the file and what is wrong; text files read as bytes; sampling is
// a pure function of (seed, sample index), so N ranks at micro-batch b see
// exactly the samples one rank sees at N*b.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "runtime/data/data_loader.h"

namespace zero {
namespace {

// A path private to the running test (CTest runs tests in parallel processes).
std::string tmp(const std::string& name) {
  const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
  return ::testing::TempDir() + "/" + t->test_suite_name() + "." + t->name() + "." + name;
}

void write_raw(const std::string& path, const std::vector<int32_t>& header, const std::vector<uint16_t>& tokens) {
  std::ofstream f(path, std::ios::binary);
  std::vector<int32_t> h(256, 0);
  std::copy(header.begin(), header.end(), h.begin());
  f.write(reinterpret_cast<const char*>(h.data()), 1024);
  f.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
}

std::string open_error(const std::string& path, int64_t vocab = 100) {
  auto s = open_llmc_shards(path, vocab);
  EXPECT_FALSE(s.ok());
  return s.ok() ? "" : std::string(s.status().message());
}

TEST(DataTest, LlmcShardRoundTrips) {
  std::vector<uint16_t> tokens;
  for (int i = 0; i < 1000; ++i) tokens.push_back(static_cast<uint16_t>(i % 97));
  const std::string path = tmp("ok.bin");
  ASSERT_TRUE(write_llmc_shard(path, tokens).ok());
  EXPECT_EQ(std::filesystem::file_size(path), 1024u + 2000u);
  auto src = open_llmc_shards(path, 100);
  ASSERT_TRUE(src.ok()) << src.status();
  ASSERT_EQ((*src)->num_sequences(), 1);
  ASSERT_EQ((*src)->sequence_length(0), 1000);
  std::vector<int32_t> out(10);
  ASSERT_TRUE((*src)->read(0, 95, 10, out.data()).ok());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(out[i], (95 + i) % 97);
  EXPECT_EQ((*src)->vocab_bound(), 97);
}

TEST(DataTest, BadMagicNamesTheFileAndHints) {
  write_raw(tmp("magic.bin"), {12345, 1, 4}, {1, 2, 3, 4});
  const std::string msg = open_error(tmp("magic.bin"));
  EXPECT_NE(msg.find("magic.bin: bad magic 12345, expected 20240520"), std::string::npos) << msg;
  write_raw(tmp("llama.bin"), {20240801, 7, 4}, {1, 2, 3, 4});
  EXPECT_NE(open_error(tmp("llama.bin")).find("llama-3 format"), std::string::npos);
}

TEST(DataTest, TruncatedShardIsRefusedWithSizes) {
  write_raw(tmp("short.bin"), {kLlmcMagic, 1, 100}, {1, 2, 3});
  const std::string msg = open_error(tmp("short.bin"));
  EXPECT_NE(msg.find("short.bin: header says 100 tokens, so the file should be 1224 bytes, but it is 1030 bytes"),
            std::string::npos)
      << msg;
  std::ofstream(tmp("tiny.bin")) << "abc";
  EXPECT_NE(open_error(tmp("tiny.bin")).find("shorter than the 1024-byte llm.c header"), std::string::npos);
}

// A shard truncated while a run reads it: the read that reaches past the new
// end fails naming the file, the bytes and both sizes (a mapped file would
// have ended the process with SIGBUS).
TEST(DataTest, ShardTruncatedDuringTheRunIsAnErrorNotASignal) {
  const std::string path = tmp("shrinking.bin");
  std::vector<uint16_t> tokens(1000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i % 50);
  ASSERT_TRUE(write_llmc_shard(path, tokens).ok());
  auto src = open_llmc_shards(path, 50);
  ASSERT_TRUE(src.ok()) << src.status();
  std::vector<int32_t> out(10);
  ASSERT_TRUE((*src)->read(0, 900, 10, out.data()).ok());
  EXPECT_EQ(out[0], 900 % 50);
  std::filesystem::resize_file(path, kLlmcHeaderBytes + 2 * 100);
  ASSERT_TRUE((*src)->read(0, 50, 10, out.data()).ok()) << "what is still there reads";
  const absl::Status s = (*src)->read(0, 900, 10, out.data());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("data file " + path + ": bytes [2824, 2844) are past its end: it is now 1224 "
                                          "bytes, but was 3024 when the run opened it"),
            std::string::npos)
      << s;
}

TEST(DataTest, WrongVersionAndOutOfVocabTokens) {
  write_raw(tmp("ver.bin"), {kLlmcMagic, 2, 2}, {1, 2});
  EXPECT_NE(open_error(tmp("ver.bin")).find("unsupported version 2"), std::string::npos);
  write_raw(tmp("vocab.bin"), {kLlmcMagic, 1, 3}, {1, 300, 2});
  EXPECT_NE(open_error(tmp("vocab.bin"), 256).find("token 300 at position 1 is >= model.vocab_size 256"),
            std::string::npos);
}

TEST(DataTest, MissingPathsAreNamed) {
  EXPECT_NE(open_error(tmp("does-not-exist.bin")).find("does-not-exist.bin: no such file or directory"),
            std::string::npos);
  EXPECT_NE(open_error(tmp("nothing-*.bin")).find("matches no files"), std::string::npos);
  auto t = open_text_bytes("");
  EXPECT_NE(std::string(t.status().message()).find("data.path is not set"), std::string::npos);
}

TEST(DataTest, TextFilesAreBytes) {
  const std::string dir = tmp("texts");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/a.txt") << "hello";
  std::ofstream(dir + "/b.txt") << "\xff\x01";
  auto src = open_text_bytes(dir);
  ASSERT_TRUE(src.ok()) << src.status();
  ASSERT_EQ((*src)->num_sequences(), 2);
  std::vector<int32_t> out(2);
  ASSERT_TRUE((*src)->read(1, 0, 2, out.data()).ok());
  EXPECT_EQ(out[0], 255);
  EXPECT_EQ(out[1], 1);
}

std::unique_ptr<DataLoader> loader(int64_t seq_len, uint64_t seed) {
  std::vector<uint16_t> tokens;
  for (int i = 0; i < 5000; ++i) tokens.push_back(static_cast<uint16_t>((i * 31) % 251));
  EXPECT_TRUE(write_llmc_shard(tmp("loader.bin"), tokens).ok());
  auto src = open_llmc_shards(tmp("loader.bin"), 256);
  EXPECT_TRUE(src.ok());
  auto l = DataLoader::create(std::move(src).value(), seq_len, seed);
  EXPECT_TRUE(l.ok());
  return std::move(l).value();
}

TEST(DataTest, TargetsAreInputsShiftedByOne) {
  auto l = loader(16, 7);
  Batch b = l->micro_batch(3, 0, 0, 1, 4, 1).value();
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t t = 0; t + 1 < 16; ++t) EXPECT_EQ(b.targets.i32()[r * 16 + t], b.inputs.i32()[r * 16 + t + 1]);
}

TEST(DataTest, RanksSliceTheGlobalBatch) {
  auto l = loader(16, 7);
  const int world = 4, micro = 2, gas = 3;
  for (int64_t step : {0, 5}) {
    for (int64_t j = 0; j < gas; ++j) {
      Batch whole = l->micro_batch(step, j, 0, 1, world * micro, gas).value();
      std::vector<int32_t> expected(whole.inputs.i32(), whole.inputs.i32() + whole.inputs.numel());
      for (int r = 0; r < world; ++r) {
        Batch part = l->micro_batch(step, j, r, world, micro, gas).value();
        for (int64_t i = 0; i < part.inputs.numel(); ++i) {
          ASSERT_EQ(part.inputs.i32()[i], expected[r * micro * 16 + i]) << "step " << step << " rank " << r;
        }
      }
    }
  }
}

TEST(DataTest, SamplingDependsOnSeedAndStepOnly) {
  auto a = loader(16, 7), b = loader(16, 7), c = loader(16, 8);
  Batch xb = a->micro_batch(9, 0, 0, 1, 4, 1).value();
  const std::vector<int32_t> x(xb.inputs.i32(), xb.inputs.i32() + xb.inputs.numel());
  Batch y = b->micro_batch(9, 0, 0, 1, 4, 1).value();
  EXPECT_TRUE(std::equal(x.begin(), x.end(), y.inputs.i32()));
  Batch z = c->micro_batch(9, 0, 0, 1, 4, 1).value();
  EXPECT_FALSE(std::equal(x.begin(), x.end(), z.inputs.i32()));
}

TEST(DataTest, TooShortDataIsRefused) {
  ASSERT_TRUE(write_llmc_shard(tmp("few.bin"), {1, 2, 3}).ok());
  auto src = open_llmc_shards(tmp("few.bin"), 256);
  ASSERT_TRUE(src.ok());
  auto l = DataLoader::create(std::move(src).value(), 64, 1);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(std::string(l.status().message()).find("no file holds seq_len + 1 = 65 tokens"), std::string::npos);
}

}  // namespace
}  // namespace zero
