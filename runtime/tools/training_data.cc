// The run's data; see training_data.h.
#include "runtime/tools/training_data.h"

#include <chrono>
#include <span>

#include "absl/strings/str_format.h"
#include "core/check.h"
#include "core/status.h"
#include "core/strings.h"
#include "runtime/data/documents.h"
#include "runtime/data/sft_dataset.h"
#include "runtime/data/tokenize_documents.h"

namespace zero {

namespace {

// "data.tokenizer DIR" or "data.tokenizer DIR (run.init_from's)".
std::string tokenizer_name(const RunConfig& c) {
  return cat("data.tokenizer ", c.data.tokenizer, c.data.tokenizer == c.run.init_from ? " (run.init_from's)" : "");
}

// Shards against the model: what their headers say they were written for.
absl::Status check_shards_fit(const TokenSource& source, const RunConfig& c) {
  const int64_t model_vocab = c.model.gpt.vocab_size;
  for (const int64_t declared : source.declared_vocabs()) {
    if (declared == 256 && model_vocab != 256) {
      return absl::InvalidArgumentError(cat(
          source.describe(), ": the shards hold bytes (written for a vocabulary of 256: zero-data bytes-to-llmc), "
          "but the model has a vocabulary of ", model_vocab, " (model.vocab_size): its embeddings would be trained on "
          "bytes as if they were its tokenizer's ids. Make shards with the model's tokenizer (zero-data tokenize "
          "--tokenizer DIR), or train a byte model (model.vocab_size 256)"));
    }
    if (declared > model_vocab) {
      return absl::InvalidArgumentError(cat(
          source.describe(), ": the shards were written by a tokenizer of ", declared, " ids (header[3]), but the "
          "model has a vocabulary of ", model_vocab, " (model.vocab_size): that tokenizer's ids would overflow the "
          "model's embedding table. Tokenize with the model's own tokenizer (zero-data tokenize --tokenizer DIR)"));
    }
  }
  return absl::OkStatus();
}

// Documents tokenized into one stream in memory, as zero-data tokenize writes a shard.
absl::StatusOr<std::unique_ptr<TokenSource>> tokenize_in_memory(const RunConfig& c, const std::string& path,
                                                                 const Tokenizer& tokenizer, int threads) {
  const auto start = std::chrono::steady_clock::now();
  ZE_ASSIGN_OR_RETURN(const DocumentFraming framing, document_framing(tokenizer, std::nullopt));
  DocumentOptions options;
  options.inputs = {path};
  options.format = c.data.format == "jsonl" ? DocumentFormat::kJsonl : DocumentFormat::kText;
  options.jsonl_field = c.data.jsonl_field;
  ZE_ASSIGN_OR_RETURN(std::unique_ptr<DocumentReader> reader, DocumentReader::open(options));
  std::vector<int32_t> tokens;
  ZE_ASSIGN_OR_RETURN(const TokenizeStats stats,
                      tokenize_documents(tokenizer, framing, *reader, threads,
                                         [&](const Document&, std::span<const int32_t> ids) {
                                           tokens.insert(tokens.end(), ids.begin(), ids.end());
                                           return absl::OkStatus();
                                         }));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::string text = cat(stats.documents, " document", stats.documents == 1 ? "" : "s", " from ", reader->describe());
  if (stats.empty_documents > 0) text += cat(" (", stats.empty_documents, " empty, skipped)");
  text += cat(" tokenized by ", tokenizer.source(), " (", tokenizer.describe(), ") in ",
              absl::StrFormat("%.2f", seconds), " s on ", threads, " thread", threads == 1 ? "" : "s", ": ",
              stats.tokens, " tokens in memory, one stream, each document ", describe_framing(tokenizer, framing),
              "; windows are drawn across documents, as from one shard");
  return make_memory_tokens(std::move(tokens), tokenizer.vocab_size(), std::move(text));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> load_data_tokenizer(const RunConfig& c) {
  if (!c.data.tokenized()) return std::unique_ptr<Tokenizer>();
  if (c.data.tokenizer.empty()) {
    return absl::InvalidArgumentError(cat(
        "data.tokenizer: data.format \"", c.data.format, "\" reads text through a tokenizer, and none is set: set "
        "data.tokenizer to the model's tokenizer (a directory with tokenizer.json or tokenizer.model), or "
        "--init-from a model directory that has one"));
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = load_tokenizer(c.data.tokenizer);
  if (!tokenizer.ok()) return annotate(tokenizer.status(), tokenizer_name(c));
  const int64_t ids = (*tokenizer)->vocab_size(), model_vocab = c.model.gpt.vocab_size;
  if (ids > model_vocab) {
    return absl::InvalidArgumentError(cat(tokenizer_name(c), " (", (*tokenizer)->describe(), ") has ", ids,
                                          " ids, but the model has a vocabulary of ", model_vocab,
                                          " (model.vocab_size): ids from ", model_vocab,
                                          " up would overflow its embedding table; use the model's own tokenizer"));
  }
  return tokenizer;
}

absl::StatusOr<std::unique_ptr<DataLoader>> open_data_path(const RunConfig& c, const std::string& path,
                                                           std::string_view key, const Tokenizer* tokenizer,
                                                           int threads) {
  const DataSection& d = c.data;
  const int64_t seq_len = c.model.gpt.seq_len, model_vocab = c.model.gpt.vocab_size;
  const std::string what = key == "data.path" ? std::string(key) : cat(key, " (", path, ")");
  ZE_CHECK(tokenizer != nullptr || !d.tokenized()) << d.format << " needs load_data_tokenizer's tokenizer";
  if (d.format == "sft") {
    SftDataOptions options;
    options.inputs = {path};
    options.seq_len = seq_len;
    options.packing = d.packing;
    options.threads = threads;
    absl::StatusOr<std::unique_ptr<SftRows>> rows = read_sft_rows(*tokenizer, options);
    if (!rows.ok()) return annotate(rows.status(), what);
    return DataLoader::create(*std::move(rows), d.seed, SampleOrder::kEpochs);
  }
  if (d.format == "text" && tokenizer == nullptr && model_vocab != 256) {
    return absl::InvalidArgumentError(cat(
        "data.format: \"text\" without a tokenizer reads the files' bytes as tokens (vocabulary 256), but the model "
        "has a vocabulary of ", model_vocab, " (model.vocab_size): it would be trained on bytes as if they were its "
        "tokenizer's ids. Set data.tokenizer to the model's tokenizer (or --init-from its directory) to tokenize the "
        "text as it is read, make token shards with zero-data tokenize --tokenizer DIR (data.format \"llmc\"), or "
        "set data.format \"bytes\" to train on bytes on purpose"));
  }
  absl::StatusOr<std::unique_ptr<TokenSource>> source;
  if (d.format == "llmc") {
    source = open_llmc_shards(path, model_vocab);
    if (source.ok()) {
      if (const absl::Status fits = check_shards_fit(**source, c); !fits.ok()) return annotate(fits, what);
    }
  } else if (tokenizer != nullptr) {
    source = tokenize_in_memory(c, path, *tokenizer, threads);
  } else {
    source = open_text_bytes(path);
  }
  if (!source.ok()) return annotate(source.status(), what);
  if ((*source)->vocab_bound() > model_vocab) {
    return absl::InvalidArgumentError(cat(what, ": ", (*source)->describe(), " has token ids up to ",
                                          (*source)->vocab_bound() - 1, " but model.vocab_size is ", model_vocab));
  }
  absl::StatusOr<std::unique_ptr<DataLoader>> loader = DataLoader::create(*std::move(source), seq_len, d.seed);
  if (!loader.ok()) return annotate(loader.status(), what);
  return loader;
}

absl::StatusOr<TrainingData> open_training_data(const RunConfig& c, int threads) {
  ZE_ASSIGN_OR_RETURN(const std::unique_ptr<Tokenizer> tokenizer, load_data_tokenizer(c));
  TrainingData data;
  ZE_ASSIGN_OR_RETURN(data.train, open_data_path(c, c.data.path, "data.path", tokenizer.get(), threads));
  if (!c.data.val_path.empty() && c.run.eval_every > 0) {  // without evaluation it is not read (the config warns)
    ZE_ASSIGN_OR_RETURN(data.val, open_data_path(c, c.data.val_path, "data.val_path", tokenizer.get(), threads));
  }
  return data;
}

int data_error_exit_code(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kUnimplemented:  // a tokenizer component we do not read
    case absl::StatusCode::kOutOfRange: return 2;
    default: return 1;
  }
}

}  // namespace zero
