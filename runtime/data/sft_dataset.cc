// SFT rows; see sft_dataset.h.
#include "runtime/data/sft_dataset.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <numeric>
#include <thread>

#include "absl/strings/str_format.h"
#include "core/status.h"
#include "core/strings.h"
#include "runtime/data/json_line_error.h"
#include "runtime/data/sft_examples.h"

namespace zero {

namespace {

absl::StatusOr<SftExample> encode_line(const SftEncoder& encoder, const std::string& line) {
  Json example;
  try {
    example = Json::parse(line);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(cat("not valid JSON (", json_line_error_text(e.what()), ")"));
  }
  return encoder.encode(example);
}

// Targets with a loss: the labels after the first token.
int64_t trainable(const SftExample& e) {
  return std::count_if(e.labels.begin() + (e.labels.empty() ? 0 : 1), e.labels.end(),
                       [](int32_t l) { return l != kIgnoreLabel; });
}

// Best-fit decreasing: each example, longest first, into the row with the
// least room that still holds it; a row's examples then in file order.
std::vector<std::vector<int64_t>> pack_best_fit(const std::vector<int64_t>& lengths, int64_t capacity) {
  std::vector<int64_t> order(lengths.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return lengths[a] > lengths[b]; });
  std::vector<std::vector<int64_t>> rows;
  std::multimap<int64_t, size_t> room;  // room left -> row
  for (int64_t e : order) {
    const auto it = room.lower_bound(lengths[e]);
    if (it == room.end()) {
      rows.push_back({e});
      room.emplace(capacity - lengths[e], rows.size() - 1);
    } else {
      const size_t row = it->second;
      const int64_t left = it->first - lengths[e];
      room.erase(it);
      rows[row].push_back(e);
      room.emplace(left, row);
    }
  }
  for (std::vector<int64_t>& row : rows) std::sort(row.begin(), row.end());
  // Rows in the order of their first example, so the layout reads like the file.
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.front() < b.front(); });
  return rows;
}

std::string percent(int64_t part, int64_t whole) {
  return absl::StrFormat("%.1f%%", whole > 0 ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0);
}

}  // namespace

absl::Status SftRows::fill(int64_t row, int32_t* inputs, int32_t* targets) const {
  const int64_t begin = row_starts_[row], n = row_starts_[row + 1] - begin;
  for (int64_t t = 0; t < seq_len_; ++t) {
    inputs[t] = t < n ? ids_[begin + t] : pad_id_;
    targets[t] = t + 1 < n ? labels_[begin + t + 1] : kIgnoreLabel;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SftRows>> read_sft_rows(const Tokenizer& tokenizer, const SftDataOptions& options) {
  if (options.threads < 1) return absl::InvalidArgumentError(cat("threads ", options.threads, " must be at least 1"));
  const auto start = std::chrono::steady_clock::now();
  const SpecialTokens& special = tokenizer.special();
  const std::optional<int32_t> pad = special.pad_id ? special.pad_id : special.eos_id;
  if (!pad) {
    return absl::FailedPreconditionError(cat("tokenizer ", tokenizer.source(), " names neither a pad_token nor an "
                                             "eos_token (tokenizer_config.json), and SFT rows are padded with one"));
  }
  ZE_ASSIGN_OR_RETURN(const SftEncoder encoder, SftEncoder::create(tokenizer));

  DocumentOptions doc_options;
  doc_options.inputs = options.inputs;
  doc_options.format = DocumentFormat::kJsonl;
  doc_options.max_document_bytes = options.max_line_bytes;
  ZE_ASSIGN_OR_RETURN(std::unique_ptr<DocumentReader> reader, DocumentReader::open(doc_options));
  std::vector<Document> lines;
  for (Document doc; true;) {
    ZE_ASSIGN_OR_RETURN(const bool got, reader->next(&doc, /*decode=*/false));
    if (!got) break;
    lines.push_back(std::move(doc));
  }
  if (lines.empty()) {
    std::string inputs;
    for (const std::string& in : options.inputs) inputs += cat(inputs.empty() ? "" : ", ", in);
    return absl::InvalidArgumentError(cat("no SFT examples in ", inputs, " (", reader->describe(),
                                          "): every file is empty or holds only blank lines"));
  }

  // Encoded on the threads, each a contiguous stretch of lines.
  const size_t n = lines.size();
  std::vector<absl::StatusOr<SftExample>> examples(n);
  const size_t threads = std::min(n, static_cast<size_t>(options.threads));
  std::vector<std::thread> workers;
  for (size_t t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (size_t i = n * t / threads; i < n * (t + 1) / threads; ++i) {
        examples[i] = encode_line(encoder, lines[i].text);
      }
    });
  }
  for (std::thread& w : workers) w.join();

  // Checked in file order, so the first bad line is the one named.
  auto rows = std::unique_ptr<SftRows>(new SftRows());
  SftDataStats& stats = rows->stats_;
  std::vector<int64_t> lengths(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string where = reader->where(lines[i]);
    if (!examples[i].ok()) return annotate(examples[i].status(), where);
    const SftExample& e = *examples[i];
    const int64_t length = static_cast<int64_t>(e.ids.size());
    if (length > options.seq_len + 1) {
      return absl::InvalidArgumentError(cat(where, ": the example is ", length,
                                            " tokens, longer than model.seq_len + 1 = ", options.seq_len + 1,
                                            " (a row's ", options.seq_len, " inputs and its last target); raise "
                                            "model.seq_len, or shorten the example"));
    }
    const int64_t trained = trainable(e);
    if (trained == 0) {
      return absl::InvalidArgumentError(cat(where, ": the example has no token to train on after its first (",
                                            e.trained_tokens == 0 ? "nothing is trained"
                                                                  : "only its first token is trained, and nothing "
                                                                    "comes before it to predict it from",
                                            "): give it a completion or an assistant reply"));
    }
    lengths[i] = length;
    stats.tokens += length;
    stats.trained_tokens += trained;
    stats.longest = std::max(stats.longest, length);
    stats.merged_boundaries += e.merged_boundaries;
  }
  stats.examples = static_cast<int64_t>(n);

  std::vector<std::vector<int64_t>> layout;
  if (options.packing) {
    layout = pack_best_fit(lengths, options.seq_len + 1);
  } else {
    for (size_t i = 0; i < n; ++i) layout.push_back({static_cast<int64_t>(i)});
  }
  rows->seq_len_ = options.seq_len;
  rows->pad_id_ = *pad;
  rows->ids_.reserve(static_cast<size_t>(stats.tokens));
  rows->labels_.reserve(static_cast<size_t>(stats.tokens));
  for (const std::vector<int64_t>& row : layout) {
    for (int64_t i : row) {
      const SftExample& e = *examples[static_cast<size_t>(i)];
      rows->ids_.insert(rows->ids_.end(), e.ids.begin(), e.ids.end());
      rows->labels_.push_back(kIgnoreLabel);  // never a target: nothing of this example comes before it
      rows->labels_.insert(rows->labels_.end(), e.labels.begin() + 1, e.labels.end());
    }
    rows->row_starts_.push_back(static_cast<int64_t>(rows->ids_.size()));
  }
  stats.rows = static_cast<int64_t>(layout.size());
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const std::string pad_text = tokenizer.id_to_token(*pad).value_or("?");
  const int64_t positions = stats.rows * (options.seq_len + 1);
  rows->description_ = cat(
      "SFT: ", stats.examples, " example", stats.examples == 1 ? "" : "s", " from ", reader->files().size(),
      " JSON-lines file", reader->files().size() == 1 ? "" : "s", ", ", reader->total_bytes(), " bytes",
      " tokenized by ", tokenizer.source(), " (", tokenizer.describe(), ") in ", absl::StrFormat("%.2f", stats.seconds),
      " s on ", threads, " thread", threads == 1 ? "" : "s", ": ", stats.tokens, " tokens, ", stats.trained_tokens,
      " of them trained (", percent(stats.trained_tokens, stats.tokens), "), the longest ", stats.longest, "; ",
      options.packing
          ? cat("packed into ", stats.rows, " rows of up to seq_len + 1 = ", options.seq_len + 1,
                " tokens (best-fit decreasing; causal attention across a row's examples), ")
          : cat("one example per row of up to seq_len + 1 = ", options.seq_len + 1, " tokens, "),
      "padded with ", pad_text, " (id ", *pad, "): ", percent(stats.tokens, positions),
      " of the positions hold tokens");
  return rows;
}

}  // namespace zero
