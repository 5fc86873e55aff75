// zero-ckpt: inspect and export checkpoints.
//
//   zero-ckpt inspect DIR [--tag TAG]
//       the checkpoints in DIR, then for TAG (default: latest) its step, world
//       size, stage, optimizer, LoRA adapters (if any), files and tensors,
//       and every segment's checksum verified.
//   zero-ckpt consolidate DIR --out FILE [--format safetensors] [--dtype fp32|bf16] [--tag TAG]
//       the fp32 master weights as one safetensors file (GPT-2's names
//       without a prefix, and its Conv1D layout), streamed tensor by tensor.
//   zero-ckpt consolidate DIR --format hf --out OUT_DIR [--dtype fp32|bf16]
//                         [--max-shard-size BYTES|5GB|500MiB] [--tag TAG]
//       a Hugging Face model directory transformers loads: config.json (from
//       the model description the checkpoint records, with the source's
//       token ids and model_type), the tokenizer files and
//       generation_config.json the checkpoint carries (or one from the token
//       ids), and the weights under Hugging Face's names, in one
//       model.safetensors or in shards of at most --max-shard-size (default
//       5GB) with model.safetensors.index.json. OUT_DIR must not exist, or be
//       empty. A checkpoint with LoRA adapters is written merged
//       (W + scaling * B @ A, as PEFT's merge_and_unload).
//   zero-ckpt consolidate DIR --format peft --out ADAPTER_DIR [--dtype fp32|bf16] [--tag TAG]
//       the LoRA adapters of a run with model.lora as a PEFT adapter directory
//       (adapter_config.json, adapter_model.safetensors under PEFT's names, the
//       tokenizer files the checkpoint carries) that
//       peft.PeftModel.from_pretrained loads over the base model.
//
// `zero-ckpt SUBCOMMAND --help` prints each one's usage (runtime/tools/cli.h).
// Exit status: 0 fine, 1 a problem with the checkpoint (named), 2 bad usage.
#include <cctype>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "core/memory_tracker.h"
#include "core/strings.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/file_io.h"
#include "runtime/checkpoint/hf_weights.h"
#include "runtime/checkpoint/peft_export.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/tools/cli.h"

namespace {

constexpr const char* kUsage =
    "usage: zero-ckpt inspect DIR [--tag TAG]\n"
    "       zero-ckpt consolidate DIR --out FILE [--format safetensors] [--dtype fp32|bf16] [--tag TAG]\n"
    "       zero-ckpt consolidate DIR --format hf --out OUT_DIR [--dtype fp32|bf16]\n"
    "                             [--max-shard-size BYTES|5GB|500MiB] [--tag TAG]\n"
    "       zero-ckpt consolidate DIR --format peft --out ADAPTER_DIR [--dtype fp32|bf16] [--tag TAG]\n"
    "\n"
    "Inspects and exports the checkpoints zero-train writes; `zero-ckpt SUBCOMMAND --help` for each.\n";

constexpr const char* kInspectUsage =
    "usage: zero-ckpt inspect DIR [--tag TAG]\n"
    "\n"
    "Lists the checkpoints in DIR, then for TAG (default: the latest) its step, world size, ZeRO stage,\n"
    "optimizer, LoRA adapters (if any), files and tensors, and verifies every segment's checksum.\n";

constexpr const char* kConsolidateUsage =
    "usage: zero-ckpt consolidate DIR --out FILE [--format safetensors] [--dtype fp32|bf16] [--tag TAG]\n"
    "       zero-ckpt consolidate DIR --format hf --out OUT_DIR [--dtype fp32|bf16]\n"
    "                             [--max-shard-size BYTES|5GB|500MiB] [--tag TAG]\n"
    "       zero-ckpt consolidate DIR --format peft --out ADAPTER_DIR [--dtype fp32|bf16] [--tag TAG]\n"
    "\n"
    "Writes the fp32 master weights of checkpoint TAG (default: the latest) as one safetensors file\n"
    "(GPT-2's names and Conv1D layout), or with --format hf as a Hugging Face model directory that\n"
    "transformers loads (config.json, the tokenizer files and generation_config.json, and the weights\n"
    "in one file or in shards with an index; LoRA adapters merged into their weights), or with\n"
    "--format peft the LoRA adapters of a run with model.lora as a PEFT adapter directory\n"
    "(adapter_config.json, adapter_model.safetensors, the tokenizer files) that\n"
    "peft.PeftModel.from_pretrained loads.\n";

// "5GB" (10^9), "500MiB" (2^20), "123" (bytes); nullopt when malformed.
std::optional<int64_t> parse_size(std::string v) {
  static const std::pair<const char*, int64_t> kUnits[] = {
      {"KIB", int64_t{1} << 10}, {"MIB", int64_t{1} << 20}, {"GIB", int64_t{1} << 30}, {"TIB", int64_t{1} << 40},
      {"KB", 1000},              {"MB", 1000000},           {"GB", 1000000000},        {"TB", 1000000000000},
      {"B", 1}};
  for (char& c : v) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  int64_t unit = 1;
  for (const auto& [suffix, scale] : kUnits) {
    const std::string sfx = suffix;
    if (v.size() > sfx.size() && v.compare(v.size() - sfx.size(), sfx.size(), sfx) == 0) {
      v.resize(v.size() - sfx.size());
      unit = scale;
      break;
    }
  }
  int64_t n = 0;
  if (!absl::SimpleAtoi(v, &n) || n <= 0 || n > std::numeric_limits<int64_t>::max() / unit) return std::nullopt;
  return n * unit;
}

int fail(const absl::Status& s) {
  std::fprintf(stderr, "zero-ckpt: %s\n", std::string(s.message()).c_str());
  return 1;
}

int inspect(const std::string& dir, std::string tag) {
  absl::StatusOr<std::vector<std::string>> tags = zero::list_checkpoints(dir);
  if (!tags.ok()) return fail(tags.status());
  absl::StatusOr<std::string> latest = zero::latest_tag(dir);
  std::printf("%s: %zu checkpoint(s):", dir.c_str(), tags->size());
  for (const std::string& t : *tags) std::printf(" %s%s", t.c_str(), latest.ok() && *latest == t ? " (latest)" : "");
  std::printf("\n");
  if (tag.empty()) {
    if (!latest.ok()) return fail(latest.status());
    tag = *latest;
  }
  absl::StatusOr<zero::Manifest> m = zero::read_manifest(dir, tag);
  if (!m.ok()) return fail(m.status());
  const zero::EngineProgress& p = m->progress;
  std::printf("%s: step %lld (%lld skipped), saved by %d rank(s) at ZeRO stage %d, model %s, optimizer %s\n",
              tag.c_str(), static_cast<long long>(p.global_step), static_cast<long long>(p.skipped_steps),
              m->world_size, m->zero_stage, m->model_dtype.c_str(), m->optimizer.c_str());
  std::printf("  schedule position %lld, loss scale %g\n", static_cast<long long>(p.scheduler_iteration),
              p.loss_scaler.scale);
  if (!m->adapter.is_null()) {
    // As the manifest records it (PEFT's adapter_config.json); read, not
    // checked: consolidate --format peft checks it against the model.
    const zero::Json& a = m->adapter;
    auto field = [&](const char* key) { return a.value(key, zero::Json()).dump(); };
    std::printf("  LoRA adapters: r %s, lora_alpha %s, target_modules %s%s\n", field("r").c_str(),
                field("lora_alpha").c_str(), field("target_modules").c_str(),
                a.value("use_rslora", zero::Json()) == true ? ", rsLoRA" : "");
  }
  int64_t params = 0;
  for (const auto& [name, shape] : m->parameters) params += zero::shape_numel(shape);
  std::printf("  %zu parameter tensors, %lld elements; %zu logical tensors (master + %zu optimizer states)\n",
              m->parameters.size(), static_cast<long long>(params), m->tensors.size(), m->optimizer_states.size());
  for (const zero::CheckpointFile& f : m->files) {
    std::printf("  %s  rank %d  %s\n", f.name.c_str(), f.rank, zero::format_bytes(f.bytes + zero::kShardHeaderBytes).c_str());
  }
  // Verify every segment.
  zero::ShardFiles files(*m, dir + "/" + tag);
  int64_t segments = 0, bytes = 0;
  for (const auto& [key, t] : m->tensors) {
    for (const zero::CheckpointSegment& seg : t.segments) {
      absl::StatusOr<const zero::FileReader*> file = files.get(seg.file);
      if (!file.ok()) return fail(file.status());
      absl::Status s = zero::read_segment(**file, seg, key, [](const float*, int64_t, int64_t) {
        return absl::OkStatus();
      });
      if (!s.ok()) return fail(s);
      ++segments;
      bytes += (seg.end - seg.begin) * 4;
    }
  }
  // The model's own files (tokenizer, generation config), each checked.
  absl::StatusOr<std::vector<zero::ModelFile>> model_files = zero::read_model_files(dir, tag, *m);
  if (!model_files.ok()) return fail(model_files.status());
  for (const zero::ModelFile& f : *model_files) {
    std::printf("  %s  model file  %s, checksum OK\n", f.name.c_str(),
                zero::format_bytes(static_cast<int64_t>(f.contents.size())).c_str());
  }
  absl::StatusOr<std::string> manifest = zero::read_file(dir + "/" + tag + "/manifest.json");
  const int64_t on_disk = m->payload_bytes() + zero::kShardHeaderBytes * static_cast<int64_t>(m->files.size()) +
                          (manifest.ok() ? static_cast<int64_t>(manifest->size()) : 0);
  std::printf("  checksums: all %lld segments OK; %s of tensor data, %s on disk with shard headers and manifest\n",
              static_cast<long long>(segments), zero::format_bytes(bytes).c_str(), zero::format_bytes(on_disk).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app;
  zero::cli::init_app(app, "zero-ckpt", kUsage);
  app.require_subcommand(1);
  std::string dir, tag, out, format = "safetensors", dtype_text, max_shard_text;

  CLI::App* inspect_cmd = app.add_subcommand("inspect", "list the checkpoints, show one and verify its checksums");
  zero::cli::set_usage(*inspect_cmd, kInspectUsage);
  inspect_cmd->add_option("DIR", dir, "the checkpoint directory (zero-train's --save-dir)")->type_name("")->required();
  inspect_cmd->add_option("--tag", tag, "the checkpoint (default: the latest)")->type_name("TAG")->take_last();

  CLI::App* consolidate_cmd = app.add_subcommand(
      "consolidate", "export the weights as safetensors, a Hugging Face directory or a PEFT adapter");
  zero::cli::set_usage(*consolidate_cmd, kConsolidateUsage);
  consolidate_cmd->add_option("DIR", dir, "the checkpoint directory (zero-train's --save-dir)")->type_name("")->required();
  consolidate_cmd->add_option("--out", out, "the safetensors file, or with --format hf|peft the directory (absent or empty)")
      ->type_name("FILE|OUT_DIR")
      ->take_last();
  consolidate_cmd->add_option("--format", format,
                              "safetensors (one file, the default), hf (a Hugging Face directory) or peft (a PEFT "
                              "adapter directory)")
      ->type_name("safetensors|hf|peft")
      ->take_last();
  consolidate_cmd->add_option("--dtype", dtype_text, "dtype of the exported weights (default fp32)")
      ->type_name("fp32|bf16")
      ->take_last();
  consolidate_cmd->add_option("--max-shard-size", max_shard_text, "with --format hf: the largest shard (default 5GB)")
      ->type_name("BYTES|5GB|500MiB")
      ->take_last();
  consolidate_cmd->add_option("--tag", tag, "the checkpoint (default: the latest)")->type_name("TAG")->take_last();

  if (const std::optional<int> exit_code = zero::cli::parse(app, argc, argv)) return *exit_code;
  if (inspect_cmd->parsed()) return inspect(dir, tag);

  if (format != "safetensors" && format != "hf" && format != "peft") {
    return zero::cli::usage_error(
        *consolidate_cmd, zero::cat("--format ", format, ": safetensors (one file), hf (a Hugging Face directory) or "
                                                         "peft (a PEFT adapter directory)"));
  }
  int64_t max_shard_bytes = 5000000000;  // transformers' default, "5GB"
  if (!max_shard_text.empty()) {
    const std::optional<int64_t> bytes = parse_size(max_shard_text);
    if (!bytes) {
      return zero::cli::usage_error(
          *consolidate_cmd,
          zero::cat("--max-shard-size ", max_shard_text, ": a positive size in bytes, or 5GB / 500MiB style"));
    }
    max_shard_bytes = *bytes;
  }
  zero::DType dtype = zero::DType::kF32;
  if (!dtype_text.empty()) {
    absl::StatusOr<zero::DType> d = zero::parse_float_dtype(dtype_text);
    if (!d.ok()) return zero::cli::usage_error(*consolidate_cmd, zero::cat("--dtype: ", d.status().message()));
    dtype = *d;
  }
  if (out.empty()) {
    return zero::cli::usage_error(*consolidate_cmd,
                                  zero::cat("consolidate needs --out ", format == "hf"     ? "OUT_DIR"
                                                                        : format == "peft" ? "ADAPTER_DIR"
                                                                                           : "FILE"));
  }
  if (!max_shard_text.empty() && format != "hf") {
    return zero::cli::usage_error(
        *consolidate_cmd, zero::cat("--max-shard-size is for --format hf (--format ", format, " writes one file)"));
  }
  const absl::Status s = format == "hf"     ? zero::consolidate_to_hf(dir, tag, out, dtype, max_shard_bytes)
                         : format == "peft" ? zero::consolidate_to_peft(dir, tag, out, dtype)
                                            : zero::consolidate_to_safetensors(dir, tag, out, dtype);
  if (!s.ok()) return fail(s);
  std::printf("wrote %s\n", out.c_str());
  return 0;
}
