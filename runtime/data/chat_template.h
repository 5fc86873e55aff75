// Chat templates without a Jinja engine. Hugging Face tokenizers carry their
// chat format as a Jinja template (tokenizer_config.json's chat_template, or
// chat_template.jinja); no C++ Jinja library fits this build, so instead the
// template's family is recognized by its markers and rendered by code that
// writes what that family's template writes, character for character:
//
//   Llama-3   <|start_header_id|>  bos, then per message
//             <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT.strip()<|eot_id|>
//   ChatML    <|im_start|>         <|im_start|>ROLE\nCONTENT<|im_end|>\n, after the
//             (Qwen2, SmolLM)      template's default system message when it has one
//   Gemma     <start_of_turn>      bos, <start_of_turn>user|model\nCONTENT.strip()<end_of_turn>\n;
//                                  no system role (refused, or folded into the first
//                                  user turn where the template does so: Gemma-3)
//   Llama-2   [INST] + <<SYS>>     <s>[INST] USER.strip() [/INST] ASSISTANT.strip() </s>,
//                                  system folded into the first user turn in <<SYS>>
//   Mistral   [INST]               <s>[INST] USER [/INST]ASSISTANT</s>; no system role
//
// Any other template is refused by name, and so are the variants of these
// families whose output differs in ways not written here (Llama-3.1's dated
// system header, Qwen3's <think>, newer Mistral templates with a system
// message on the last user turn). "strip" is Python's str.strip(), as Jinja's
// trim filter. The output is a list of segments, so that supervised
// fine-tuning (sft_examples.h) can train on exactly the assistant's replies.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "runtime/config/json_file.h"
#include "runtime/data/tokenizer.h"

namespace zero {

enum class ChatRole { kSystem, kUser, kAssistant };

// "system", "user", "assistant".
std::string_view chat_role_name(ChatRole role);

struct ChatMessage {
  ChatRole role;
  std::string content;
};

// Reads [{"role": "user", "content": "..."}, ...]. Errors name the message
// (by index) and the problem: not an object, a role other than
// system/user/assistant, a content that is not a string (null, a list of
// parts), tool calls; an empty list is an error too.
absl::StatusOr<std::vector<ChatMessage>> parse_chat_messages(const Json& messages);

// A piece of rendered text. Concatenating the texts gives the rendering.
struct ChatSegment {
  std::string text;
  bool trained = false;       // an assistant reply, or the token that closes it: what SFT learns
  bool single_token = false;  // markup that is one token of the tokenizer (bos, eos, <|im_start|>, ...)
};

enum class ChatFamily { kLlama3, kChatML, kGemma, kLlama2, kMistral };

class ChatFormat {
 public:
  ChatFamily family() const { return family_; }
  // "Llama-3", "ChatML (Qwen2, SmolLM)", "Gemma", "Llama-2", "Mistral".
  std::string_view name() const;
  // The token that ends an assistant turn: <|eot_id|>, <|im_end|>, <end_of_turn>, or eos (</s>).
  const std::string& end_of_turn() const { return end_of_turn_; }
  // Every text this format writes as a single_token segment.
  std::vector<std::string> single_tokens() const;
  // ChatML: the system message written when the conversation has none ("" when the template has none).
  const std::string& default_system() const { return default_system_; }

  // The conversation as the template renders it, in segments. The assistant
  // segments marked trained are everything the model writes after the
  // generation prompt, up to and including the end-of-turn token (Llama-2:
  // " REPLY </s>"); the markup after that (ChatML's and Gemma's "\n") is not.
  // Errors: an empty list, and what the family's template refuses (roles out
  // of alternation, a system message it cannot place), with the message index.
  absl::StatusOr<std::vector<ChatSegment>> render_segments(absl::Span<const ChatMessage> messages,
                                                           bool add_generation_prompt) const;
  absl::StatusOr<std::string> render(absl::Span<const ChatMessage> messages, bool add_generation_prompt) const;

 private:
  friend absl::StatusOr<ChatFormat> detect_chat_format(std::string_view, const SpecialTokens&, std::string_view);
  ChatFamily family_ = ChatFamily::kChatML;
  bool writes_bos_ = false;      // the template writes bos_token
  bool strips_content_ = false;  // Llama-3, Gemma: the template trims each message
  bool folds_system_ = false;    // Gemma-3: the system message prefixes the first user turn
  std::string bos_token_, eos_token_, end_of_turn_, default_system_;
};

// The chat format of a tokenizer's template. Refuses a tokenizer without a
// chat template, and a template of any other family, naming the families
// supported and quoting the template's beginning.
absl::StatusOr<ChatFormat> detect_chat_format(const Tokenizer& tokenizer);
// The same from the template text; `source` names it in errors.
absl::StatusOr<ChatFormat> detect_chat_format(std::string_view chat_template, const SpecialTokens& special,
                                              std::string_view source);

}  // namespace zero
