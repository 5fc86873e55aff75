// SFT examples (sft_examples.h). The text is encoded run by run, a run being
// the text between two single-token segments (bos, <|im_start|>, eos ...):
// the tokenizer cuts its added tokens out of the text before anything else,
// so runs tokenize independently, given the context a run has in the whole
// text. That context is the token before it (SentencePiece's "▁" prefix is
// written only at the start of the text, or after every added token, by
// normalizer) and the token after it (an added token with lstrip takes the
// white space before it), so each run is encoded between those two tokens'
// texts and they are dropped from the result.
#include "runtime/data/sft_examples.h"

#include <algorithm>

#include "core/status.h"

namespace zero {

namespace {

size_t common_prefix(absl::Span<const int32_t> a, absl::Span<const int32_t> b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

void push(SftExample* out, int32_t id, bool trained) {
  out->ids.push_back(id);
  out->labels.push_back(trained ? id : kIgnoreLabel);
  out->trained_tokens += trained ? 1 : 0;
}

}  // namespace

absl::StatusOr<SftEncoder> SftEncoder::create(const Tokenizer& tokenizer) {
  SftEncoder e(tokenizer);
  auto known = [&](const std::string& text) -> std::optional<KnownToken> {
    const std::optional<int32_t> id = tokenizer.token_to_id(text);
    if (!id) return std::nullopt;
    return KnownToken{text, *id, tokenizer.encode(text, false) == std::vector<int32_t>{*id}};
  };
  absl::StatusOr<ChatFormat> chat = detect_chat_format(tokenizer);
  if (chat.ok()) {
    for (const std::string& text : chat->single_tokens()) {
      std::optional<KnownToken> k = known(text);
      if (!k) {
        chat = absl::FailedPreconditionError(cat(tokenizer.source(), ": the ", chat->name(), " chat template writes ",
                                                 text, ", which is not a token of this tokenizer (",
                                                 tokenizer.describe(), "): the template and tokenizer.json do not "
                                                 "belong together"));
        break;
      }
      e.known_tokens_.push_back(*k);
    }
  }
  if (chat.ok()) e.chat_ = *std::move(chat);
  else e.chat_status_ = chat.status();
  if (const std::string& eos = tokenizer.special().eos_token; !eos.empty()) {
    e.eos_ = known(eos);
    if (e.eos_) e.known_tokens_.push_back(*e.eos_);
  }
  // What the post-processor writes around any text (Llama's bos): the ids of
  // "a" with and without it.
  const std::vector<int32_t> bare = tokenizer.encode("a", false), full = tokenizer.encode("a", true);
  const auto at = std::search(full.begin(), full.end(), bare.begin(), bare.end());
  if (bare.empty() || at == full.end()) {
    return absl::InternalError(cat(tokenizer.source(), ": the post-processor changes the ids of the text itself; "
                                                       "SFT examples cannot be encoded with it"));
  }
  e.post_prefix_.assign(full.begin(), at);
  e.post_suffix_.assign(at + static_cast<std::ptrdiff_t>(bare.size()), full.end());
  return e;
}

const SftEncoder::KnownToken* SftEncoder::known_token(std::string_view text) const {
  for (const KnownToken& k : known_tokens_) {
    if (k.text == text) return &k;
  }
  return nullptr;
}

absl::Status SftEncoder::encode_segments(absl::Span<const ChatSegment> segments, SftExample* out) const {
  const KnownToken* left = nullptr;  // the token before the current run; null at the start of the text
  size_t i = 0;
  while (i < segments.size()) {
    if (segments[i].single_token) {
      left = known_token(segments[i].text);
      if (!left) return absl::InternalError(cat("no id for the chat markup ", segments[i].text));
      push(out, left->id, segments[i].trained);
      ++i;
      continue;
    }
    size_t j = i;
    while (j < segments.size() && !segments[j].single_token) ++j;
    const KnownToken* right = j < segments.size() ? known_token(segments[j].text) : nullptr;

    // The run between its neighbours' texts, and where it flips between masked and trained.
    const bool use_left = left && left->read_in_text, use_right = right && right->read_in_text;
    std::string text = use_left ? left->text : "";
    std::vector<size_t> flips;  // character offsets in `text`
    std::vector<bool> trained;  // of the part starting at each flip, and before the first
    trained.push_back(segments[i].trained);
    for (size_t k = i; k < j; ++k) {
      if (k > i && segments[k].trained != trained.back()) {
        flips.push_back(text.size());
        trained.push_back(segments[k].trained);
      }
      text += segments[k].text;
    }
    if (use_right) text += right->text;
    const std::vector<int32_t> ids = tokenizer_->encode(text, false);
    size_t begin = 0, end = ids.size();
    if (use_left) {
      if (ids.empty() || ids.front() != left->id) {
        return absl::InternalError(cat("the tokenizer does not read ", left->text, " as one token before \"",
                                       segments[i].text, "\""));
      }
      begin = 1;
    }
    if (use_right) {
      if (end <= begin || ids[end - 1] != right->id) {
        return absl::InternalError(cat("the tokenizer does not read ", right->text, " as one token after \"",
                                       segments[j - 1].text, "\""));
      }
      --end;
    }
    // Token index of each flip: where the ids of the text up to it are a
    // prefix of the run's ids, right after them. Otherwise BPE merged across
    // the flip (a word split between prompt and reply) and may have cut the
    // whole word differently, so the tokens are placed by the bytes they
    // stand for: those wholly before the flip take the part before it, the
    // token spanning it is trained (it holds reply text), the rest the part
    // after. A dummy "▁" the normalizer put at the start shows as surplus bytes.
    std::vector<size_t> starts;  // byte offset in `text` of each token in [begin, end], then its end
    const size_t lead = use_left ? left->text.size() : 0;
    const size_t body = text.size() - lead - (use_right ? right->text.size() : 0);
    size_t covered = 0;
    for (size_t t = begin; t < end; ++t) covered += tokenizer_->token_text(ids[t]).size();
    const size_t surplus = covered >= body ? covered - body : 0;
    // A normalizer that shortened the text (NFC composing e + U+0301) leaves
    // no byte map back to it: there the tokens from the first one that
    // differs are trained, which may train a prompt token, never mask a reply's.
    const bool bytes_map = covered >= body;
    std::vector<size_t> cuts;
    for (size_t f = 0; f < flips.size(); ++f) {
      const std::vector<int32_t> head = tokenizer_->encode(std::string_view(text).substr(0, flips[f]), false);
      const size_t same = common_prefix(head, ids);
      size_t cut = same;
      if (same < head.size() && !bytes_map) {
        ++out->merged_boundaries;
        if (trained[f]) ++cut;
      } else if (same < head.size()) {
        ++out->merged_boundaries;
        if (starts.empty()) {
          size_t at = lead;
          for (size_t t = begin; t < end; ++t) {
            starts.push_back(at);
            at += tokenizer_->token_text(ids[t]).size();
          }
          starts.push_back(at);
          for (size_t& s : starts) s = s >= lead + surplus ? s - surplus : lead;
        }
        // The first token that ends after the flip: it spans the flip or starts at it.
        size_t t = 0;
        while (t + 1 < starts.size() && starts[t + 1] <= flips[f]) ++t;
        cut = begin + t;
        const bool spans = t + 1 < starts.size() && starts[t] < flips[f];
        if (spans && trained[f]) ++cut;  // a reply's last character shares the token: train it
      }
      cut = std::clamp(cut, begin, end);
      if (!cuts.empty()) cut = std::max(cut, cuts.back());
      cuts.push_back(cut);
    }
    size_t part = 0;
    for (size_t t = begin; t < end; ++t) {
      while (part < cuts.size() && t >= cuts[part]) ++part;
      push(out, ids[t], trained[part]);
    }
    i = j;
  }
  return absl::OkStatus();
}

absl::StatusOr<SftExample> SftEncoder::encode_prompt_completion(std::string_view prompt,
                                                                std::string_view completion) const {
  if (!eos_) {
    return absl::FailedPreconditionError(cat(tokenizer_->source(),
                                             ": the tokenizer names no eos_token, which a completion needs to end "
                                             "with (set eos_token in tokenizer_config.json)"));
  }
  std::vector<ChatSegment> segments;
  if (!prompt.empty()) segments.push_back({std::string(prompt), false, false});
  if (!completion.empty()) segments.push_back({std::string(completion), true, false});
  const bool ends_with_eos = completion.size() >= eos_->text.size() &&
                             completion.substr(completion.size() - eos_->text.size()) == eos_->text;
  if (ends_with_eos && !eos_->read_in_text) {
    // A tokenizer.model reads "</s>" in text as plain pieces: the eos goes in by id instead.
    segments.back().text.resize(segments.back().text.size() - eos_->text.size());
    if (segments.back().text.empty()) segments.pop_back();
  }
  if (!ends_with_eos || !eos_->read_in_text) segments.push_back({eos_->text, true, true});
  SftExample out;
  for (int32_t id : post_prefix_) push(&out, id, false);
  ZE_RETURN_IF_ERROR(encode_segments(segments, &out));
  for (int32_t id : post_suffix_) push(&out, id, false);
  return out;
}

absl::StatusOr<SftExample> SftEncoder::encode_conversation(absl::Span<const ChatMessage> messages,
                                                           bool add_generation_prompt) const {
  if (!chat_) return chat_status_;
  if (messages.empty()) return absl::InvalidArgumentError("the conversation has no messages");
  const auto is_reply = [](const ChatMessage& m) { return m.role == ChatRole::kAssistant; };
  if (!add_generation_prompt && std::none_of(messages.begin(), messages.end(), is_reply)) {
    return absl::InvalidArgumentError(
        "the conversation has no assistant message: there is nothing to train on (the loss is on the replies only)");
  }
  ZE_ASSIGN_OR_RETURN(std::vector<ChatSegment> segments, chat_->render_segments(messages, add_generation_prompt));
  SftExample out;
  ZE_RETURN_IF_ERROR(encode_segments(segments, &out));
  return out;
}

absl::StatusOr<SftExample> SftEncoder::encode(const Json& example) const {
  if (!example.is_object()) {
    return absl::InvalidArgumentError(cat("the example is ", example.type_name(), ", not a JSON object"));
  }
  const bool has_messages = example.contains("messages");
  const bool has_prompt = example.contains("prompt"), has_completion = example.contains("completion");
  if (has_messages && (has_prompt || has_completion)) {
    return absl::InvalidArgumentError(
        "the example has both \"messages\" and \"prompt\"/\"completion\"; give one of the two");
  }
  if (has_messages) {
    absl::StatusOr<std::vector<ChatMessage>> messages = parse_chat_messages(example["messages"]);
    if (!messages.ok()) return messages.status();
    return encode_conversation(*messages);
  }
  if (has_prompt || has_completion) {
    for (const char* key : {"prompt", "completion"}) {
      if (!example.contains(key)) {
        return absl::InvalidArgumentError(cat("the example has \"", has_prompt ? "prompt" : "completion",
                                              "\" but no \"", key, "\""));
      }
      const Json& v = example[key];
      if (v.is_array()) {
        return absl::InvalidArgumentError(cat("\"", key, "\" is a list of messages; conversational prompt/completion "
                                              "is not supported: write the conversation as one \"messages\" list"));
      }
      if (!v.is_string()) {
        return absl::InvalidArgumentError(cat("\"", key, "\" is ", v.type_name(), ", not a string"));
      }
    }
    return encode_prompt_completion(example["prompt"].get_ref<const std::string&>(),
                                    example["completion"].get_ref<const std::string&>());
  }
  std::string keys;
  for (auto it = example.begin(); it != example.end(); ++it) {
    keys += cat(keys.empty() ? "" : ", ", "\"", it.key(), "\"");
  }
  return absl::InvalidArgumentError(cat("an SFT example needs \"messages\", or \"prompt\" and \"completion\"; ",
                                        "this one has ", keys.empty() ? std::string("no keys") : keys));
}

}  // namespace zero
