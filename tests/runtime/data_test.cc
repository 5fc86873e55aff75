// Training data: llm.c token shards, 16-bit and 32-bit, are validated field
// by field with errors that name the file and what is wrong; the writer picks
// the width from the vocabulary and never truncates an id; text files read as
// bytes, and a token shard given as text is refused; header[3] carries the
// writer's vocabulary size; sampling is a pure function of (seed, sample
// index), so N ranks at micro-batch b see exactly the samples one rank sees
// at N*b.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "runtime/data/data_loader.h"

namespace zero {
namespace {

// A path private to the running test (CTest runs tests in parallel processes).
std::string tmp(const std::string& name) {
  const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
  return ::testing::TempDir() + "/" + t->test_suite_name() + "." + t->name() + "." + name;
}

// An empty directory private to the running test (left over from a previous run: emptied).
std::string fresh_dir(const std::string& name) {
  const std::string dir = tmp(name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// A shard as another program (llm.c's Python) would write it: header[256]
// with the given leading fields, then the tokens in T's width.
template <typename T = uint16_t>
void write_raw(const std::string& path, const std::vector<int32_t>& header, const std::vector<T>& tokens) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  std::vector<int32_t> h(256, 0);
  std::copy(header.begin(), header.end(), h.begin());
  f.write(reinterpret_cast<const char*>(h.data()), 1024);
  f.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * sizeof(T)));
}

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// header[i] of a shard on disk.
int32_t header_field(const std::string& path, int i) {
  const std::string b = file_bytes(path);
  int32_t v = 0;
  std::memcpy(&v, b.data() + 4 * i, 4);
  return v;
}

std::string open_error(const std::string& path, int64_t vocab = 100) {
  auto s = open_llmc_shards(path, vocab);
  EXPECT_FALSE(s.ok());
  return s.ok() ? "" : std::string(s.status().message());
}

// Every token of every sequence, in order.
std::vector<int32_t> read_all(const TokenSource& src) {
  std::vector<int32_t> out;
  for (int64_t s = 0; s < src.num_sequences(); ++s) {
    const size_t at = out.size();
    out.resize(at + static_cast<size_t>(src.sequence_length(s)));
    EXPECT_TRUE(src.read(s, 0, src.sequence_length(s), out.data() + at).ok());
  }
  return out;
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

TEST(DataTest, BadMagicNamesTheFileTheFieldAndBothKinds) {
  write_raw(tmp("magic.bin"), {12345, 1, 4}, std::vector<uint16_t>{1, 2, 3, 4});
  const std::string msg = open_error(tmp("magic.bin"));
  EXPECT_NE(msg.find("data file " + tmp("magic.bin") + ": bad magic 12345 in header[0] (bytes 0-3), expected 20240520 "
                     "(16-bit tokens) or 20240801 (32-bit tokens)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("set data.format to \"text\" for raw text"), std::string::npos) << msg;
}

TEST(DataTest, TruncatedShardIsRefusedWithSizes) {
  write_raw(tmp("short.bin"), {kLlmcMagicU16, 1, 100}, std::vector<uint16_t>{1, 2, 3});
  const std::string msg = open_error(tmp("short.bin"));
  EXPECT_NE(msg.find("short.bin: header says 100 tokens, so the file should be 1224 bytes, but it is 1030 bytes (the "
                     "count is header[2], bytes 8-11, of 2-byte tokens"),
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
  write_raw(tmp("ver.bin"), {kLlmcMagicU16, 2, 2}, std::vector<uint16_t>{1, 2});
  EXPECT_NE(open_error(tmp("ver.bin")).find("ver.bin: bad version 2 in header[1] (bytes 4-7), expected 1 for magic "
                                            "20240520"),
            std::string::npos);
  write_raw(tmp("vocab.bin"), {kLlmcMagicU16, 1, 3}, std::vector<uint16_t>{1, 300, 2});
  EXPECT_NE(open_error(tmp("vocab.bin"), 256).find("data file " + tmp("vocab.bin") +
                                                   ": token 300 at position 1 is >= model.vocab_size 256"),
            std::string::npos);
}

// Llama-3's vocabulary (128,256) needs ids above 65,535: written as a 32-bit
// shard, they come back exactly.
TEST(DataTest, ThirtyTwoBitShardRoundTripsIdsAbove65535) {
  constexpr int64_t kLlama3Vocab = 128256;
  const std::vector<int32_t> tokens = {128000, 0, 65535, 65536, 70000, 100000, 128255, 1, 128001};
  const std::string path = tmp("llama3.bin");
  ASSERT_TRUE(write_token_shard(path, tokens, kLlama3Vocab).ok());
  EXPECT_EQ(std::filesystem::file_size(path), 1024u + 4 * tokens.size());
  EXPECT_EQ(header_field(path, 0), 20240801);
  EXPECT_EQ(header_field(path, 1), 7);
  EXPECT_EQ(header_field(path, 2), static_cast<int32_t>(tokens.size()));
  auto src = open_llmc_shards(path, kLlama3Vocab);
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_EQ(read_all(**src), tokens);
  std::vector<int32_t> part(3);
  ASSERT_TRUE((*src)->read(0, 3, 3, part.data()).ok());
  EXPECT_EQ(part, (std::vector<int32_t>{65536, 70000, 100000}));
  EXPECT_EQ((*src)->vocab_bound(), 128256);
  EXPECT_NE((*src)->describe().find("1 llm.c shard (32-bit tokens), 9 tokens"), std::string::npos)
      << (*src)->describe();
}

// 16-bit tokens exactly while every id fits in 16 bits with room to spare
// (vocabulary <= 65,535), 32-bit from 65,536 ids on.
TEST(DataTest, WriterPicksTheTokenWidthFromTheVocabulary) {
  const std::vector<int32_t> tokens = {0, 65534, 7};
  ASSERT_TRUE(write_token_shard(tmp("u16.bin"), tokens, 65535).ok());
  EXPECT_EQ(header_field(tmp("u16.bin"), 0), 20240520);
  EXPECT_EQ(header_field(tmp("u16.bin"), 1), 1);
  EXPECT_EQ(std::filesystem::file_size(tmp("u16.bin")), 1024u + 2 * 3);
  ASSERT_TRUE(write_token_shard(tmp("u32.bin"), tokens, 65536).ok());
  EXPECT_EQ(header_field(tmp("u32.bin"), 0), 20240801);
  EXPECT_EQ(std::filesystem::file_size(tmp("u32.bin")), 1024u + 4 * 3);
  for (const char* name : {"u16.bin", "u32.bin"}) {
    auto src = open_llmc_shards(tmp(name), 65536);
    ASSERT_TRUE(src.ok()) << src.status();
    EXPECT_EQ(read_all(**src), tokens) << name;
  }
}

// An id the vocabulary does not hold is never written (in 16 bits it would
// have become another token); a file already at the path stays as it was.
TEST(DataTest, WriterRefusesIdsOutsideTheVocabularyAndKeepsTheOldFile) {
  const std::string path = tmp("keep.bin");
  ASSERT_TRUE(write_token_shard(path, std::vector<int32_t>{1, 2, 3}, 50257).ok());
  const std::string before = file_bytes(path);
  absl::Status s = write_token_shard(path, std::vector<int32_t>{5, 6, 70000, 8}, 50257);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("writing " + path + ": token 70000 at position 2 is outside the vocabulary "
                                          "[0, 50257); nothing was written"),
            std::string::npos)
      << s;
  s = write_token_shard(path, std::vector<int32_t>{-1}, 50257);
  EXPECT_NE(std::string(s.message()).find("token -1 at position 0 is outside the vocabulary"), std::string::npos) << s;
  EXPECT_EQ(file_bytes(path), before);
}

// A write that fails half way (here the file-size limit, as a full disk
// would) reports the error and leaves the old shard and no temporary file.
TEST(DataTest, FailedWriteLeavesTheOldShardIntact) {
  const std::string dir = fresh_dir("dir");
  const std::string path = dir + "/shard.bin";
  ASSERT_TRUE(write_token_shard(path, std::vector<int32_t>{1, 2, 3}, 256).ok());
  const std::string before = file_bytes(path);
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  const auto old_handler = signal(SIGXFSZ, SIG_IGN);
  rlimit small = old;
  small.rlim_cur = 4096;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  const absl::Status s = write_token_shard(path, std::vector<int32_t>(100000, 7), 256);
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, old_handler);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("writing " + path + ".tmp."), std::string::npos) << s;
  EXPECT_EQ(file_bytes(path), before);
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 1) << "the temporary file was removed";
}

// What a user holding a damaged 32-bit shard reads: the file and the field.
TEST(DataTest, CorruptThirtyTwoBitHeadersNameTheFileAndField) {
  const std::vector<uint32_t> tokens = {70000, 1, 2, 3};
  write_raw(tmp("ver.bin"), {kLlmcMagicU32, 1, 4}, tokens);
  EXPECT_NE(open_error(tmp("ver.bin"), 128256)
                .find("data file " + tmp("ver.bin") + ": bad version 1 in header[1] (bytes 4-7), expected 7 for magic "
                      "20240801 (llm.c Llama-3 header, 32-bit tokens)"),
            std::string::npos);
  // A 16-bit count of 32-bit tokens: the size gives it away.
  write_raw(tmp("size.bin"), {kLlmcMagicU32, 7, 8}, tokens);
  EXPECT_NE(open_error(tmp("size.bin"), 128256)
                .find("data file " + tmp("size.bin") + ": header says 8 tokens, so the file should be 1056 bytes, but "
                      "it is 1040 bytes (the count is header[2], bytes 8-11, of 4-byte tokens"),
            std::string::npos);
  write_raw(tmp("negative.bin"), {kLlmcMagicU32, 7, -4}, tokens);
  EXPECT_NE(open_error(tmp("negative.bin"), 128256).find("negative.bin: bad token count -4 in header[2] (bytes 8-11)"),
            std::string::npos);
  write_raw(tmp("vocab.bin"), {kLlmcMagicU32, 7, 4}, tokens);
  EXPECT_NE(open_error(tmp("vocab.bin"), 50257)
                .find("data file " + tmp("vocab.bin") + ": token 70000 at position 0 is >= model.vocab_size 50257"),
            std::string::npos);
}

// A shard that llm.c's Python wrote with 16-bit tokens still reads, exactly.
TEST(DataTest, SixteenBitShardFromLlmcReads) {
  const std::vector<uint16_t> tokens = {50256, 0, 65535, 464, 2068};
  write_raw(tmp("gpt2.bin"), {kLlmcMagicU16, kLlmcVersionU16, 5}, tokens);
  auto src = open_llmc_shards(tmp("gpt2.bin"), 65536);
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_EQ(read_all(**src), (std::vector<int32_t>{50256, 0, 65535, 464, 2068}));
}

// header[3] records the writer's vocabulary (llm.c writes 0 there): it reads
// back from a shard, from a path of shards that agree, and as -1 with both
// files named when they do not; nothing is refused on it.
TEST(DataTest, ShardHeaderDeclaresTheWritersVocabulary) {
  const std::string dir = fresh_dir("declared");
  ASSERT_TRUE(write_token_shard(dir + "/a.bin", std::vector<int32_t>{1, 2}, 50257).ok());
  EXPECT_EQ(header_field(dir + "/a.bin", 3), 50257);
  ASSERT_TRUE(write_token_shard(dir + "/b.bin", std::vector<int32_t>{3}, 50257).ok());
  auto src = open_llmc_shards(dir, 50304);
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_EQ((*src)->declared_vocab(), 50257);
  EXPECT_NE((*src)->describe().find("2 llm.c shards (16-bit tokens), 3 tokens, written for a vocabulary of 50257"),
            std::string::npos)
      << (*src)->describe();
  ASSERT_TRUE(write_token_shard(tmp("u32.bin"), std::vector<int32_t>{70000}, 128256).ok());
  EXPECT_EQ(header_field(tmp("u32.bin"), 3), 128256);
  EXPECT_EQ(open_llmc_shards(tmp("u32.bin"), 128256).value()->declared_vocab(), 128256);

  // llm.c's own shards, and write_llmc_shard, which is not told the vocabulary: 0.
  write_raw(dir + "/c.bin", {kLlmcMagicU16, kLlmcVersionU16, 1}, std::vector<uint16_t>{5});
  EXPECT_EQ(open_llmc_shards(dir + "/c.bin", 256).value()->declared_vocab(), 0);
  ASSERT_TRUE(write_llmc_shard(tmp("plain.bin"), {1, 2}).ok());
  EXPECT_EQ(header_field(tmp("plain.bin"), 3), 0);

  src = open_llmc_shards(dir, 50304);
  ASSERT_TRUE(src.ok()) << src.status() << " (a mismatch is not refused here)";
  EXPECT_EQ((*src)->declared_vocab(), -1);
  EXPECT_EQ((*src)->declared_vocabs(), (std::vector<int64_t>{50257, 0}));  // each once, in file order
  EXPECT_NE((*src)->describe().find("written for different vocabularies (" + dir + "/a.bin: 50257, " + dir +
                                    "/c.bin: 0; 0 = not recorded)"),
            std::string::npos)
      << (*src)->describe();
  std::ofstream(tmp("text.txt")) << "bytes";
  EXPECT_EQ(open_text_bytes(tmp("text.txt")).value()->declared_vocab(), 256);

  write_raw(tmp("negative.bin"), {kLlmcMagicU16, kLlmcVersionU16, 1, -3}, std::vector<uint16_t>{5});
  EXPECT_NE(open_error(tmp("negative.bin")).find("negative.bin: bad vocabulary size -3 in header[3] (bytes 12-15)"),
            std::string::npos);
}

// Two widths in one path come from two tokenizers: refused, naming both files.
TEST(DataTest, ShardsOfTwoWidthsInOnePathAreRefused) {
  const std::string dir = fresh_dir("mixed");
  ASSERT_TRUE(write_token_shard(dir + "/a.bin", std::vector<int32_t>{1, 2}, 50257).ok());
  ASSERT_TRUE(write_token_shard(dir + "/b.bin", std::vector<int32_t>{1, 2}, 128256).ok());
  const std::string msg = open_error(dir, 128256);
  EXPECT_NE(msg.find("data path " + dir + ": " + dir + "/a.bin has 16-bit tokens (llm.c GPT-2 header) but " + dir +
                     "/b.bin has 32-bit tokens (llm.c Llama-3 header)"),
            std::string::npos)
      << msg;
}

// A shard rewritten in place after the run checked it: the read that meets
// an id past the vocabulary fails naming it, rather than index past the
// embedding table.
TEST(DataTest, ShardRewrittenWithBadIdsDuringTheRunIsAnError) {
  const std::string path = tmp("rewritten.bin");
  ASSERT_TRUE(write_token_shard(path, std::vector<int32_t>(100, 5), 128256).ok());
  auto src = open_llmc_shards(path, 128256);
  ASSERT_TRUE(src.ok()) << src.status();
  {
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    const uint32_t bad = 200000;
    f.seekp(1024 + 4 * 50);
    f.write(reinterpret_cast<const char*>(&bad), 4);
  }
  std::vector<int32_t> out(10);
  const absl::Status s = (*src)->read(0, 45, 10, out.data());
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_NE(std::string(s.message()).find("data file " + path + ": token 200000 at position 50 is >= model.vocab_size "
                                          "128256, but every token was below it when the run opened the file"),
            std::string::npos)
      << s;
}

// data.format "text" on a token shard would train on its bytes: refused,
// naming the file, for both kinds and for a shard among text files.
TEST(DataTest, TokenShardGivenAsTextIsRefused) {
  ASSERT_TRUE(write_token_shard(tmp("u16.bin"), std::vector<int32_t>{1, 2, 3}, 50257).ok());
  ASSERT_TRUE(write_token_shard(tmp("u32.bin"), std::vector<int32_t>{1, 2, 3}, 128256).ok());
  for (const auto& [name, magic] : {std::pair{"u16.bin", "20240520"}, std::pair{"u32.bin", "20240801"}}) {
    auto t = open_text_bytes(tmp(name));
    ASSERT_FALSE(t.ok()) << name;
    const std::string msg(t.status().message());
    EXPECT_NE(msg.find("data file " + tmp(name) + ": is an llm.c token shard (magic " + magic), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("Set data.format to \"llmc\""), std::string::npos) << msg;
  }
  const std::string dir = fresh_dir("texts");
  std::ofstream(dir + "/a.txt") << "hello";
  std::filesystem::copy_file(tmp("u32.bin"), dir + "/b.bin");
  auto t = open_text_bytes(dir);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(std::string(t.status().message()).find("data file " + dir + "/b.bin: is an llm.c token shard"),
            std::string::npos)
      << t.status();
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

// Text tokenized at start (runtime/tools/training_data.h) is one stream in
// memory, declared for the tokenizer's vocabulary; windows cross documents.
TEST(DataTest, TokensInMemoryAreOneSequence) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < 100; ++i) tokens.push_back(i % 13 == 12 ? 1999 : i % 13);
  auto l = DataLoader::create(make_memory_tokens(tokens, 2001, "100 tokens"), 16, 3).value();
  EXPECT_EQ(l->samples().size(), 100 - 16);
  EXPECT_EQ(l->samples().describe(), "100 tokens");
  Batch b = l->micro_batch(0, 0, 0, 1, 4, 1).value();
  for (int64_t r = 0; r < 4; ++r) {
    const int32_t* in = b.inputs.i32() + r * 16;
    for (int64_t t = 0; t + 1 < 16; ++t) EXPECT_EQ(b.targets.i32()[r * 16 + t], in[t + 1]);
  }
  auto src = make_memory_tokens(tokens, 2001, "x");
  EXPECT_EQ(src->declared_vocab(), 2001);
  EXPECT_EQ(src->vocab_bound(), 2000);
  EXPECT_EQ(src->num_sequences(), 1);
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
