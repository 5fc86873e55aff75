// Framing and the threaded tokenizer loop; see tokenize_documents.h.
// Batches of records go from the calling thread to the workers through a
// queue; each batch is handed to the consumer only when it and every batch
// before it are done, so the order is the records' order. At most
// kBatchesPerThread batches per worker are in flight, which bounds memory.
#include "runtime/data/tokenize_documents.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "core/status.h"
#include "core/strings.h"

namespace zero {

namespace {

// A batch closes at whichever comes first; small enough that the threads
// share out a file's tail evenly, large enough that locking is rare.
constexpr size_t kBatchMaxRecords = 256;
constexpr size_t kBatchMaxBytes = size_t{1} << 20;
constexpr size_t kBatchesPerThread = 4;

struct Batch {
  std::vector<Document> docs;
  std::vector<int32_t> ids;    // every document's ids, one after another
  std::vector<size_t> ends;    // ends[i]: where document i's ids end in `ids`
  absl::Status status;         // the first decode error; documents from `failed` on are not encoded
  size_t failed = SIZE_MAX;    // the index of the document that failed
  bool done = false;
};

void encode_batch(const Tokenizer& tokenizer, const DocumentFraming& framing, const DocumentReader& reader,
                  Batch& b) {
  b.ends.reserve(b.docs.size());
  for (size_t i = 0; i < b.docs.size(); ++i) {
    Document& doc = b.docs[i];
    if (absl::Status st = reader.decode(&doc); !st.ok()) {
      b.status = std::move(st);
      b.failed = i;
      return;
    }
    if (!doc.text.empty()) encode_document(tokenizer, framing, doc.text, &b.ids);
    b.ends.push_back(b.ids.size());
  }
}

}  // namespace

absl::StatusOr<DocumentFraming> document_framing(const Tokenizer& tokenizer, std::optional<int32_t> eos_override,
                                                 bool add_special) {
  DocumentFraming f;
  f.add_special = add_special;
  if (eos_override) {
    if (*eos_override < 0 || *eos_override >= tokenizer.vocab_size()) {
      return absl::InvalidArgumentError(cat("eos id ", *eos_override, " is not an id of tokenizer ",
                                            tokenizer.source(), " (its ids are 0..", tokenizer.vocab_size() - 1,
                                            ")"));
    }
    f.eos_id = *eos_override;
  } else if (tokenizer.special().eos_id) {
    f.eos_id = *tokenizer.special().eos_id;
  } else {
    return absl::InvalidArgumentError(cat("tokenizer ", tokenizer.source(), " names no eos_token (in "
                                          "tokenizer_config.json or special_tokens_map.json), and documents need "
                                          "one between them: give the separator's id with --eos-id"));
  }
  if (!add_special) return f;
  // What the post-processor adds, from one probe: the ids around "a".
  const std::vector<int32_t> bare = tokenizer.encode("a", false), framed = tokenizer.encode("a", true);
  const auto at = std::search(framed.begin(), framed.end(), bare.begin(), bare.end());
  if (at != framed.end()) f.prefix.assign(framed.begin(), at);
  f.eos_from_post_processor = framed.size() > bare.size() && framed.back() == f.eos_id &&
                              (bare.empty() || bare.back() != f.eos_id);
  return f;
}

void encode_document(const Tokenizer& tokenizer, const DocumentFraming& framing, std::string_view text,
                     std::vector<int32_t>* out) {
  tokenizer.encode(text, framing.add_special, out);
  if (!framing.eos_from_post_processor) out->push_back(framing.eos_id);
}

std::string describe_framing(const Tokenizer& tokenizer, const DocumentFraming& framing) {
  auto name = [&](int32_t id) { return tokenizer.id_to_token(id).value_or(cat("<id ", id, ">")); };
  std::string out;
  for (int32_t id : framing.prefix) out += name(id) + " ";
  return cat(out, "... ", name(framing.eos_id));
}

absl::StatusOr<TokenizeStats> tokenize_documents(const Tokenizer& tokenizer, const DocumentFraming& framing,
                                                 DocumentReader& reader, int threads,
                                                 const DocumentConsumer& consume) {
  if (threads < 1) return absl::InvalidArgumentError(cat("threads ", threads, " must be at least 1"));
  std::mutex mu;
  std::condition_variable work_ready, batch_done;
  std::deque<Batch*> todo;  // batches no worker has taken yet
  bool stop = false;
  std::vector<std::thread> workers;
  workers.reserve(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      std::unique_lock<std::mutex> lock(mu);
      while (true) {
        work_ready.wait(lock, [&] { return stop || !todo.empty(); });
        if (todo.empty()) return;  // stop, and nothing left to take
        Batch* b = todo.front();
        todo.pop_front();
        lock.unlock();
        encode_batch(tokenizer, framing, reader, *b);
        lock.lock();
        b->done = true;
        batch_done.notify_all();
      }
    });
  }
  // Whatever way the loop below ends, the workers finish their batch and are joined.
  std::deque<std::unique_ptr<Batch>> in_flight;  // in record order
  struct Joiner {
    std::function<void()> join;
    ~Joiner() { join(); }
  } joiner{[&] {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
      todo.clear();
    }
    work_ready.notify_all();
    for (std::thread& w : workers) w.join();
  }};

  TokenizeStats stats;
  bool end_of_input = false;
  const size_t max_in_flight = kBatchesPerThread * static_cast<size_t>(threads);
  while (true) {
    // Keep the workers fed.
    while (!end_of_input && in_flight.size() < max_in_flight) {
      auto b = std::make_unique<Batch>();
      size_t bytes = 0;
      while (b->docs.size() < kBatchMaxRecords && bytes < kBatchMaxBytes) {
        Document doc;
        absl::StatusOr<bool> got = reader.next(&doc, /*decode=*/false);
        if (!got.ok() || !*got) {
          // A read error comes after the records already read: it becomes
          // that position's error, so an earlier record's error wins.
          if (!got.ok()) {
            b->status = got.status();
            b->failed = b->docs.size();
          }
          end_of_input = true;
          break;
        }
        bytes += doc.text.size();
        b->docs.push_back(std::move(doc));
      }
      if (b->docs.empty() && b->status.ok()) break;
      if (b->docs.empty()) {
        b->done = true;  // nothing to encode: only the error
      } else {
        std::lock_guard<std::mutex> lock(mu);
        todo.push_back(b.get());
      }
      in_flight.push_back(std::move(b));
      work_ready.notify_one();
    }
    if (in_flight.empty()) break;
    Batch& b = *in_flight.front();
    {
      std::unique_lock<std::mutex> lock(mu);
      batch_done.wait(lock, [&] { return b.done; });
    }
    for (size_t i = 0; i < b.docs.size() || i == b.failed; ++i) {
      if (i == b.failed) return b.status;
      const Document& doc = b.docs[i];
      const size_t begin = i == 0 ? 0 : b.ends[i - 1];
      ++stats.records;
      if (doc.text.empty()) {
        ++stats.empty_documents;
        continue;
      }
      const std::span<const int32_t> ids(b.ids.data() + begin, b.ends[i] - begin);
      ZE_RETURN_IF_ERROR(consume(doc, ids));
      ++stats.documents;
      stats.tokens += static_cast<int64_t>(ids.size());
      stats.text_bytes += static_cast<int64_t>(doc.text.size());
    }
    in_flight.pop_front();
  }
  if (stats.documents == 0) {
    std::string inputs;
    for (const std::string& in : reader.options().inputs) inputs += cat(inputs.empty() ? "" : ", ", in);
    return absl::InvalidArgumentError(
        cat("no documents in ", inputs, " (", reader.describe(), "): ",
            stats.records == 0 ? "every file is empty or holds only blank lines"
                               : cat("all ", stats.records, " records are empty documents"),
            "; there is nothing to tokenize"));
  }
  return stats;
}

}  // namespace zero
