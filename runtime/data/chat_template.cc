// The chat families of chat_template.h: recognizing a template, and writing
// what it writes. Each family's case in render_segments follows its Jinja
// template statement by statement; the template text is quoted at its top.
#include "runtime/data/chat_template.h"

#include <algorithm>
#include <initializer_list>

#include "core/status.h"
#include "runtime/data/unicode_text.h"

namespace zero {

namespace {

constexpr std::string_view kSupported =
    "supported are Llama-3 (<|start_header_id|>), ChatML as in Qwen2 and SmolLM (<|im_start|>), Gemma "
    "(<start_of_turn>), Llama-2 and Mistral ([INST])";

bool contains(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

bool contains_any(std::string_view text, std::initializer_list<std::string_view> parts) {
  return std::any_of(parts.begin(), parts.end(), [&](std::string_view p) { return contains(text, p); });
}

// Python's str.isspace(), which str.strip() and Jinja's trim strip: Unicode
// White_Space plus the ASCII separators U+001C..U+001F.
bool is_python_space(char32_t cp) {
  return (cp >= 0x1C && cp <= 0x1F) || unicode::is_whitespace(cp);
}

// Python's str.strip(): the text without leading and trailing white space.
std::string python_strip(std::string_view s) {
  size_t begin = 0;
  while (begin < s.size()) {
    const int n = unicode::valid_sequence_length(s, begin);
    int len = 0;
    if (n == 0 || !is_python_space(unicode::decode_at(s, begin, &len))) break;
    begin += n;
  }
  size_t end = s.size();
  while (end > begin) {
    size_t start = end - 1;  // back over continuation bytes to the lead byte
    while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80 && end - start < 4) --start;
    const int n = unicode::valid_sequence_length(s, start);
    int len = 0;
    if (n == 0 || start + n != end || !is_python_space(unicode::decode_at(s, start, &len))) break;
    end = start;
  }
  return std::string(s.substr(begin, end - begin));
}

// The string literals inside the template's {{ }} and {% %} tags, with
// Jinja's (Python's) escapes \n \t \r \\ \' \" decoded.
std::vector<std::string> template_string_literals(std::string_view t) {
  std::vector<std::string> literals;
  size_t i = 0;
  while (i + 1 < t.size()) {
    if (t[i] != '{' || (t[i + 1] != '{' && t[i + 1] != '%')) {
      ++i;
      continue;
    }
    const std::string_view close = t[i + 1] == '{' ? "}}" : "%}";
    i += 2;
    while (i < t.size() && t.substr(i, 2) != close) {
      const char quote = t[i++];
      if (quote != '\'' && quote != '"') continue;
      std::string literal;
      while (i < t.size() && t[i] != quote) {
        char c = t[i++];
        if (c == '\\' && i < t.size()) {
          const char e = t[i++];
          switch (e) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case '\\': case '\'': case '"': c = e; break;
            default: literal += '\\'; c = e;
          }
        }
        literal += c;
      }
      ++i;  // the closing quote
      literals.push_back(std::move(literal));
    }
    i += 2;
  }
  return literals;
}

// The template's first ~80 characters, on one line, for an error message.
std::string template_excerpt(std::string_view t) {
  size_t n = std::min<size_t>(t.size(), 80);
  while (n < t.size() && n > 0 && (static_cast<unsigned char>(t[n]) & 0xC0) == 0x80) --n;  // whole code points
  std::string out = "\"";
  for (char c : t.substr(0, n)) {
    if (c == '\n') out += "\\n";
    else if (c == '"') out += "\\\"";
    else out += c;
  }
  out += n < t.size() ? "...\"" : "\"";
  return out;
}

// Builds the segment list; adjacent text with the same flag joins.
class SegmentWriter {
 public:
  void text(std::string_view s, bool trained = false) {
    if (s.empty()) return;
    if (!segments_.empty() && !segments_.back().single_token && segments_.back().trained == trained) {
      segments_.back().text += s;
    } else {
      segments_.push_back({std::string(s), trained, false});
    }
  }
  void token(std::string_view s, bool trained = false) { segments_.push_back({std::string(s), trained, true}); }
  std::vector<ChatSegment> take() { return std::move(segments_); }

 private:
  std::vector<ChatSegment> segments_;
};

absl::Status alternation_error(std::string_view family, size_t index, ChatRole role) {
  return absl::InvalidArgumentError(cat("message ", index, " (", chat_role_name(role), "): the ", family,
                                        " chat template needs the roles to alternate user/assistant/user/... "
                                        "starting with user (its template raises 'Conversation roles must "
                                        "alternate user/assistant/user/assistant/...')"));
}

}  // namespace

std::string_view chat_role_name(ChatRole role) {
  switch (role) {
    case ChatRole::kSystem: return "system";
    case ChatRole::kUser: return "user";
    case ChatRole::kAssistant: return "assistant";
  }
  return "?";
}

absl::StatusOr<std::vector<ChatMessage>> parse_chat_messages(const Json& messages) {
  if (!messages.is_array()) {
    return absl::InvalidArgumentError(cat("\"messages\" is ", messages.type_name(),
                                          ", not a list of {\"role\", \"content\"} objects"));
  }
  if (messages.empty()) {
    return absl::InvalidArgumentError("\"messages\" is an empty list: there is nothing to train on");
  }
  std::vector<ChatMessage> out;
  out.reserve(messages.size());
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    if (!m.is_object()) {
      return absl::InvalidArgumentError(
          cat("message ", i, " is ", m.type_name(), ", not a {\"role\", \"content\"} object"));
    }
    const auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      return absl::InvalidArgumentError(cat("message ", i, " has no \"role\" string"));
    }
    const std::string role_name = role->get<std::string>();
    ChatMessage msg;
    if (role_name == "system") msg.role = ChatRole::kSystem;
    else if (role_name == "user") msg.role = ChatRole::kUser;
    else if (role_name == "assistant") msg.role = ChatRole::kAssistant;
    else {
      return absl::InvalidArgumentError(cat("message ", i, " has role \"", role_name,
                                            "\"; the roles supported are system, user and assistant"));
    }
    if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
      return absl::InvalidArgumentError(
          cat("message ", i, " (", role_name, ") has tool_calls; tool calls are not supported"));
    }
    const auto content = m.find("content");
    if (content == m.end()) {
      return absl::InvalidArgumentError(cat("message ", i, " (", role_name, ") has no \"content\""));
    }
    if (!content->is_string()) {
      return absl::InvalidArgumentError(cat("message ", i, " (", role_name, ") has a content that is ",
                                            content->type_name(),
                                            ", not a string (lists of content parts are not supported)"));
    }
    msg.content = content->get<std::string>();
    out.push_back(std::move(msg));
  }
  return out;
}

std::string_view ChatFormat::name() const {
  switch (family_) {
    case ChatFamily::kLlama3: return "Llama-3";
    case ChatFamily::kChatML: return "ChatML (Qwen2, SmolLM)";
    case ChatFamily::kGemma: return "Gemma";
    case ChatFamily::kLlama2: return "Llama-2";
    case ChatFamily::kMistral: return "Mistral";
  }
  return "?";
}

std::vector<std::string> ChatFormat::single_tokens() const {
  std::vector<std::string> tokens;
  if (writes_bos_) tokens.push_back(bos_token_);
  switch (family_) {
    case ChatFamily::kLlama3:
      for (const char* t : {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}) tokens.push_back(t);
      break;
    case ChatFamily::kChatML:
      for (const char* t : {"<|im_start|>", "<|im_end|>"}) tokens.push_back(t);
      break;
    case ChatFamily::kGemma:
      for (const char* t : {"<start_of_turn>", "<end_of_turn>"}) tokens.push_back(t);
      break;
    case ChatFamily::kLlama2:
    case ChatFamily::kMistral:
      tokens.push_back(eos_token_);
      break;
  }
  return tokens;
}

absl::StatusOr<std::vector<ChatSegment>> ChatFormat::render_segments(absl::Span<const ChatMessage> messages,
                                                                     bool add_generation_prompt) const {
  if (messages.empty()) return absl::InvalidArgumentError("the conversation has no messages");
  SegmentWriter w;
  auto content_of = [&](const ChatMessage& m) { return strips_content_ ? python_strip(m.content) : m.content; };
  switch (family_) {
    case ChatFamily::kLlama3: {
      // {% for message in messages %}{% set content = '<|start_header_id|>' + message['role'] +
      // '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}
      // {% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}
      // {% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}
      for (size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        const bool reply = m.role == ChatRole::kAssistant;
        if (i == 0 && writes_bos_) w.token(bos_token_);
        w.token("<|start_header_id|>");
        w.text(chat_role_name(m.role));
        w.token("<|end_header_id|>");
        w.text("\n\n");
        w.text(content_of(m), reply);
        w.token("<|eot_id|>", reply);
      }
      if (add_generation_prompt) {
        w.token("<|start_header_id|>");
        w.text("assistant");
        w.token("<|end_header_id|>");
        w.text("\n\n");
      }
      break;
    }
    case ChatFamily::kChatML: {
      // {% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}
      // {{ '<|im_start|>system\nDEFAULT<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' +
      // message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}
      // {{ '<|im_start|>assistant\n' }}{% endif %}
      if (writes_bos_) w.token(bos_token_);
      for (size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        const bool reply = m.role == ChatRole::kAssistant;
        if (i == 0 && m.role != ChatRole::kSystem && !default_system_.empty()) {
          w.token("<|im_start|>");
          w.text(cat("system\n", default_system_));
          w.token("<|im_end|>");
          w.text("\n");
        }
        w.token("<|im_start|>");
        w.text(cat(chat_role_name(m.role), "\n"));
        w.text(content_of(m), reply);
        w.token("<|im_end|>", reply);
        w.text("\n");
      }
      if (add_generation_prompt) {
        w.token("<|im_start|>");
        w.text("assistant\n");
      }
      break;
    }
    case ChatFamily::kGemma: {
      // {{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not
      // supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') !=
      // (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate ...') }}{% endif %}
      // {% set role = 'model' if assistant else message['role'] %}{{ '<start_of_turn>' + role + '\n' +
      // message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}
      // {% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}
      // Gemma-3 instead prefixes the first turn with the system message + '\n\n' (first_user_prefix).
      std::string first_user_prefix;
      if (messages[0].role == ChatRole::kSystem) {
        if (!folds_system_) {
          return absl::InvalidArgumentError(
              "message 0 (system): the Gemma chat template has no system role (it raises 'System role not "
              "supported'); put the instructions in the first user message");
        }
        first_user_prefix = cat(messages[0].content, "\n\n");
        messages.remove_prefix(1);
      }
      const size_t offset = first_user_prefix.empty() ? 0 : 1;  // for message indices in errors
      if (writes_bos_) w.token(bos_token_);
      for (size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if ((m.role == ChatRole::kUser) != (i % 2 == 0)) {
          if (m.role == ChatRole::kSystem) {
            return absl::InvalidArgumentError(cat("message ", i + offset,
                                                  " (system): the Gemma chat template takes a system message only "
                                                  "as the first message, if at all"));
          }
          return alternation_error("Gemma", i + offset, m.role);
        }
        if (m.role == ChatRole::kSystem) {  // where alternation lets it through, the template writes a "system" turn
          return absl::InvalidArgumentError(cat("message ", i + offset,
                                                " (system): the Gemma chat template has no system role"));
        }
        const bool reply = m.role == ChatRole::kAssistant;
        w.token("<start_of_turn>");
        w.text(cat(reply ? "model" : "user", "\n", i == 0 ? first_user_prefix : ""));
        w.text(content_of(m), reply);
        w.token("<end_of_turn>", reply);
        w.text("\n");
      }
      if (add_generation_prompt) {
        w.token("<start_of_turn>");
        w.text("model\n");
      }
      break;
    }
    case ChatFamily::kLlama2: {
      // {% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message
      // = messages[0]['content'] %}{% else %}...{% endif %}{% for message in loop_messages %}(alternation)
      // {% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\n' + system_message +
      // '\n<</SYS>>\n\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}
      // {% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}
      // {% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}
      // {% endfor %}   (add_generation_prompt changes nothing: the prompt ends with [/INST])
      std::string system;
      bool has_system = false;
      if (messages[0].role == ChatRole::kSystem) {
        system = messages[0].content;
        has_system = true;
        messages.remove_prefix(1);
      }
      const size_t offset = has_system ? 1 : 0;
      for (size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == ChatRole::kSystem) {  // the template raises, or (at an odd index) drops it silently
          return absl::InvalidArgumentError(cat("message ", i + offset,
                                                " (system): the Llama-2 chat template takes a system message only "
                                                "as the first message"));
        }
        if ((m.role == ChatRole::kUser) != (i % 2 == 0)) return alternation_error("Llama-2", i + offset, m.role);
        const std::string content =
            i == 0 && has_system ? cat("<<SYS>>\n", system, "\n<</SYS>>\n\n", m.content) : m.content;
        if (m.role == ChatRole::kUser) {
          w.token(bos_token_);
          w.text(cat("[INST] ", python_strip(content), " [/INST]"));
        } else {
          w.text(cat(" ", python_strip(content), " "), true);
          w.token(eos_token_, true);
        }
      }
      break;
    }
    case ChatFamily::kMistral: {
      // {{ bos_token }}{% for message in messages %}(alternation){% if message['role'] == 'user' %}
      // {{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}
      // {{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are
      // supported!') }}{% endif %}{% endfor %}   (no generation prompt: the prompt ends with [/INST])
      if (writes_bos_) w.token(bos_token_);
      for (size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == ChatRole::kSystem) {
          return absl::InvalidArgumentError(cat("message ", i,
                                                " (system): the Mistral chat template takes only user and assistant "
                                                "messages; put the instructions in the first user message"));
        }
        if ((m.role == ChatRole::kUser) != (i % 2 == 0)) return alternation_error("Mistral", i, m.role);
        if (m.role == ChatRole::kUser) {
          w.text(cat("[INST] ", m.content, " [/INST]"));
        } else {
          w.text(m.content, true);
          w.token(eos_token_, true);
        }
      }
      break;
    }
  }
  return w.take();
}

absl::StatusOr<std::string> ChatFormat::render(absl::Span<const ChatMessage> messages,
                                               bool add_generation_prompt) const {
  ZE_ASSIGN_OR_RETURN(std::vector<ChatSegment> segments, render_segments(messages, add_generation_prompt));
  std::string text;
  for (const ChatSegment& s : segments) text += s.text;
  return text;
}

absl::StatusOr<ChatFormat> detect_chat_format(std::string_view t, const SpecialTokens& special,
                                              std::string_view source) {
  if (t.empty()) {
    return absl::NotFoundError(cat(source,
                                   ": the tokenizer has no chat template (no chat_template in tokenizer_config.json, "
                                   "no chat_template.jinja), so chat \"messages\" cannot be rendered; give "
                                   "prompt/completion examples, or a model directory whose tokenizer has one"));
  }
  struct Marker {
    std::string_view text;
    ChatFamily family;
  };
  const Marker markers[] = {{"<|start_header_id|>", ChatFamily::kLlama3},
                            {"<|im_start|>", ChatFamily::kChatML},
                            {"<start_of_turn>", ChatFamily::kGemma},
                            {"[INST]", ChatFamily::kLlama2}};
  std::vector<const Marker*> found;
  for (const Marker& m : markers) {
    if (contains(t, m.text)) found.push_back(&m);
  }
  if (found.size() != 1) {
    std::string why = found.empty() ? "is not one this build renders (it has no Jinja engine)"
                                     : cat("mixes the markers of two families (", found[0]->text, " and ",
                                           found[1]->text, ")");
    return absl::InvalidArgumentError(
        cat(source, ": the chat template ", why, "; ", kSupported, ". The template begins ", template_excerpt(t)));
  }
  ChatFormat f;
  f.family_ = found[0]->family;
  if (f.family_ == ChatFamily::kLlama2 && !contains(t, "<<SYS>>")) f.family_ = ChatFamily::kMistral;
  f.bos_token_ = special.bos_token;
  f.eos_token_ = special.eos_token;
  f.writes_bos_ = contains(t, "bos_token");
  const bool trims = contains_any(t, {"trim", ".strip("});
  auto refuse_variant = [&](std::string_view what) {
    return absl::InvalidArgumentError(cat(source, ": the chat template is ", what,
                                          ", which this build does not render; ", kSupported,
                                          " in their original templates. The template begins ", template_excerpt(t)));
  };

  switch (f.family_) {
    case ChatFamily::kLlama3:
      if (contains_any(t, {"Cutting Knowledge Date", "date_string", "strftime_now", "ipython"})) {
        return refuse_variant("a Llama-3.1-or-later template (a dated system header, tool calls)");
      }
      f.strips_content_ = trims;
      f.end_of_turn_ = "<|eot_id|>";
      break;
    case ChatFamily::kChatML: {
      if (contains(t, "<think>")) return refuse_variant("a ChatML template with <think> reasoning (Qwen3 and later)");
      if (trims) return refuse_variant("a ChatML template that trims the messages");
      bool names_system = false;
      for (const std::string& lit : template_string_literals(t)) {
        names_system |= lit == "system";
        constexpr std::string_view kHead = "<|im_start|>system\n";
        const size_t end = lit.find("<|im_end|>");
        if (f.default_system_.empty() && lit.rfind(kHead, 0) == 0 && end != std::string::npos) {
          f.default_system_ = lit.substr(kHead.size(), end - kHead.size());
        }
      }
      if (names_system && f.default_system_.empty()) {
        return refuse_variant("a ChatML template that treats the system message specially in a way not read here");
      }
      f.end_of_turn_ = "<|im_end|>";
      break;
    }
    case ChatFamily::kGemma:
      f.folds_system_ = contains(t, "first_user_prefix");
      f.strips_content_ = trims;
      f.end_of_turn_ = "<end_of_turn>";
      break;
    case ChatFamily::kLlama2:
      if (!f.writes_bos_) return refuse_variant("a Llama-2 template that does not write bos_token");
      f.end_of_turn_ = f.eos_token_;
      break;
    case ChatFamily::kMistral:
      if (contains_any(t, {"system_message", "AVAILABLE_TOOLS", "SYSTEM_PROMPT", "TOOL_CALLS"}) || trims ||
          !contains(t, " [/INST]")) {
        return refuse_variant(
            "a newer Mistral template (a system message, tool calls, [/INST] without a space, or trimmed "
            "replies), not Mistral-7B-Instruct-v0.1/v0.2's");
      }
      f.end_of_turn_ = f.eos_token_;
      break;
  }
  if (f.writes_bos_ && f.bos_token_.empty()) {
    return absl::InvalidArgumentError(cat(source, ": the ", f.name(),
                                          " chat template writes bos_token, but the tokenizer names no bos_token"));
  }
  if ((f.family_ == ChatFamily::kLlama2 || f.family_ == ChatFamily::kMistral) && f.eos_token_.empty()) {
    return absl::InvalidArgumentError(cat(source, ": the ", f.name(),
                                          " chat template ends each reply with eos_token, but the tokenizer names no "
                                          "eos_token"));
  }
  return f;
}

absl::StatusOr<ChatFormat> detect_chat_format(const Tokenizer& tokenizer) {
  return detect_chat_format(tokenizer.chat_template(), tokenizer.special(), tokenizer.source());
}

}  // namespace zero
