// The C++ tokenizers against the Python libraries that define them: for each
// family's tokenizer in tests/data/tokenizers (trained locally in that
// family's configuration by make_tokenizer_golden.py), the ids of ~70
// held-out texts (Unicode, white-space runs, digits, emoji, special tokens,
// empty lines), with and without the post-processor's special tokens, and
// the decoded text, must equal what `tokenizers` (or `sentencepiece`) gave.
// Then the errors a user meets: a malformed file names its line, an
// unsupported component is refused by name.
#include "runtime/data/tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "runtime/config/json_file.h"
#include "tests/testing/test_files.h"

namespace zero {
namespace {

std::string data_dir(const std::string& kind) { return std::string(ZE_SOURCE_DIR) + "/tests/data/tokenizers/" + kind; }

class TokenizerGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerGoldenTest, IdsAndTextEqualTheReferenceLibrary) {
  const std::string dir = data_dir(GetParam());
  absl::StatusOr<Json> golden = load_json_file(dir + "/golden.json");
  ASSERT_TRUE(golden.ok()) << golden.status();
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = load_tokenizer(dir);
  ASSERT_TRUE(t.ok()) << t.status();
  const Tokenizer& tok = **t;
  EXPECT_EQ(tok.vocab_size(), (*golden)["vocab_size"].get<int64_t>()) << tok.describe();
  if (golden->contains("bos_id") && !(*golden)["bos_id"].is_null()) {
    EXPECT_EQ(tok.special().bos_id, (*golden)["bos_id"].get<int32_t>());
  }
  if (golden->contains("eos_id") && !(*golden)["eos_id"].is_null()) {
    EXPECT_EQ(tok.special().eos_id, (*golden)["eos_id"].get<int32_t>());
  }
  int cases = 0;
  for (const Json& c : (*golden)["cases"]) {
    const std::string text = c["text"].get<std::string>();
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    const auto ids_special = c["ids_special"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok.encode(text, false), ids) << GetParam() << " text: \"" << text << "\"";
    EXPECT_EQ(tok.encode(text, true), ids_special) << GetParam() << " with special tokens, text: \"" << text << "\"";
    EXPECT_EQ(tok.decode(ids, false), c["decoded"].get<std::string>()) << GetParam() << " decoding \"" << text << "\"";
    EXPECT_EQ(tok.decode(ids_special, true), c["decoded_skip"].get<std::string>())
        << GetParam() << " decoding \"" << text << "\" without special tokens";
    if (c.value("roundtrip", false)) {
      EXPECT_EQ(tok.decode(ids, false), text) << GetParam();
    }
    ++cases;
  }
  EXPECT_GE(cases, 40);
}

INSTANTIATE_TEST_SUITE_P(Families, TokenizerGoldenTest,
                         ::testing::Values("gpt2", "llama3", "qwen2", "smollm", "llama2", "mistral", "gemma", "spm_only"),
                         [](const auto& info) { return info.param; });

void write_file(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// A tokenizer is shared by the threads that encode documents.
TEST(TokenizerTest, ThreadsEncodingAtOnceGetTheSameIds) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = load_tokenizer(data_dir("llama3"));
  ASSERT_TRUE(t.ok()) << t.status();
  const std::string corpus = testing::read_file(data_dir("") + "/corpus.txt");
  const std::vector<int32_t> expected = (*t)->encode(corpus);
  std::vector<std::vector<int32_t>> got(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) threads.emplace_back([&, i] { got[i] = (*t)->encode(corpus); });
  for (auto& th : threads) th.join();
  for (const auto& g : got) EXPECT_EQ(g, expected);
  EXPECT_EQ((*t)->decode(expected), corpus);
}

// U+180E left Unicode's White_Space in 6.3; Oniguruma (`tokenizers`) agrees,
// PCRE2 10.42's \s does not, so Regex spells \s out. Ids from tokenizers 0.23.3.
TEST(TokenizerTest, MongolianVowelSeparatorIsNotWhiteSpace) {
  const std::string text = "\u180e's x\u180e \u180ey";
  const std::vector<std::pair<std::string, std::vector<int32_t>>> expected = {
      {"gpt2", {157, 254, 236, 6, 82, 1123, 157, 254, 236, 220, 157, 254, 236, 88}},
      {"llama3", {157, 254, 236, 6, 82, 1131, 157, 254, 236, 220, 157, 254, 236, 88}},
      {"qwen2", {157, 254, 236, 6, 82, 1065, 157, 254, 236, 220, 157, 254, 236, 88}}};
  for (const auto& [kind, ids] : expected) {
    absl::StatusOr<std::unique_ptr<Tokenizer>> t = load_tokenizer(data_dir(kind));
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ((*t)->encode(text), ids) << kind;
  }
}

TEST(TokenizerTest, AValueOfTheWrongTypeIsAnErrorNamingTheFile) {
  const std::string dir = testing::fresh_test_dir("tokenizer_wrong_type");
  write_file(dir + "/tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [], "fuse_unk": null}})");
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = load_tokenizer(dir);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find(dir + "/tokenizer.json: a value of the wrong type"), std::string::npos)
      << t.status();
}

// An added token with "normalized": true is matched in normalized text and
// decodes as its normalized content, as in tokenizers 0.23 ("<N>" under Lowercase).
TEST(TokenizerTest, ANormalizedAddedTokenDecodesNormalized) {
  const std::string dir = testing::fresh_test_dir("tokenizer_normalized_added");
  write_file(dir + "/tokenizer.json",
             R"({"normalizer": {"type": "Lowercase"}, "decoder": {"type": "Fuse"},
                 "added_tokens": [{"id": 2, "content": "<N>", "normalized": true, "special": false}],
                 "model": {"type": "BPE", "vocab": {"x": 0, "y": 1}, "merges": []}})");
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = load_tokenizer(dir);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->encode("X<N>y"), (std::vector<int32_t>{0, 2, 1}));
  EXPECT_EQ((*t)->decode({0, 2, 1}), "x<n>y");
}

TEST(TokenizerTest, InvalidUtf8IsReadAsReplacementCharacters) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = load_tokenizer(data_dir("gpt2"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->encode("a\xff" "b"), (*t)->encode("a\xEF\xBF\xBD" "b"));
  EXPECT_EQ((*t)->decode((*t)->encode("caf\xC3")), "caf\xEF\xBF\xBD");  // a truncated sequence is one U+FFFD
}


TEST(TokenizerTest, AMalformedFileIsNamedWithItsLine) {
  const std::string dir = testing::fresh_test_dir("tokenizer_malformed");
  write_file(dir + "/tokenizer.json", "{\n  \"model\": {\n    \"type\": \"BPE\",\n    \"vocab\": {\"a\": 0,}\n  }\n}\n");
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = load_tokenizer(dir);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find(dir + "/tokenizer.json"), std::string::npos) << t.status();
  EXPECT_NE(t.status().message().find("tokenizer.json:4:"), std::string::npos) << t.status();  // file:line:column
}

TEST(TokenizerTest, AnUnsupportedComponentIsRefusedByName) {
  const std::string dir = testing::fresh_test_dir("tokenizer_unsupported");
  write_file(dir + "/tokenizer.json",
             R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                 "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Punctuation", "behavior": "Isolated"}]}})");
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = load_tokenizer(dir);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("pre_tokenizer.pretokenizers[0]: type \"Punctuation\" is not supported"),
            std::string::npos)
      << t.status();

  write_file(dir + "/tokenizer.json", R"({"model": {"type": "WordPiece", "vocab": {"a": 0}}})");
  t = load_tokenizer(dir);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("model.type \"WordPiece\" is not supported"), std::string::npos) << t.status();

  write_file(dir + "/tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]}})");
  t = load_tokenizer(dir);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("model.merges[0] (\"a\", \"b\"): \"ab\" is not in the vocabulary"), std::string::npos)
      << t.status();
}

TEST(TokenizerTest, ADirectoryWithoutATokenizerSaysWhatIsMissing) {
  const std::string dir = testing::fresh_test_dir("tokenizer_none");
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = load_tokenizer(dir);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("has neither tokenizer.json nor tokenizer.model"), std::string::npos) << t.status();
}

}  // namespace
}  // namespace zero
