// zero-data as a user runs it: bytes-to-llmc writes the documents of a text
// path as one 16-bit shard, each preceded by token 0, and refuses input that
// is already a token shard or an output it cannot write, naming the file,
// with exit status 1.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "runtime/data/token_source.h"
#include "tests/testing/run_command.h"

namespace zero {
namespace {

std::string fresh_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/ZeroDataCliTest." + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

testing::CommandResult zero_data(const std::string& args) {
  return testing::run_command(std::string(ZE_DATA_BIN) + " " + args);
}

TEST(ZeroDataCliTest, BytesToLlmcWritesEachFilePrecededByTokenZero) {
  const std::string dir = fresh_dir("bytes");
  std::ofstream(dir + "/a.txt") << "hi";
  std::ofstream(dir + "/b.txt") << "\xff";
  const std::string out = dir + "/out.bin";
  const auto r = zero_data("bytes-to-llmc --input " + dir + "/'*.txt' --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("wrote " + out + ": 5 tokens from 2 text files"), std::string::npos) << r.output;
  EXPECT_EQ(std::filesystem::file_size(out), 1024u + 2 * 5) << "16-bit tokens for a 256-token vocabulary";
  auto src = open_llmc_shards(out, 256);
  ASSERT_TRUE(src.ok()) << src.status();
  std::vector<int32_t> tokens(5);
  ASSERT_TRUE((*src)->read(0, 0, 5, tokens.data()).ok());
  EXPECT_EQ(tokens, (std::vector<int32_t>{0, 'h', 'i', 0, 255}));
}

TEST(ZeroDataCliTest, BytesToLlmcRefusesATokenShardAsInput) {
  const std::string dir = fresh_dir("shard");
  ASSERT_TRUE(write_token_shard(dir + "/in.bin", std::vector<int32_t>{1, 70000}, 128256).ok());
  const auto r = zero_data("bytes-to-llmc --input " + dir + "/in.bin --out " + dir + "/out.bin");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("zero-data: data file " + dir + "/in.bin: is an llm.c token shard"), std::string::npos)
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/out.bin"));
}

TEST(ZeroDataCliTest, BytesToLlmcNamesAnOutputItCannotWrite) {
  const std::string dir = fresh_dir("unwritable");
  std::ofstream(dir + "/a.txt") << "hi";
  const auto r = zero_data("bytes-to-llmc --input " + dir + "/a.txt --out " + dir + "/missing/out.bin");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("zero-data: creating " + dir + "/missing/out.bin.tmp."), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("No such file or directory"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace zero
