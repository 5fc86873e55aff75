// Chat templates and SFT examples against transformers and TRL's rule.
//  * Rendering: each family's conversation in tests/data/tokenizers/*/golden.json
//    ("rendered" is transformers' Jinja rendering of that directory's
//    chat_template) must come out character for character, with its ids.
//  * Labels: the oracle is transformers' assistant mask
//    (apply_chat_template(..., return_assistant_tokens_mask=True)) over each
//    directory's template rewritten with {% generation %} around what the
//    assistant writes, which is what TRL's assistant_only_loss trains on; the
//    tables below were made that way (transformers 5.24.0, tokenizers 0.23.3).
//    The conversations include white space to strip, system messages and a
//    reply that starts with newlines, which ChatML's tokenizers merge with the
//    "\n" before it.
//  * Refusals: templates of other families and later variants, and examples
//    a user can get wrong, each by name.
#include "runtime/data/sft_examples.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/config/json_file.h"
#include "runtime/data/chat_template.h"
#include "runtime/data/tokenizer.h"

namespace zero {
namespace {

std::string data_dir(const std::string& kind) { return std::string(ZE_SOURCE_DIR) + "/tests/data/tokenizers/" + kind; }

const Tokenizer& tokenizer(const std::string& kind) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& t = cache[kind];
  if (!t) {
    absl::StatusOr<std::unique_ptr<Tokenizer>> loaded = load_tokenizer(data_dir(kind));
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    t = std::move(*loaded);
  }
  return *t;
}

SftEncoder encoder(const std::string& kind) {
  absl::StatusOr<SftEncoder> e = SftEncoder::create(tokenizer(kind));
  EXPECT_TRUE(e.ok()) << e.status();
  return *std::move(e);
}

std::vector<ChatMessage> messages(const std::string& json) {
  absl::StatusOr<std::vector<ChatMessage>> m = parse_chat_messages(Json::parse(json));
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *m : std::vector<ChatMessage>{};
}

// The decoded text of each run of trained tokens.
std::vector<std::string> trained_spans(const Tokenizer& tok, const SftExample& ex) {
  std::vector<std::string> spans;
  std::vector<int32_t> run;
  for (size_t i = 0; i <= ex.ids.size(); ++i) {
    if (i < ex.ids.size() && ex.labels[i] != kIgnoreLabel) {
      EXPECT_EQ(ex.labels[i], ex.ids[i]);
      run.push_back(ex.ids[i]);
    } else if (!run.empty()) {
      spans.push_back(tok.decode(run));
      run.clear();
    }
  }
  return spans;
}

std::string mask_of(const SftExample& ex) {
  std::string mask;
  for (int32_t label : ex.labels) mask += label == kIgnoreLabel ? '0' : '1';
  return mask;
}

// --- Each family's golden conversation --------------------------------------

struct GoldenCase {
  const char* kind;
  ChatFamily family;
  const char* end_of_turn;
  const char* reply;  // the decoded trained tokens: the reply and its end-of-turn token
};

class ChatGoldenTest : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(ChatGoldenTest, RenderingIdsAndTrainedTokensEqualTransformers) {
  const GoldenCase& c = GetParam();
  const Tokenizer& tok = tokenizer(c.kind);
  absl::StatusOr<Json> golden = load_json_file(data_dir(c.kind) + "/golden.json");
  ASSERT_TRUE(golden.ok()) << golden.status();
  const Json& chat = (*golden)["chat"];
  const std::vector<ChatMessage> conversation = messages(chat["messages"].dump());
  const bool add_generation_prompt = chat["add_generation_prompt"].get<bool>();

  absl::StatusOr<ChatFormat> format = detect_chat_format(tok);
  ASSERT_TRUE(format.ok()) << format.status();
  EXPECT_EQ(format->family(), c.family) << format->name();
  EXPECT_EQ(format->end_of_turn(), c.end_of_turn);
  absl::StatusOr<std::string> rendered = format->render(conversation, add_generation_prompt);
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  EXPECT_EQ(*rendered, chat["rendered"].get<std::string>());

  const SftEncoder enc = encoder(c.kind);
  absl::StatusOr<SftExample> ex = enc.encode_conversation(conversation, add_generation_prompt);
  ASSERT_TRUE(ex.ok()) << ex.status();
  EXPECT_EQ(ex->ids, chat["ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(ex->ids, tok.encode(*rendered, false)) << "segment by segment = the whole text at once";
  EXPECT_EQ(trained_spans(tok, *ex), std::vector<std::string>{c.reply});
  EXPECT_EQ(ex->merged_boundaries, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Families, ChatGoldenTest,
    ::testing::Values(GoldenCase{"llama3", ChatFamily::kLlama3, "<|eot_id|>", "2+2 = 4.<|eot_id|>"},
                      GoldenCase{"qwen2", ChatFamily::kChatML, "<|im_end|>", "2+2 = 4.<|im_end|>"},
                      GoldenCase{"smollm", ChatFamily::kChatML, "<|im_end|>", "2+2 = 4.<|im_end|>"},
                      GoldenCase{"gemma", ChatFamily::kGemma, "<end_of_turn>", "2+2 = 4.<end_of_turn>"},
                      // the decoder's Strip drops the "▁" that begins " 2+2 = 4. </s>"
                      GoldenCase{"llama2", ChatFamily::kLlama2, "</s>", "2+2 = 4. </s>"},
                      GoldenCase{"mistral", ChatFamily::kMistral, "</s>", "2+2 = 4.</s>"}),
    [](const auto& info) { return std::string(info.param.kind); });

// --- Labels against transformers' assistant mask -----------------------------

const std::map<std::string, std::string>& conversations() {
  static const std::map<std::string, std::string> c = {
      {"system", R"([{"role":"system","content":"  Be brief.\n"},{"role":"user","content":" Hi \n"},
                    {"role":"assistant","content":"\nHello there! "},{"role":"user","content":"Bye"},
                    {"role":"assistant","content":"Bye."}])"},
      {"two_turns", R"([{"role":"user","content":" Hi \n"},{"role":"assistant","content":"\nHello there! "},
                       {"role":"user","content":"Bye"},{"role":"assistant","content":"Bye."}])"},
      {"leading_newlines", R"([{"role":"user","content":"Q"},{"role":"assistant","content":"\n\nA\u00a0 "}])"},
      {"empty", R"([{"role":"user","content":""},{"role":"assistant","content":""}])"},
  };
  return c;
}

struct OracleCase {
  const char* kind;
  const char* conversation;
  const char* rendered;  // apply_chat_template(tokenize=False)
  const char* mask;      // assistant_masks, one digit per token
};

// Made by rendering each conversation with transformers (see the top of the file).
const OracleCase kOracle[] = {
    {"llama3", "system", "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello there!<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nBye.<|eot_id|>", "00000000000000000000000000000000111111100000000000000000011111"},
    {"llama3", "two_turns", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello there!<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nBye.<|eot_id|>", "000000000000000000111111100000000000000000011111"},
    {"llama3", "leading_newlines", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nQ<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nA<|eot_id|>", "0000000000000000011"},
    {"llama3", "empty", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n<|eot_id|>", "00000000000000001"},
    {"qwen2", "system", "<|im_start|>system\n  Be brief.\n<|im_end|>\n<|im_start|>user\n Hi \n<|im_end|>\n<|im_start|>assistant\n\nHello there! <|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\nBye.<|im_end|>\n", "00000000000000000000000000000000111111111000000000000000000111110"},
    {"qwen2", "two_turns", "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n Hi \n<|im_end|>\n<|im_start|>assistant\n\nHello there! <|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\nBye.<|im_end|>\n", "00000000000000000000000000000000000000111111111000000000000000000111110"},
    {"qwen2", "leading_newlines", "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n\n\nA\xc2\xa0 <|im_end|>\n", "0000000000000000000000000000000000011111110"},
    {"qwen2", "empty", "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n", "0000000000000000000000000000000000010"},
    {"smollm", "system", "<|im_start|>system\n  Be brief.\n<|im_end|>\n<|im_start|>user\n Hi \n<|im_end|>\n<|im_start|>assistant\n\nHello there! <|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\nBye.<|im_end|>\n", "000000000000000000000000000000000111111111000000000000000000111110"},
    {"smollm", "two_turns", "<|im_start|>user\n Hi \n<|im_end|>\n<|im_start|>assistant\n\nHello there! <|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\nBye.<|im_end|>\n", "000000000000000000111111111000000000000000000111110"},
    {"smollm", "leading_newlines", "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n\n\nA\xc2\xa0 <|im_end|>\n", "0000000000000011111110"},
    {"smollm", "empty", "<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n", "0000000000000010"},
    {"gemma", "two_turns", "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello there!<end_of_turn>\n<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\nBye.<end_of_turn>\n", "00000000000011111110000000000000111110"},
    {"gemma", "leading_newlines", "<bos><start_of_turn>user\nQ<end_of_turn>\n<start_of_turn>model\nA<end_of_turn>\n", "00000000000110"},
    {"gemma", "empty", "<bos><start_of_turn>user\n<end_of_turn>\n<start_of_turn>model\n<end_of_turn>\n", "000000000010"},
    {"llama2", "system", "<s>[INST] <<SYS>>\n  Be brief.\n\n<</SYS>>\n\n Hi [/INST] Hello there! </s><s>[INST] Bye [/INST] Bye. </s>", "00000000000000000000000000000000000000000001111111100000000000000000111111"},
    {"llama2", "two_turns", "<s>[INST] Hi [/INST] Hello there! </s><s>[INST] Bye [/INST] Bye. </s>", "00000000000000001111111100000000000000000111111"},
    {"llama2", "leading_newlines", "<s>[INST] Q [/INST] A </s>", "0000000000000000111"},
    {"llama2", "empty", "<s>[INST]  [/INST]  </s>", "00000000000000011"},
    {"mistral", "two_turns", "<s>[INST]  Hi \n [/INST]\nHello there! </s>[INST] Bye [/INST]Bye.</s>", "0000000000000000000111111111000000000000000011111"},
    {"mistral", "leading_newlines", "<s>[INST] Q [/INST]\n\nA\xc2\xa0 </s>", "00000000000000001111111"},
    {"mistral", "empty", "<s>[INST]  [/INST]</s>", "0000000000000001"},
};

TEST(SftExamplesTest, LabelsEqualTransformersAssistantMask) {
  for (const OracleCase& c : kOracle) {
    SCOPED_TRACE(std::string(c.kind) + " " + c.conversation);
    const Tokenizer& tok = tokenizer(c.kind);
    const std::vector<ChatMessage> conversation = messages(conversations().at(c.conversation));
    absl::StatusOr<ChatFormat> format = detect_chat_format(tok);
    ASSERT_TRUE(format.ok()) << format.status();
    absl::StatusOr<std::string> rendered = format->render(conversation, false);
    ASSERT_TRUE(rendered.ok()) << rendered.status();
    EXPECT_EQ(*rendered, c.rendered);
    absl::StatusOr<SftExample> ex = encoder(c.kind).encode_conversation(conversation);
    ASSERT_TRUE(ex.ok()) << ex.status();
    EXPECT_EQ(ex->ids, tok.encode(c.rendered, false));
    EXPECT_EQ(mask_of(*ex), c.mask);
    EXPECT_EQ(ex->trained_tokens, static_cast<int64_t>(std::count(c.mask, c.mask + strlen(c.mask), '1')));
  }
}

// ChatML's "assistant\n" and a reply starting "\n\n" tokenize as one "\n\n\n"
// token on Qwen2's pre-tokenizer; it is trained (the oracle's mask above
// agrees) and counted. Llama-3 strips the reply, so nothing merges there.
TEST(SftExamplesTest, ATokenSpanningPromptAndReplyIsTrainedAndCounted) {
  const std::vector<ChatMessage> conversation = messages(conversations().at("leading_newlines"));
  absl::StatusOr<SftExample> qwen = encoder("qwen2").encode_conversation(conversation);
  ASSERT_TRUE(qwen.ok()) << qwen.status();
  EXPECT_EQ(qwen->merged_boundaries, 1);
  EXPECT_EQ(trained_spans(tokenizer("qwen2"), *qwen), std::vector<std::string>{"\n\n\nA\xc2\xa0 <|im_end|>"});
  absl::StatusOr<SftExample> llama = encoder("llama3").encode_conversation(conversation);
  ASSERT_TRUE(llama.ok()) << llama.status();
  EXPECT_EQ(llama->merged_boundaries, 0);
}

// --- Families and their variants ---------------------------------------------

TEST(ChatTemplateTest, TheTemplatesOwnDefaultSystemMessageIsWritten) {
  absl::StatusOr<ChatFormat> qwen = detect_chat_format(tokenizer("qwen2"));
  ASSERT_TRUE(qwen.ok()) << qwen.status();
  EXPECT_EQ(qwen->default_system(), "You are a helpful assistant.");
  absl::StatusOr<ChatFormat> smol = detect_chat_format(tokenizer("smollm"));
  ASSERT_TRUE(smol.ok()) << smol.status();
  EXPECT_EQ(smol->default_system(), "");
  // Qwen2.5's chat_template.jinja writes "\n" as an escape inside its string literals.
  const std::string qwen25 =
      "{%- if messages[0]['role'] == 'system' %}\n    {{- '<|im_start|>system\\n' + messages[0]['content'] + "
      "'<|im_end|>\\n' }}\n{%- else %}\n    {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You "
      "are a helpful assistant.<|im_end|>\\n' }}\n{%- endif %}\n{%- for message in messages %}{{- '<|im_start|>' + "
      "message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}{%- endfor %}";
  absl::StatusOr<ChatFormat> f = detect_chat_format(qwen25, tokenizer("qwen2").special(), "qwen2.5");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->default_system(), "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
}

// Jinja's trim is Python's str.strip(): Unicode white space and U+001C..U+001F
// go, a zero-width space (not white space) stays.
TEST(ChatTemplateTest, StripIsPythonsStrip) {
  absl::StatusOr<ChatFormat> f = detect_chat_format(tokenizer("llama3"));
  ASSERT_TRUE(f.ok()) << f.status();
  const std::vector<ChatMessage> conversation = {
      {ChatRole::kUser, "\xe3\x80\x80\x1c\t Hi\xe2\x80\x8b\xc2\xa0\n"}, {ChatRole::kAssistant, "ok"}};
  absl::StatusOr<std::string> text = f->render(conversation, false);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text,
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi\xe2\x80\x8b<|eot_id|><|start_header_id|>"
            "assistant<|end_header_id|>\n\nok<|eot_id|>");
}

// Gemma-3's template (written here from memory of the public one, text parts
// only) folds the system message into the first user turn; transformers
// renders it as below.
TEST(ChatTemplateTest, GemmaThreeFoldsTheSystemMessageIntoTheFirstTurn) {
  const std::string gemma3 =
      "{{ bos_token }}\n{%- if messages[0]['role'] == 'system' -%}\n    {%- if messages[0]['content'] is string -%}\n"
      "        {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}\n    {%- else -%}\n"
      "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}\n    {%- endif -%}\n"
      "    {%- set loop_messages = messages[1:] -%}\n{%- else -%}\n    {%- set first_user_prefix = \"\" -%}\n"
      "    {%- set loop_messages = messages -%}\n{%- endif -%}\n{%- for message in loop_messages -%}\n"
      "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
      "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
      "    {%- endif -%}\n    {%- if (message['role'] == 'assistant') -%}\n        {%- set role = \"model\" -%}\n"
      "    {%- else -%}\n        {%- set role = message['role'] -%}\n    {%- endif -%}\n"
      "    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else \"\") }}\n"
      "    {%- if message['content'] is string -%}\n        {{ message['content'] | trim }}\n    {%- endif -%}\n"
      "    {{ '<end_of_turn>\\n' }}\n{%- endfor -%}\n{%- if add_generation_prompt -%}\n"
      "    {{'<start_of_turn>model\\n'}}\n{%- endif -%}\n";
  absl::StatusOr<ChatFormat> f = detect_chat_format(gemma3, tokenizer("gemma").special(), "gemma3");
  ASSERT_TRUE(f.ok()) << f.status();
  absl::StatusOr<std::string> text = f->render(messages(conversations().at("system")), true);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text,
            "<bos><start_of_turn>user\n  Be brief.\n\n\nHi<end_of_turn>\n<start_of_turn>model\nHello "
            "there!<end_of_turn>\n<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\nBye.<end_of_turn>\n"
            "<start_of_turn>model\n");
}

TEST(ChatTemplateTest, ATokenizerWithoutChatTemplateIsRefused) {
  absl::StatusOr<ChatFormat> f = detect_chat_format(tokenizer("gpt2"));
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("has no chat template"), std::string::npos) << f.status();
  EXPECT_NE(f.status().message().find("gpt2"), std::string::npos) << f.status();
}

TEST(ChatTemplateTest, AnotherFamilysTemplateIsRefusedNamingTheSupportedOnes) {
  // Zephyr's template
  const std::string zephyr =
      "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + "
      "eos_token }}\n{% endif %}\n{% endfor %}";
  absl::StatusOr<ChatFormat> f = detect_chat_format(zephyr, SpecialTokens{}, "zephyr/tokenizer_config.json");
  ASSERT_FALSE(f.ok());
  const std::string message(f.status().message());
  for (const char* part : {"zephyr/tokenizer_config.json", "Llama-3", "Qwen2", "SmolLM", "Gemma", "Llama-2", "Mistral",
                           "{% for message in messages %}\\n{% if message['role'] == 'user' %}\\n{{ '<|user|>"}) {
    EXPECT_NE(message.find(part), std::string::npos) << part << " in: " << message;
  }
}

TEST(ChatTemplateTest, LaterVariantsThatRenderDifferentlyAreRefusedByName) {
  const SpecialTokens special = tokenizer("llama3").special();
  struct Variant {
    const char* what;
    const char* template_text;
  };
  for (const Variant& v : {
           Variant{"Llama-3.1",
                   "{{- bos_token }}{%- if not date_string is defined %}{%- set date_string = \"26 Jul 2024\" %}"
                   "{%- endif %}{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}{{- \"Cutting Knowledge "
                   "Date: December 2023\\n\" }}"},
           Variant{"<think>",
                   "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + "
                   "'<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' "
                   "}}{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' "
                   "}}{%- endif %}{%- endif %}"},
           Variant{"newer Mistral",
                   "{{- bos_token }}{%- for message in loop_messages %}{%- if message[\"role\"] == \"user\" %}{%- if "
                   "loop.last and system_message is defined %}{{- \"[INST] \" + system_message + \"\\n\\n\" + "
                   "message[\"content\"] + \"[/INST]\" }}{%- else %}{{- \"[INST] \" + message[\"content\"] + "
                   "\"[/INST]\" }}{%- endif %}{%- elif message[\"role\"] == \"assistant\" %}{{- \" \" + "
                   "message[\"content\"]|trim + eos_token}}{%- endif %}{%- endfor %}"}}) {
    absl::StatusOr<ChatFormat> f = detect_chat_format(v.template_text, special, "model");
    ASSERT_FALSE(f.ok()) << v.what;
    EXPECT_NE(f.status().message().find(v.what), std::string::npos) << f.status();
  }
}

// What the families' templates raise on, with the message index.
TEST(ChatTemplateTest, WhatTheTemplatesRefuseIsRefused) {
  struct Case {
    const char* kind;
    const char* conversation;
    const char* expected;
  };
  for (const Case& c : {
           Case{"gemma", R"([{"role":"system","content":"s"},{"role":"user","content":"u"},{"role":"assistant","content":"a"}])",
                "message 0 (system): the Gemma chat template has no system role"},
           Case{"mistral", R"([{"role":"system","content":"s"},{"role":"user","content":"u"},{"role":"assistant","content":"a"}])",
                "message 0 (system): the Mistral chat template takes only user and assistant"},
           Case{"llama2", R"([{"role":"user","content":"u"},{"role":"system","content":"s"},{"role":"assistant","content":"a"}])",
                "message 1 (system): the Llama-2 chat template takes a system message only as the first"},
           Case{"gemma", R"([{"role":"assistant","content":"a"},{"role":"user","content":"u"}])",
                "message 0 (assistant): the Gemma chat template needs the roles to alternate"},
           Case{"mistral", R"([{"role":"user","content":"u"},{"role":"user","content":"u"},{"role":"assistant","content":"a"}])",
                "message 1 (user): the Mistral chat template needs the roles to alternate"},
           Case{"llama2", R"([{"role":"system","content":"s"},{"role":"assistant","content":"a"}])",
                "message 1 (assistant): the Llama-2 chat template needs the roles to alternate"},
       }) {
    absl::StatusOr<SftExample> ex = encoder(c.kind).encode_conversation(messages(c.conversation));
    ASSERT_FALSE(ex.ok()) << c.kind << " " << c.conversation;
    EXPECT_NE(ex.status().message().find(c.expected), std::string::npos) << ex.status();
  }
}

// --- Prompt/completion --------------------------------------------------------

// TRL's prompt-completion rule: the ids of prompt + completion + eos with the
// post-processor's tokens (add_special_tokens=True), the prompt's masked.
TEST(SftExamplesTest, PromptCompletionTrainsTheCompletionAndEos) {
  struct Case {
    const char* kind;
    bool bos;  // the post-processor writes one
  };
  for (const Case& c : {Case{"llama3", true}, Case{"qwen2", false}, Case{"smollm", false}, Case{"gpt2", false},
                        Case{"llama2", true}, Case{"mistral", true}, Case{"gemma", true}}) {
    SCOPED_TRACE(c.kind);
    const Tokenizer& tok = tokenizer(c.kind);
    const std::string prompt = "Translate to French: good morning.\n", completion = "Bonjour.";
    absl::StatusOr<SftExample> ex =
        encoder(c.kind).encode(Json{{"prompt", prompt}, {"completion", completion}});
    ASSERT_TRUE(ex.ok()) << ex.status();
    const std::string eos = tok.special().eos_token;
    EXPECT_EQ(ex->ids, tok.encode(prompt + completion + eos, true));
    EXPECT_EQ(tok.special().bos_id && ex->ids.front() == *tok.special().bos_id, c.bos);
    const std::vector<int32_t> prompt_ids = tok.encode(prompt, true);
    ASSERT_EQ(ex->merged_boundaries, 0);
    EXPECT_EQ(mask_of(*ex), std::string(prompt_ids.size(), '0') + std::string(ex->ids.size() - prompt_ids.size(), '1'));
    EXPECT_EQ(ex->labels.back(), *tok.special().eos_id);
    const std::vector<int32_t> completion_ids(ex->ids.begin() + static_cast<std::ptrdiff_t>(prompt_ids.size()),
                                              ex->ids.end() - 1);
    EXPECT_EQ(tok.decode(completion_ids), completion);
  }
}

// libsentencepiece (a directory with only tokenizer.model) reads "</s>" in
// text as characters, so the eos goes in by id, as transformers' tokenizer
// would read it.
TEST(SftExamplesTest, ASentencePieceOnlyTokenizerGetsEosById) {
  const Tokenizer& tok = tokenizer("spm_only");
  absl::StatusOr<SftExample> ex = encoder("spm_only").encode_prompt_completion("Question? ", "Answer.");
  ASSERT_TRUE(ex.ok()) << ex.status();
  std::vector<int32_t> expected = tok.encode("Question? Answer.", true);
  expected.push_back(*tok.special().eos_id);
  EXPECT_EQ(ex->ids, expected);
  EXPECT_EQ(ex->labels.back(), *tok.special().eos_id);
  EXPECT_EQ(ex->labels.front(), kIgnoreLabel);
}

// "Q: " + "A": the byte-level pre-tokenizer makes " A" one token across the
// boundary; TRL would mask it with the prompt (and warn), this trains it.
TEST(SftExamplesTest, APromptEndingInASpaceSharesItsTokenWithTheCompletion) {
  const Tokenizer& tok = tokenizer("qwen2");
  absl::StatusOr<SftExample> ex = encoder("qwen2").encode_prompt_completion("Q: ", "A");
  ASSERT_TRUE(ex.ok()) << ex.status();
  EXPECT_EQ(ex->ids, tok.encode("Q: A<|im_end|>", true));
  EXPECT_EQ(ex->merged_boundaries, 1);
  EXPECT_EQ(trained_spans(tok, *ex), std::vector<std::string>{" A<|im_end|>"});
}

// A word split between prompt and reply is merged by BPE differently from the
// prompt alone ("The token" + "the end": " tokenthe" is cut Ġto|k|ent|he): the
// tokens wholly inside the prompt stay masked, only the one holding the
// boundary and those after are trained.
TEST(SftExamplesTest, AWordSplitBetweenPromptAndReplyTrainsOnlyFromTheTokenHoldingTheBoundary) {
  for (const char* kind : {"gpt2", "llama3", "llama2"}) {
    const Tokenizer& tok = tokenizer(kind);
    const std::string prompt = "The token", completion = "the end";
    absl::StatusOr<SftExample> ex = encoder(kind).encode_prompt_completion(prompt, completion);
    ASSERT_TRUE(ex.ok()) << ex.status();
    EXPECT_EQ(ex->merged_boundaries, 1) << kind;
    // Bytes the masked tokens stand for: all of them inside the prompt, and
    // the first trained token reaches past it.
    size_t masked_bytes = 0, first_trained = ex->ids.size();
    const size_t bos = tok.encode("", true).size();  // the post-processor's bos, not text
    for (size_t t = bos; t < ex->ids.size(); ++t) {
      if (ex->labels[t] != kIgnoreLabel) {
        first_trained = t;
        break;
      }
      masked_bytes += tok.token_text(ex->ids[t]).size();
    }
    ASSERT_LT(first_trained, ex->ids.size()) << kind;
    const size_t dummy_prefix = std::string(kind) == "llama2" ? 1 : 0;  // the normalizer's "▁"
    EXPECT_LT(masked_bytes, prompt.size() + dummy_prefix) << kind;
    EXPECT_GT(masked_bytes + tok.token_text(ex->ids[first_trained]).size(), prompt.size() + dummy_prefix) << kind;
  }
}

// Qwen2's NFC shortens "e + U+0301" to "é", so token bytes no longer map to
// the text: the token from which the ids differ is trained (" he" holds the
// reply's "ello"), never masked.
TEST(SftExamplesTest, AfterANormalizerShortensThePromptTheBoundaryTokenIsStillTrained) {
  const Tokenizer& tok = tokenizer("qwen2");
  absl::StatusOr<SftExample> ex = encoder("qwen2").encode_prompt_completion("e\u0301 h", "ello");
  ASSERT_TRUE(ex.ok()) << ex.status();
  EXPECT_EQ(ex->ids, tok.encode("e\u0301 hello<|im_end|>", true));
  ASSERT_GE(ex->ids.size(), 2u);
  EXPECT_EQ(tok.token_text(ex->ids[1]), " he");
  EXPECT_EQ(ex->labels[0], kIgnoreLabel);
  EXPECT_EQ(ex->labels[1], ex->ids[1]);
}

// A tokenizer.model reads "</s>" in text as pieces: a completion ending with
// it still ends with the eos id, trained.
TEST(SftExamplesTest, ACompletionEndingWithEosTextGetsTheEosIdFromATokenizerModel) {
  const Tokenizer& tok = tokenizer("spm_only");
  absl::StatusOr<SftExample> ex = encoder("spm_only").encode_prompt_completion("Hi", " there</s>");
  ASSERT_TRUE(ex.ok()) << ex.status();
  ASSERT_TRUE(tok.special().eos_id.has_value());
  ASSERT_FALSE(ex->ids.empty());
  EXPECT_EQ(ex->ids.back(), *tok.special().eos_id);
  EXPECT_EQ(ex->labels.back(), *tok.special().eos_id);
  EXPECT_EQ(std::count(ex->ids.begin(), ex->ids.end(), *tok.special().eos_id), 1);
}

TEST(SftExamplesTest, ACompletionEndingWithEosGetsNoSecond) {
  const Tokenizer& tok = tokenizer("llama3");
  absl::StatusOr<SftExample> ex = encoder("llama3").encode_prompt_completion("Q", "A<|eot_id|>");
  ASSERT_TRUE(ex.ok()) << ex.status();
  EXPECT_EQ(ex->ids, tok.encode("QA<|eot_id|>", true));
  EXPECT_EQ(trained_spans(tok, *ex), std::vector<std::string>{"A<|eot_id|>"});
}

// --- Examples a user gets wrong -------------------------------------------------

TEST(SftExamplesTest, BadExamplesAreRefusedSayingWhy) {
  const SftEncoder enc = encoder("llama3");
  struct Case {
    const char* json;
    const char* expected;
  };
  for (const Case& c : {
           Case{R"({"messages": [{"role": "tool", "content": "x"}]})", "message 0 has role \"tool\""},
           Case{R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": null}]})",
                "message 1 (assistant) has a content that is null, not a string"},
           Case{R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "q"}]}]})",
                "message 0 (user) has a content that is array"},
           Case{R"({"messages": [{"role": "user"}]})", "message 0 (user) has no \"content\""},
           Case{R"({"messages": [{"content": "q"}]})", "message 0 has no \"role\""},
           Case{R"({"messages": ["hi"]})", "message 0 is string"},
           Case{R"({"messages": []})", "\"messages\" is an empty list"},
           Case{R"({"messages": {"role": "user"}})", "\"messages\" is object"},
           Case{R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]})",
                "no assistant message"},
           Case{R"({"messages": [{"role": "assistant", "content": "", "tool_calls": [{"name": "f"}]}]})", "tool_calls"},
           Case{R"({"messages": [], "prompt": "p", "completion": "c"})", "both \"messages\" and"},
           Case{R"({"prompt": "p"})", "has \"prompt\" but no \"completion\""},
           Case{R"({"prompt": "p", "completion": 3})", "\"completion\" is number, not a string"},
           Case{R"({"prompt": [{"role": "user", "content": "q"}], "completion": "c"})", "conversational prompt/completion"},
           Case{R"({"text": "t"})", "needs \"messages\", or \"prompt\" and \"completion\"; this one has \"text\""},
           Case{R"(["p", "c"])", "the example is array"},
       }) {
    absl::StatusOr<SftExample> ex = enc.encode(Json::parse(c.json));
    ASSERT_FALSE(ex.ok()) << c.json;
    EXPECT_NE(ex.status().message().find(c.expected), std::string::npos) << c.json << " -> " << ex.status();
  }
}

// GPT-2's directory has no chat template: prompt/completion works, a
// conversation is refused with the reason.
TEST(SftExamplesTest, ConversationsNeedAChatTemplate) {
  absl::StatusOr<SftEncoder> enc = SftEncoder::create(tokenizer("gpt2"));
  ASSERT_TRUE(enc.ok()) << enc.status();
  EXPECT_EQ(enc->chat_format(), nullptr);
  EXPECT_TRUE(enc->encode(Json{{"prompt", "a"}, {"completion", "b"}}).ok());
  absl::StatusOr<SftExample> ex =
      enc->encode(Json::parse(R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})"));
  ASSERT_FALSE(ex.ok());
  EXPECT_NE(ex.status().message().find("has no chat template"), std::string::npos) << ex.status();
}

}  // namespace
}  // namespace zero
