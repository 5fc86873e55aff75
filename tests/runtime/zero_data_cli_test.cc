// zero-data as a user runs it.
//  * tokenize: text files and JSON lines through a tokenizer become shards
//    holding each document's Tokenizer::encode ids then eos, in order, split
//    into train and val (disjoint, complete), identical for 1 and 3 threads;
//    bad input (a malformed line, an empty dataset, a tokenizer it cannot
//    read) exits 2 naming it and leaves earlier outputs as they were.
//  * bytes-to-llmc writes the documents of a text path as one 16-bit shard,
//    each preceded by token 0, and refuses input that is already a token
//    shard or an output it cannot write, naming the file, with exit status 1.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include "runtime/data/token_source.h"
#include "runtime/data/tokenizer.h"
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
  EXPECT_EQ((*src)->declared_vocab(), 256) << "header[3]: the byte vocabulary";
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

const std::string kGpt2 = std::string(ZE_SOURCE_DIR) + "/tests/data/tokenizers/gpt2";
constexpr int32_t kGpt2Eos = 2000;  // <|endoftext|> of the test tokenizer (2001 ids)

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// The files of a directory, by name, with their bytes.
std::map<std::string, std::string> dir_files(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out[e.path().filename()] = file_bytes(e.path());
  return out;
}

// Every token of the shards matching `glob`, in order.
std::vector<int32_t> shard_tokens(const std::string& glob) {
  auto src = open_llmc_shards(glob, 2001);
  EXPECT_TRUE(src.ok()) << src.status();
  if (!src.ok()) return {};
  EXPECT_EQ((*src)->declared_vocab(), 2001) << "header[3]: the tokenizer's vocabulary";
  std::vector<int32_t> out;
  for (int64_t s = 0; s < (*src)->num_sequences(); ++s) {
    const size_t at = out.size();
    out.resize(at + static_cast<size_t>((*src)->sequence_length(s)));
    EXPECT_TRUE((*src)->read(s, 0, (*src)->sequence_length(s), out.data() + at).ok());
  }
  return out;
}

// A token stream cut after each eos; a stream that does not end in eos is wrong.
std::vector<std::vector<int32_t>> split_documents(const std::vector<int32_t>& ids) {
  std::vector<std::vector<int32_t>> docs(1);
  for (int32_t id : ids) {
    if (id == kGpt2Eos) docs.emplace_back();
    else docs.back().push_back(id);
  }
  EXPECT_TRUE(docs.back().empty()) << "the stream ends with eos";
  docs.pop_back();
  return docs;
}

std::string json_line(const std::string& field, const std::string& text) {
  return "{\"" + field + "\": \"" + text + "\"}\n";
}

// Distinct short documents: "Document 0 says ..." etc.
std::vector<std::string> documents(int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back("Document " + std::to_string(i) + " tells of the model and the data.");
  return out;
}

TEST(ZeroDataCliTest, TokenizeWritesEachDocumentThenEosIntoDisjointCompleteTrainAndVal) {
  const std::string dir = fresh_dir("tokenize");
  const std::vector<std::string> docs = documents(15);
  std::string jsonl;
  for (int i = 0; i < 12; ++i) jsonl += json_line("text", docs[i]);
  std::ofstream(dir + "/a.jsonl") << jsonl;
  for (int i = 12; i < 15; ++i) std::ofstream(dir + "/t" + std::to_string(i) + ".txt") << docs[i];
  const auto r = zero_data("tokenize --tokenizer " + kGpt2 + " --input " + dir + "/a.jsonl " + dir +
                           "/'t*.txt' --out " + dir + "/out/set --val-documents 3 --threads 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tokenized 15 documents from 1 JSON-lines file (field \"text\") and 3 text files"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("each document: ... <|endoftext|> (tokenizer " + kGpt2 + ", 2001 ids: 16-bit shards"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("train: 12 documents, "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(": " + dir + "/out/set_train_000000.bin\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("val: 3 documents, "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(": " + dir + "/out/set_val_000000.bin\n"), std::string::npos) << r.output;

  auto tokenizer = load_tokenizer(kGpt2);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const auto train = split_documents(shard_tokens(dir + "/out/set_train_000000.bin"));
  const auto val = split_documents(shard_tokens(dir + "/out/set_val_000000.bin"));
  ASSERT_EQ(train.size(), 12u);
  ASSERT_EQ(val.size(), 3u);
  // Each document is in exactly one split, and each split keeps input order.
  size_t t = 0, v = 0;
  for (const std::string& doc : docs) {
    const std::vector<int32_t> ids = (*tokenizer)->encode(doc);
    if (t < train.size() && train[t] == ids) ++t;
    else if (v < val.size() && val[v] == ids) ++v;
    else ADD_FAILURE() << "document \"" << doc << "\" is in neither split at its place";
  }
  EXPECT_EQ(t, train.size());
  EXPECT_EQ(v, val.size());
}

TEST(ZeroDataCliTest, TokenizeReadsTheNamedJsonField) {
  const std::string dir = fresh_dir("field");
  std::ofstream(dir + "/d.jsonl") << "{\"text\": \"decoy\", \"body\": \"The real one.\"}\n"
                                  << "{\"body\": \"And another.\"}\n";
  const auto r = zero_data("tokenize --tokenizer " + kGpt2 + " --input " + dir + "/d.jsonl --jsonl-field body --out " +
                           dir + "/x --val-fraction 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("val: 0 documents, 0 tokens: no file"), std::string::npos) << r.output;
  auto tokenizer = load_tokenizer(kGpt2);
  std::vector<int32_t> expected = (*tokenizer)->encode("The real one.");
  expected.push_back(kGpt2Eos);
  (*tokenizer)->encode("And another.", false, &expected);
  expected.push_back(kGpt2Eos);
  EXPECT_EQ(shard_tokens(dir + "/x_train_000000.bin"), expected);
  EXPECT_FALSE(std::filesystem::exists(dir + "/x_val_000000.bin"));
}

// A failed run names the line, exits 2 and leaves the earlier run's shards
// as they were, with no staged file beside them.
TEST(ZeroDataCliTest, TokenizeMalformedLineExits2NamingFileAndLineAndKeepsOldShards) {
  const std::string dir = fresh_dir("malformed");
  std::filesystem::create_directories(dir + "/in");
  std::ofstream(dir + "/in/good.jsonl") << json_line("text", "one") << json_line("text", "two");
  const std::string args = "tokenize --tokenizer " + kGpt2 + " --out " + dir + "/out/x --input ";
  ASSERT_EQ(zero_data(args + dir + "/in/good.jsonl").exit_code, 0);
  const auto before = dir_files(dir + "/out");
  ASSERT_EQ(before.size(), 2u);

  std::ofstream(dir + "/in/bad.jsonl") << json_line("text", "three") << json_line("text", "four") << "{\"text\": \"fi\n";
  auto r = zero_data(args + dir + "/in/bad.jsonl");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("zero-data: " + dir + "/in/bad.jsonl:3: not valid JSON (column 13: syntax error"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(dir_files(dir + "/out"), before);

  std::ofstream(dir + "/in/bad.jsonl") << json_line("text", "three") << "{\"id\": 4}\n";
  r = zero_data(args + dir + "/in/bad.jsonl");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("zero-data: " + dir + "/in/bad.jsonl:2: no field \"text\" (the object's fields: \"id\")"),
            std::string::npos)
      << r.output;
  std::ofstream(dir + "/in/long.txt") << std::string(1000, 'a');
  r = zero_data(args + dir + "/in/long.txt --max-document-bytes 999");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("zero-data: data file " + dir + "/in/long.txt: is over the document limit of 999 bytes"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(dir_files(dir + "/out"), before);
}

TEST(ZeroDataCliTest, TokenizeEmptyInputExits2) {
  const std::string dir = fresh_dir("empty");
  std::ofstream(dir + "/blank.jsonl") << "\n\n";
  std::ofstream(dir + "/empty.txt") << "";
  const auto r = zero_data("tokenize --tokenizer " + kGpt2 + " --input " + dir + "/blank.jsonl " + dir +
                           "/empty.txt --out " + dir + "/x");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("zero-data: no documents in " + dir + "/blank.jsonl, " + dir + "/empty.txt (1 JSON-lines "
                          "file (field \"text\") and 1 text file, 2 bytes): all 1 records are empty documents"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/x_train_000000.bin"));
}

// Shards end at document boundaries, and 1 and 3 threads write the same bytes.
TEST(ZeroDataCliTest, TokenizeOneAndThreeThreadsWriteIdenticalShardsCutAtDocuments) {
  const std::string dir = fresh_dir("threads");
  std::string jsonl;
  for (const std::string& doc : documents(300)) jsonl += json_line("text", doc);
  std::ofstream(dir + "/d.jsonl") << jsonl;
  for (int threads : {1, 3}) {
    const auto r = zero_data("tokenize --tokenizer " + kGpt2 + " --input " + dir + "/d.jsonl --out " + dir + "/t" +
                             std::to_string(threads) + "/x --shard-tokens 500 --val-fraction 0.05 --threads " +
                             std::to_string(threads));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  const auto one = dir_files(dir + "/t1"), three = dir_files(dir + "/t3");
  EXPECT_GT(one.size(), 5u) << "several train shards and a val shard";
  EXPECT_EQ(one, three);
  EXPECT_TRUE(one.count("x_val_000000.bin"));
  const std::string last_train = std::prev(one.find("x_val_000000.bin"))->first;
  for (const auto& [name, bytes] : one) {
    const std::vector<int32_t> ids = shard_tokens(dir + "/t1/" + name);
    EXPECT_LE(ids.size(), 500u) << name << ": each document is far shorter than a shard";
    EXPECT_EQ(ids.back(), kGpt2Eos) << name << " ends at a document boundary";
    // A shard is cut only when the next document (< 20 tokens) would not fit.
    if (name.find("train") != std::string::npos && name != last_train) {
      EXPECT_GT(ids.size(), 480u) << name;
    }
  }
  // A rerun with bigger shards removes the earlier run's extra shards.
  const auto r = zero_data("tokenize --tokenizer " + kGpt2 + " --input " + dir + "/d.jsonl --out " + dir +
                           "/t1/x --val-fraction 0.05");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("removed " + dir + "/t1/x_train_000001.bin (an earlier run's)"), std::string::npos)
      << r.output;
  EXPECT_EQ(dir_files(dir + "/t1").size(), 2u);
  EXPECT_EQ(shard_tokens(dir + "/t1/x_train_*.bin"), shard_tokens(dir + "/t3/x_train_*.bin"));
}

TEST(ZeroDataCliTest, TokenizeRefusesWhatItCannotUse) {
  const std::string dir = fresh_dir("refusals");
  std::ofstream(dir + "/d.txt") << "one document";
  const std::string input = " --input " + dir + "/d.txt";
  auto r = zero_data("tokenize --tokenizer " + dir + "/no-such-model" + input + " --out " + dir + "/x");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("zero-data: tokenizer " + dir + "/no-such-model: no such file or directory"),
            std::string::npos)
      << r.output;

  std::filesystem::create_directories(dir + "/no-eos");
  std::filesystem::copy_file(kGpt2 + "/tokenizer.json", dir + "/no-eos/tokenizer.json");
  r = zero_data("tokenize --tokenizer " + dir + "/no-eos" + input + " --out " + dir + "/x");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("zero-data: tokenizer " + dir + "/no-eos names no eos_token"), std::string::npos)
      << r.output;
  r = zero_data("tokenize --tokenizer " + dir + "/no-eos" + input + " --out " + dir + "/x --eos-id 2000");
  EXPECT_EQ(r.exit_code, 0) << r.output;

  r = zero_data("tokenize --tokenizer " + kGpt2 + input + " --out " + dir);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("names a directory; give a file-name prefix"), std::string::npos) << r.output;
  r = zero_data("tokenize --tokenizer " + kGpt2 + input + " --out " + dir + "/y --val-documents 1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--val-documents 1 leaves no training documents: the input holds 1 records"),
            std::string::npos)
      << r.output;
  r = zero_data("tokenize --tokenizer " + kGpt2 + " --input " + dir + "/missing.jsonl --out " + dir + "/y");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("missing.jsonl: no such file or directory"), std::string::npos) << r.output;
  // An output it cannot create is an I/O failure: exit 1.
  r = zero_data("tokenize --tokenizer " + kGpt2 + input + " --out " + dir + "/d.txt/y");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("zero-data: creating directory " + dir + "/d.txt: "), std::string::npos) << r.output;
}

// On a terminal the progress is a bar redrawn in place, ending at 100%.
TEST(ZeroDataCliTest, TokenizeDrawsAProgressBarOnATerminal) {
  if (!std::filesystem::exists("/usr/bin/script")) GTEST_SKIP() << "no script(1) to give the program a terminal";
  const std::string dir = fresh_dir("progress");
  std::ofstream(dir + "/d.txt") << "one document";
  const auto r = testing::run_command("/usr/bin/script -qec '" + std::string(ZE_DATA_BIN) + " tokenize --tokenizer " +
                                      kGpt2 + " --input " + dir + "/d.txt --out " + dir + "/x' /dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\r[##############################] 100% "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" | 1 docs | 6 tokens | "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("| ETA 0s"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace zero
