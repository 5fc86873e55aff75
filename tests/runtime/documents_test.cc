// Documents and their tokenization (runtime/data/documents.h,
// tokenize_documents.h): text files and JSON lines come back in order with
// their file and line; every kind of bad input is an error naming file:line;
// the train/val split is exact and spread; tokenized ids are exactly
// Tokenizer::encode of each document (with the post-processor's tokens)
// followed by eos, in order, for 1 and 3 threads alike.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_format.h"
#include "runtime/data/documents.h"
#include "runtime/data/tokenize_documents.h"

namespace zero {
namespace {

const std::string kTokenizers = std::string(ZE_SOURCE_DIR) + "/tests/data/tokenizers";

// An empty directory private to the running test.
std::string fresh_dir() {
  const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string dir = ::testing::TempDir() + "/" + t->test_suite_name() + "." + t->name();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::unique_ptr<DocumentReader> open_reader(const std::vector<std::string>& inputs, int64_t max_bytes = 1 << 20,
                                            const std::string& field = "text") {
  DocumentOptions o;
  o.inputs = inputs;
  o.max_document_bytes = max_bytes;
  o.jsonl_field = field;
  auto r = DocumentReader::open(o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? std::move(r).value() : nullptr;
}

// Every document of `reader` (decoded), or the first error's message.
struct ReadAll {
  std::vector<Document> docs;
  std::string error;
};
ReadAll read_all(DocumentReader& reader) {
  ReadAll out;
  while (true) {
    Document d;
    absl::StatusOr<bool> got = reader.next(&d);
    if (!got.ok()) {
      out.error = std::string(got.status().message());
      return out;
    }
    if (!*got) return out;
    out.docs.push_back(std::move(d));
  }
}

// The error reading one JSON-lines file with these contents gives.
std::string jsonl_error(const std::string& dir, const std::string& contents, int64_t max_bytes = 1 << 20) {
  write_file(dir + "/bad.jsonl", contents);
  auto r = open_reader({dir + "/bad.jsonl"}, max_bytes);
  return r ? read_all(*r).error : "open failed";
}

TEST(DocumentsTest, TextFilesAndJsonLinesComeBackInOrderWithFileAndLine) {
  const std::string dir = fresh_dir();
  write_file(dir + "/a.txt", "first\nfile\n");
  write_file(dir + "/b.txt", "");
  // A blank line, CRLF endings, a line with other fields, no final newline.
  write_file(dir + "/c.jsonl", "{\"text\": \"one\"}\n  \r\n{\"id\": 7, \"text\": \"tw\\u00f6\"}\r\n{\"text\": \"\"}");
  auto r = open_reader({dir + "/*.txt", dir + "/c.jsonl"});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->describe(), "1 JSON-lines file (field \"text\") and 2 text files, " +
                               std::to_string(std::filesystem::file_size(dir + "/a.txt") +
                                              std::filesystem::file_size(dir + "/c.jsonl")) + " bytes");
  EXPECT_EQ(r->count_records().value(), 5);
  const ReadAll all = read_all(*r);
  ASSERT_EQ(all.error, "");
  ASSERT_EQ(all.docs.size(), 5u);
  const std::vector<std::string> texts = {"first\nfile\n", "", "one", "tw\xc3\xb6", ""};
  const std::vector<std::string> where = {dir + "/a.txt", dir + "/b.txt", dir + "/c.jsonl:1", dir + "/c.jsonl:3",
                                          dir + "/c.jsonl:4"};
  for (size_t i = 0; i < all.docs.size(); ++i) {
    EXPECT_EQ(all.docs[i].text, texts[i]) << i;
    EXPECT_EQ(all.docs[i].record, static_cast<int64_t>(i));
    EXPECT_EQ(r->where(all.docs[i]), where[i]);
  }
  EXPECT_EQ(r->bytes_read(), r->total_bytes());
}

// A line longer than the 1 MiB read chunk, and lines that straddle chunks.
TEST(DocumentsTest, LinesLongerThanTheReadChunkAreWhole) {
  const std::string dir = fresh_dir();
  const std::string big(3 << 20, 'x');
  std::string contents;
  for (int i = 0; i < 3; ++i) contents += "{\"text\": \"" + big.substr(0, (1 << 20) - 7 + i) + "\"}\n";
  contents += "{\"text\": \"" + big + "\"}\n";
  write_file(dir + "/big.jsonl", contents);
  auto r = open_reader({dir + "/big.jsonl"}, 4 << 20);
  const ReadAll all = read_all(*r);
  ASSERT_EQ(all.error, "");
  ASSERT_EQ(all.docs.size(), 4u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(all.docs[i].text.size(), static_cast<size_t>((1 << 20) - 7 + i));
  EXPECT_EQ(all.docs[3].text, big);
}

TEST(DocumentsTest, BadJsonLinesAreNamedByFileAndLine) {
  const std::string dir = fresh_dir();
  const std::string at = dir + "/bad.jsonl:2: ";
  const std::string ok = "{\"text\": \"fine\"}\n";
  std::string msg = jsonl_error(dir, ok + "{\"text\": \"cut\n");
  EXPECT_EQ(msg.rfind(at + "not valid JSON (column 14: syntax error while parsing value", 0), 0u) << msg;
  msg = jsonl_error(dir, ok + "[\"text\"]\n");
  EXPECT_EQ(msg, at + "expected a JSON object with a \"text\" field, got an array");
  msg = jsonl_error(dir, ok + "{\"id\": 1, \"content\": \"x\"}\n");
  EXPECT_EQ(msg, at + "no field \"text\" (the object's fields: \"id\", \"content\")");
  msg = jsonl_error(dir, ok + "{\"text\": 5}\n");
  EXPECT_EQ(msg, at + "field \"text\" is a number, not a string");
  msg = jsonl_error(dir, ok + "{\"text\": null}\n");
  EXPECT_EQ(msg, at + "field \"text\" is null, not a string");
  msg = jsonl_error(dir, ok + "{\"meta\": {\"text\": \"nested\"}}\n");
  EXPECT_EQ(msg, at + "no field \"text\" (the object's fields: \"meta\")") << "only the top level counts";
  msg = jsonl_error(dir, ok + "{\"text\": \"a\"} trailing\n");
  EXPECT_NE(msg.find(at + "not valid JSON"), std::string::npos) << msg;
  // A deeply nested line is an error, not a stack overflow.
  msg = jsonl_error(dir, ok + std::string(100000, '[') + "\n");
  EXPECT_EQ(msg.rfind(at + "not valid JSON", 0), 0u) << msg.substr(0, 300);
}

TEST(DocumentsTest, DocumentsOverTheLimitAreNamed) {
  const std::string dir = fresh_dir();
  std::string msg = jsonl_error(dir, "{\"text\": \"" + std::string(101, 'a') + "\"}\n", 100);
  EXPECT_EQ(msg, dir + "/bad.jsonl:1: the document is 101 bytes, over the limit of 100 bytes (max_document_bytes)");
  EXPECT_EQ(jsonl_error(dir, "{\"text\": \"" + std::string(100, 'a') + "\"}\n", 100), "") << "the limit itself is fine";
  // A file without newlines is refused before it is held whole.
  msg = jsonl_error(dir, std::string((2 << 20) + 300, ' ') + "x", 100);
  EXPECT_EQ(msg.rfind(dir + "/bad.jsonl:1: the line is longer than 1048776 bytes", 0), 0u) << msg.substr(0, 300);
  write_file(dir + "/big.txt", std::string(101, 'b'));
  auto r = open_reader({dir + "/big.txt"}, 100);
  msg = read_all(*r).error;
  EXPECT_EQ(msg.rfind("data file " + dir + "/big.txt: is over the document limit of 100 bytes", 0), 0u) << msg;
}

TEST(DocumentsTest, BinaryFilesAndFilesNamedTwiceAreRefused) {
  const std::string dir = fresh_dir();
  write_file(dir + "/a.txt.gz", std::string("\x1f\x8b\x08\x00", 4));
  DocumentOptions o;
  o.inputs = {dir + "/a.txt.gz"};
  auto r = DocumentReader::open(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "data file " + dir + "/a.txt.gz: is gzip-compressed: decompress it first (zcat); "
                                  "not text or JSON lines");
  write_file(dir + "/a.txt", "text");
  o.inputs = {dir + "/a.txt", dir + "/*.txt"};
  r = DocumentReader::open(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "data file " + dir + "/a.txt is named twice, by input " + dir + "/a.txt and by " +
                                      dir + "/*.txt: its documents would be tokenized twice");
  o.inputs = {dir + "/none-*.jsonl"};
  r = DocumentReader::open(o);
  EXPECT_TRUE(absl::IsNotFound(r.status())) << r.status();
}

// Exactly N of M records, one in each of N equal stretches, for any seed.
TEST(DocumentsTest, SplitPicksExactlyNSpreadOverTheInput) {
  for (const auto& [m, n] : {std::pair<int64_t, int64_t>{1000, 37}, {10, 9}, {7, 1}, {5, 0}, {1000003, 1000}}) {
    for (uint64_t seed : {0ull, 1ull, 99ull}) {
      const DocumentSplit split{m, n, seed};
      std::vector<int64_t> val;
      for (int64_t r = 0; r < m; ++r)
        if (split.is_val(r)) val.push_back(r);
      ASSERT_EQ(static_cast<int64_t>(val.size()), n) << m << " " << n;
      for (int64_t k = 0; k < n; ++k) {
        EXPECT_GE(val[k], (k * m + n - 1) / n);
        EXPECT_LT(val[k], ((k + 1) * m + n - 1) / n);
      }
    }
  }
  const DocumentSplit a{1000, 50, 1}, b{1000, 50, 2};
  int differ = 0;
  for (int64_t r = 0; r < 1000; ++r) differ += a.is_val(r) != b.is_val(r) ? 1 : 0;
  EXPECT_GT(differ, 0) << "the seed picks which record of each stretch";
}

std::unique_ptr<Tokenizer> tokenizer(const std::string& name) {
  auto t = load_tokenizer(kTokenizers + "/" + name);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(t).value() : nullptr;
}

// Documents from the corpus, one per line: plenty of records for the threads.
std::vector<std::string> corpus_lines(size_t count) {
  std::ifstream in(kTokenizers + "/corpus.txt");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line) && lines.size() < count;)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

std::string json_line(const std::string& text) {
  std::string out = "{\"text\": \"";
  for (char c : text) {
    if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", static_cast<int>(c));
      continue;
    }
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"}\n";
}

struct Tokenized {
  std::vector<int32_t> ids;
  std::vector<int64_t> records;
  absl::StatusOr<TokenizeStats> stats;
};
Tokenized tokenize(const Tokenizer& t, const DocumentFraming& f, const std::vector<std::string>& inputs, int threads) {
  Tokenized out;
  auto reader = open_reader(inputs);
  out.stats = tokenize_documents(t, f, *reader, threads, [&](const Document& d, std::span<const int32_t> ids) {
    out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    out.records.push_back(d.record);
    return absl::OkStatus();
  });
  return out;
}

TEST(TokenizeDocumentsTest, IdsAreEncodeOfEachDocumentThenEosInOrderForAnyThreadCount) {
  const std::string dir = fresh_dir();
  const std::vector<std::string> docs = corpus_lines(500);
  ASSERT_EQ(docs.size(), 500u);
  std::string jsonl;
  for (size_t i = 0; i < docs.size(); ++i) {
    if (i == 17) jsonl += "\n";  // a blank line is no record
    jsonl += json_line(i == 5 ? "" : docs[i]);
  }
  write_file(dir + "/docs.jsonl", jsonl);
  write_file(dir + "/z.txt", "A text file, the last document.");
  auto t = tokenizer("gpt2");
  const DocumentFraming f = document_framing(*t, std::nullopt).value();
  EXPECT_EQ(f.eos_id, 2000);
  EXPECT_TRUE(f.prefix.empty()) << "GPT-2's post-processor adds no token";
  EXPECT_EQ(describe_framing(*t, f), "... <|endoftext|>");
  std::vector<int32_t> expected;
  for (size_t i = 0; i < docs.size(); ++i) {
    if (i == 5) continue;  // an empty document: no tokens, no eos
    t->encode(docs[i], false, &expected);
    expected.push_back(2000);
  }
  t->encode("A text file, the last document.", false, &expected);
  expected.push_back(2000);
  const Tokenized one = tokenize(*t, f, {dir + "/docs.jsonl", dir + "/z.txt"}, 1);
  ASSERT_TRUE(one.stats.ok()) << one.stats.status();
  EXPECT_EQ(one.ids, expected);
  EXPECT_EQ(one.stats->records, 501);
  EXPECT_EQ(one.stats->documents, 500);
  EXPECT_EQ(one.stats->empty_documents, 1);
  EXPECT_EQ(one.stats->tokens, static_cast<int64_t>(expected.size()));
  EXPECT_EQ(one.records.front(), 0);
  EXPECT_EQ(one.records.back(), 500);
  const Tokenized three = tokenize(*t, f, {dir + "/docs.jsonl", dir + "/z.txt"}, 3);
  ASSERT_TRUE(three.stats.ok()) << three.stats.status();
  EXPECT_EQ(three.ids, expected);
  EXPECT_EQ(three.records, one.records);
}

// Llama-3's post-processor puts <|begin_of_text|> before each document; the
// separator is the config's eos_token, or the one given.
TEST(TokenizeDocumentsTest, PostProcessorTokensFrameEachDocument) {
  const std::string dir = fresh_dir();
  write_file(dir + "/d.jsonl", json_line("Hello there.") + json_line("Second one"));
  auto t = tokenizer("llama3");
  DocumentFraming f = document_framing(*t, std::nullopt).value();
  EXPECT_EQ(f.prefix, std::vector<int32_t>{2002});
  EXPECT_EQ(f.eos_id, 2011);
  EXPECT_EQ(describe_framing(*t, f), "<|begin_of_text|> ... <|eot_id|>");
  f = document_framing(*t, 2003).value();
  EXPECT_EQ(describe_framing(*t, f), "<|begin_of_text|> ... <|end_of_text|>");
  std::vector<int32_t> expected = t->encode("Hello there.", true);
  expected.push_back(2003);
  t->encode("Second one", true, &expected);
  expected.push_back(2003);
  EXPECT_EQ(expected[0], 2002);
  const Tokenized got = tokenize(*t, f, {dir + "/d.jsonl"}, 2);
  ASSERT_TRUE(got.stats.ok()) << got.stats.status();
  EXPECT_EQ(got.ids, expected);
  // SentencePiece (tokenizer.model only): <s> ... </s>.
  auto spm = tokenizer("spm_only");
  EXPECT_EQ(describe_framing(*spm, document_framing(*spm, std::nullopt).value()), "<s> ... </s>");
  const absl::StatusOr<DocumentFraming> bad = document_framing(*t, 99999);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("eos id 99999 is not an id of tokenizer "), std::string::npos) << bad.status();
}

TEST(TokenizeDocumentsTest, TokenizerWithoutEosIsNamed) {
  const std::string dir = fresh_dir();
  std::filesystem::copy_file(kTokenizers + "/gpt2/tokenizer.json", dir + "/tokenizer.json");
  auto t = load_tokenizer(dir);
  ASSERT_TRUE(t.ok()) << t.status();
  const absl::StatusOr<DocumentFraming> f = document_framing(**t, std::nullopt);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().message(), "tokenizer " + dir + " names no eos_token (in tokenizer_config.json or "
                                  "special_tokens_map.json), and documents need one between them: give the "
                                  "separator's id with --eos-id");
  EXPECT_TRUE(document_framing(**t, 2000).ok());
}

// The first bad record in input order is the error, whichever thread meets it first.
TEST(TokenizeDocumentsTest, FirstErrorInRecordOrderWinsForAnyThreadCount) {
  const std::string dir = fresh_dir();
  const std::vector<std::string> docs = corpus_lines(400);
  std::string jsonl;
  for (size_t i = 0; i < docs.size(); ++i) jsonl += i == 300 ? "{\"text\": 3}\n" : json_line(docs[i]);
  jsonl += std::string(4 << 20, 'x');  // over the line limit (3 MiB here), after the bad record
  write_file(dir + "/d.jsonl", jsonl);
  auto t = tokenizer("gpt2");
  const DocumentFraming f = document_framing(*t, std::nullopt).value();
  for (int threads : {1, 3}) {
    const Tokenized got = tokenize(*t, f, {dir + "/d.jsonl"}, threads);
    ASSERT_FALSE(got.stats.ok());
    EXPECT_EQ(got.stats.status().message(), dir + "/d.jsonl:301: field \"text\" is a number, not a string");
    EXPECT_EQ(got.records.size(), 300u) << "every document before it was handed on, in order";
  }
}

TEST(TokenizeDocumentsTest, AnInputWithoutDocumentsIsAnError) {
  const std::string dir = fresh_dir();
  write_file(dir + "/blank.jsonl", "\n  \n");
  write_file(dir + "/empty.txt", "");
  auto t = tokenizer("gpt2");
  const DocumentFraming f = document_framing(*t, std::nullopt).value();
  Tokenized got = tokenize(*t, f, {dir + "/blank.jsonl"}, 2);
  ASSERT_FALSE(got.stats.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(got.stats.status()));
  EXPECT_EQ(got.stats.status().message(),
            "no documents in " + dir + "/blank.jsonl (1 JSON-lines file (field \"text\"), 4 bytes): every file is "
            "empty or holds only blank lines; there is nothing to tokenize");
  write_file(dir + "/e.jsonl", "{\"text\": \"\"}\n");
  got = tokenize(*t, f, {dir + "/e.jsonl", dir + "/empty.txt"}, 2);
  ASSERT_FALSE(got.stats.ok());
  EXPECT_NE(got.stats.status().message().find("all 2 records are empty documents"), std::string::npos)
      << got.stats.status();
}

}  // namespace
}  // namespace zero
