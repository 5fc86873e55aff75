// BPE encoding; see bpe_model.h.
#include "runtime/data/bpe_model.h"

#include <array>
#include <atomic>
#include <cstdio>
#include <queue>

#include "core/status.h"
#include "core/strings.h"
#include "runtime/data/unicode_text.h"

namespace zero {

char32_t byte_level_char(uint8_t b) {
  static const auto table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int i = 0; i < 256; ++i) {
      const bool printable = (i >= 33 && i <= 126) || (i >= 161 && i <= 172) || (i >= 174 && i <= 255);
      t[i] = printable ? static_cast<char32_t>(i) : next++;
    }
    return t;
  }();
  return table[b];
}

int byte_level_byte(char32_t cp) {
  static const auto inverse = [] {
    std::array<int16_t, 324> t;
    t.fill(-1);
    for (int b = 0; b < 256; ++b) t[byte_level_char(static_cast<uint8_t>(b))] = static_cast<int16_t>(b);
    return t;
  }();
  return cp < inverse.size() ? inverse[cp] : -1;
}

namespace {

constexpr size_t kCachedWordBytes = 64;     // longer words are rare and cheap to miss
constexpr size_t kCacheEntries = 1 << 18;   // per thread; cleared when full

struct WordCache {
  uint64_t owner = 0;
  absl::flat_hash_map<std::string, std::vector<int32_t>> words;
};

WordCache& thread_cache(uint64_t owner) {
  thread_local WordCache cache;
  if (cache.owner != owner || cache.words.size() >= kCacheEntries) {
    cache.words.clear();
    cache.owner = owner;
  }
  return cache;
}

std::atomic<uint64_t> next_instance{1};

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// The raw bytes a byte-level token spells, or nullopt when a character of it spells none.
std::optional<std::string> byte_level_bytes(std::string_view token) {
  std::string raw;
  for (size_t i = 0; i < token.size();) {
    int len = 0;
    const int b = byte_level_byte(unicode::decode_at(token, i, &len));
    if (b < 0) return std::nullopt;
    raw.push_back(static_cast<char>(b));
    i += len;
  }
  return raw;
}

}  // namespace

absl::StatusOr<BpeModel> BpeModel::from_json(const Json& model, const std::string& file, bool byte_level) {
  auto where = [&](std::string_view what) { return cat(file, ": model.", what); };
  for (const char* unsupported : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(unsupported) && !model[unsupported].is_null() &&
        !(model[unsupported].is_string() && model[unsupported].get<std::string>().empty())) {
      return absl::UnimplementedError(cat(where(unsupported), " is set (", model[unsupported].dump(),
                                          "): subword prefixes and suffixes (WordPiece-style BPE) are not supported"));
    }
  }
  if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"].get<double>() != 0.0) {
    return absl::UnimplementedError(cat(where("dropout"), " is ", model["dropout"].dump(),
                                        ": BPE dropout is a training-time augmentation; set it to null"));
  }
  if (!model.contains("vocab") || !model["vocab"].is_object()) {
    return absl::InvalidArgumentError(cat(where("vocab"), ": expected an object of token -> id"));
  }
  BpeModel m;
  m.byte_level_ = byte_level;
  m.byte_fallback_ = model.value("byte_fallback", false);
  m.fuse_unk_ = model.value("fuse_unk", false);
  m.ignore_merges_ = model.value("ignore_merges", false);
  m.instance_ = next_instance.fetch_add(1);

  const Json& vocab = model["vocab"];
  int64_t max_id = -1;
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (int64_t{1} << 31)) {
      return absl::InvalidArgumentError(cat(where("vocab"), "[\"", token, "\"] = ", id.dump(), ": expected an id >= 0"));
    }
    max_id = std::max(max_id, id.get<int64_t>());
  }
  m.tokens_.resize(max_id + 1);
  for (const auto& [token, id] : vocab.items()) {
    std::string& slot = m.tokens_[id.get<int64_t>()];
    if (!slot.empty()) {
      return absl::InvalidArgumentError(cat(where("vocab"), ": id ", id.get<int64_t>(), " is given to both \"", slot,
                                            "\" and \"", token, "\""));
    }
    slot = token;
  }
  m.vocab_.reserve(m.tokens_.size());
  for (size_t id = 0; id < m.tokens_.size(); ++id) {
    if (!m.tokens_[id].empty()) m.vocab_.emplace(std::string_view(m.tokens_[id]), static_cast<int32_t>(id));
  }

  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    const std::string unk = model["unk_token"].get<std::string>();
    const auto it = m.vocab_.find(unk);
    if (it == m.vocab_.end()) {
      return absl::InvalidArgumentError(cat(where("unk_token"), " \"", unk, "\" is not in the vocabulary"));
    }
    m.unk_id_ = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    const auto it = m.vocab_.find(std::string_view(name));
    m.fallback_ids_[b] = it == m.vocab_.end() ? -1 : it->second;
    std::string ch;
    unicode::append_utf8(byte_level_char(static_cast<uint8_t>(b)), &ch);
    const auto jt = m.vocab_.find(std::string_view(ch));
    m.byte_ids_[b] = jt == m.vocab_.end() ? -1 : jt->second;
  }
  if (byte_level && m.ignore_merges_) {
    for (size_t id = 0; id < m.tokens_.size(); ++id) {
      if (auto raw = byte_level_bytes(m.tokens_[id])) m.raw_vocab_.emplace(std::move(*raw), static_cast<int32_t>(id));
    }
  }

  const Json merges = model.value("merges", Json::array());
  if (!merges.is_array()) return absl::InvalidArgumentError(cat(where("merges"), ": expected an array"));
  m.merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const Json& entry = merges[rank];
    std::string left, right;
    if (entry.is_string()) {  // "a b", the older spelling
      const std::string s = entry.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        return absl::InvalidArgumentError(cat(where("merges"), "[", rank, "] = \"", s, "\": expected two tokens separated by one space"));
      }
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_string()) {
      left = entry[0].get<std::string>();
      right = entry[1].get<std::string>();
    } else {
      return absl::InvalidArgumentError(cat(where("merges"), "[", rank, "] = ", entry.dump(), ": expected \"a b\" or [\"a\", \"b\"]"));
    }
    const auto l = m.vocab_.find(left), r = m.vocab_.find(right), n = m.vocab_.find(left + right);
    if (l == m.vocab_.end() || r == m.vocab_.end() || n == m.vocab_.end()) {
      const std::string& missing = l == m.vocab_.end() ? left : r == m.vocab_.end() ? right : left + right;
      return absl::InvalidArgumentError(cat(where("merges"), "[", rank, "] (\"", left, "\", \"", right, "\"): \"", missing,
                                            "\" is not in the vocabulary"));
    }
    m.merges_.insert_or_assign(pair_key(l->second, r->second), Merge{static_cast<int32_t>(rank), n->second});
  }
  return m;
}

std::optional<BpeModel::Merge> BpeModel::merge_of(int32_t left, int32_t right) const {
  const auto it = merges_.find(pair_key(left, right));
  if (it == merges_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::initial_symbols(std::string_view word, std::vector<Symbol>* symbols) const {
  symbols->clear();
  auto add = [&](int32_t id) { symbols->push_back(Symbol{id, -1, -1, false}); };
  // A character the vocabulary lacks: its bytes' fallback tokens, else the
  // unknown token (fused with a preceding one when fuse_unk), else nothing.
  // As in `tokenizers`, a pending unknown is written only when a known
  // character (or the end) follows.
  int32_t pending_unk = -1;
  auto unknown = [&](std::string_view ch) {
    if (byte_fallback_) {
      bool all = true;
      for (unsigned char b : ch) all = all && fallback_ids_[b] >= 0;
      if (all) {
        for (unsigned char b : ch) add(fallback_ids_[b]);
        return;
      }
    }
    if (!unk_id_) return;
    if (pending_unk >= 0 && !fuse_unk_) add(pending_unk);
    pending_unk = *unk_id_;
  };
  auto known = [&](int32_t id) {
    if (pending_unk >= 0) add(pending_unk);
    pending_unk = -1;
    add(id);
  };
  if (byte_level_) {
    for (unsigned char b : word) {
      if (byte_ids_[b] >= 0) {
        known(byte_ids_[b]);
      } else {
        std::string ch;
        unicode::append_utf8(byte_level_char(b), &ch);
        unknown(ch);
      }
    }
  } else {
    for (size_t i = 0; i < word.size();) {
      const int len = unicode::utf8_length(static_cast<unsigned char>(word[i]));
      const std::string_view ch = word.substr(i, len);
      const auto it = vocab_.find(ch);
      if (it != vocab_.end()) known(it->second);
      else unknown(ch);
      i += len;
    }
  }
  if (pending_unk >= 0) add(pending_unk);
  for (size_t i = 0; i < symbols->size(); ++i) {
    (*symbols)[i].prev = static_cast<int32_t>(i) - 1;
    (*symbols)[i].next = i + 1 < symbols->size() ? static_cast<int32_t>(i + 1) : -1;
  }
}

void BpeModel::merge_all(std::vector<Symbol>& s) const {
  struct Candidate {
    int32_t rank, pos, new_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    if (auto m = merge_of(s[i].id, s[i + 1].id)) queue.push({m->rank, static_cast<int32_t>(i), m->new_id});
  }
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = s[top.pos];
    if (left.removed || left.next < 0) continue;
    const int32_t right_pos = left.next;
    const auto m = merge_of(left.id, s[right_pos].id);
    if (!m || m->new_id != top.new_id) continue;  // a stale entry: the pair changed since it was queued
    left.id = top.new_id;
    s[right_pos].removed = true;
    left.next = s[right_pos].next;
    if (left.next >= 0) s[left.next].prev = top.pos;
    if (left.prev >= 0) {
      if (auto p = merge_of(s[left.prev].id, left.id)) queue.push({p->rank, left.prev, p->new_id});
    }
    if (left.next >= 0) {
      if (auto n = merge_of(left.id, s[left.next].id)) queue.push({n->rank, top.pos, n->new_id});
    }
  }
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>* out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (byte_level_) {
      const auto it = raw_vocab_.find(std::string(word));
      if (it != raw_vocab_.end()) return out->push_back(it->second);
    } else {
      const auto it = vocab_.find(word);
      if (it != vocab_.end()) return out->push_back(it->second);
    }
  }
  const bool cacheable = word.size() <= kCachedWordBytes;
  WordCache* cache = nullptr;
  if (cacheable) {
    cache = &thread_cache(instance_);
    const auto it = cache->words.find(std::string(word));
    if (it != cache->words.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  thread_local std::vector<Symbol> symbols;
  initial_symbols(word, &symbols);
  merge_all(symbols);
  const size_t first = out->size();
  for (const Symbol& sym : symbols) {
    if (!sym.removed) out->push_back(sym.id);
  }
  if (cacheable) cache->words.emplace(std::string(word), std::vector<int32_t>(out->begin() + first, out->end()));
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string& BpeModel::id_to_token(int32_t id) const {
  static const std::string kNone;
  return id >= 0 && static_cast<size_t>(id) < tokens_.size() ? tokens_[id] : kNone;
}

std::string piece_text(std::string_view piece) {
  if (piece.size() == 6 && piece.substr(0, 3) == "<0x" && piece[5] == '>') {
    auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
    if (hex(piece[3]) >= 0 && hex(piece[4]) >= 0) return std::string(1, static_cast<char>(hex(piece[3]) * 16 + hex(piece[4])));
  }
  std::string out;
  out.reserve(piece.size());
  for (size_t at = 0;;) {
    const size_t next = piece.find("\xE2\x96\x81", at);  // "▁", 3 bytes
    if (next == std::string_view::npos) {
      out.append(piece.substr(at));
      return out;
    }
    out.append(piece.substr(at, next - at));
    out += ' ';
    at = next + 3;
  }
}

std::string BpeModel::token_text(int32_t id) const {
  const std::string& t = id_to_token(id);
  if (byte_level_) {
    if (auto raw = byte_level_bytes(t)) return *raw;
    return t;
  }
  return piece_text(t);
}

std::string BpeModel::describe() const {
  return cat(byte_level_ ? "byte-level BPE" : byte_fallback_ ? "BPE with byte fallback" : "BPE", ", ",
             vocab_.size(), " tokens, ", merges_.size(), " merges");
}

}  // namespace zero
