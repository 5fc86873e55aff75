// Hugging Face model directories; see hf_weights.h.
#include "runtime/checkpoint/hf_weights.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "core/check.h"
#include "core/status.h"
#include "core/strings.h"
#include "runtime/checkpoint/file_io.h"
#include "runtime/checkpoint/hf_model_files.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/config/hf_config.h"

namespace zero {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";
constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // safetensors' own limit
constexpr std::string_view kPeftPrefix = kPeftTensorPrefix;  // PEFT's names: the PeftModel's, then the model's

// Bytes per element of a safetensors dtype; 0 when unknown.
int64_t safetensors_dtype_bytes(const std::string& dt) {
  if (dt == "F64" || dt == "I64" || dt == "U64") return 8;
  if (dt == "F32" || dt == "I32" || dt == "U32") return 4;
  if (dt == "F16" || dt == "BF16" || dt == "I16" || dt == "U16") return 2;
  if (dt == "I8" || dt == "U8" || dt == "BOOL" || dt == "F8_E4M3" || dt == "F8_E5M2") return 1;
  return 0;
}

// The dtypes that load (converted to fp32).
bool loadable(const std::string& dt, DType* out) {
  if (dt == "F32") *out = DType::kF32;
  else if (dt == "BF16") *out = DType::kBF16;
  else if (dt == "F16") *out = DType::kF16;
  else return false;
  return true;
}

void convert_to_fp32(const char* raw, DType src, int64_t n, float* out) {
  if (src == DType::kF32) {
    std::memcpy(out, raw, static_cast<size_t>(n) * 4);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = load_as_float(raw, src, static_cast<size_t>(i));
  }
}


// GPT-2's causal-mask buffers that transformers saves with the weights.
bool is_gpt2_mask_buffer(const std::string& ours) {
  if (ours.rfind("h.", 0) != 0) return false;
  const size_t dot = ours.find('.', 2);
  int64_t layer = 0;
  if (dot == std::string::npos || !absl::SimpleAtoi(ours.substr(2, dot - 2), &layer)) return false;
  const std::string rest = ours.substr(dot);
  return rest == ".attn.bias" || rest == ".attn.masked_bias";
}

// The format gives every tensor bytes of its own: two byte ranges of one
// file that share a byte are refused, naming both tensors. An empty tensor
// shares none.
absl::Status check_no_overlap(const std::string& file, int64_t data_start, std::vector<const HfTensor*> tensors) {
  std::sort(tensors.begin(), tensors.end(), [](const HfTensor* a, const HfTensor* b) {
    return a->offset != b->offset ? a->offset < b->offset : a->name < b->name;
  });
  const HfTensor* reach = nullptr;  // of those seen, the one ending last
  for (const HfTensor* t : tensors) {
    if (t->bytes == 0) continue;
    if (reach != nullptr && t->offset < reach->offset + reach->bytes) {
      auto range = [&](const HfTensor* x) {
        return cat("bytes [", x->offset - data_start, ", ", x->offset - data_start + x->bytes, ")");
      };
      return absl::DataLossError(cat(file, ": tensors ", reach->name, " (", range(reach), ") and ", t->name, " (",
                                     range(t), ") overlap; the safetensors format gives each tensor bytes of its "
                                     "own (a damaged or hand-edited header?)"));
    }
    if (reach == nullptr || t->offset + t->bytes > reach->offset + reach->bytes) reach = t;
  }
  return absl::OkStatus();
}

}  // namespace

HfWeights::HfWeights(HfWeights&&) noexcept = default;
HfWeights& HfWeights::operator=(HfWeights&&) noexcept = default;
HfWeights::~HfWeights() = default;

absl::Status HfWeights::add_file(const std::string& file) {
  ZE_ASSIGN_OR_RETURN(FileReader opened, FileReader::open(file));
  auto reader = std::make_unique<FileReader>(std::move(opened));
  const int64_t size = reader->size();
  auto bad = [&](std::string_view what) { return absl::DataLossError(cat(file, ": ", what)); };
  if (size < 8) return bad(cat(size, " bytes, too short for a safetensors file (an 8-byte header length comes first)"));
  uint64_t hlen = 0;
  ZE_RETURN_IF_ERROR(reader->read_at(0, &hlen, 8));
  if (hlen > static_cast<uint64_t>(size) - 8 || hlen > kMaxHeaderBytes) {
    return bad(cat("header length ", hlen, " does not fit the file's ", size,
                   " bytes (not a safetensors file, or truncated)"));
  }
  std::string text(hlen, '\0');
  ZE_RETURN_IF_ERROR(reader->read_at(8, text.data(), hlen));
  ZE_ASSIGN_OR_RETURN(const Json header, parse_json_text(text, file));
  if (!header.is_object()) return bad("the header is not a JSON object (not a safetensors file)");
  const int64_t data_start = 8 + static_cast<int64_t>(hlen), data_bytes = size - data_start;
  const int index = static_cast<int>(files_.size());
  Json metadata = Json::object();
  std::vector<const HfTensor*> added;  // this file's, for the overlap check
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const Json& t = it.value();
    if (name == "__metadata__") {
      if (!t.is_object()) return bad("__metadata__ is not an object");
      metadata = t;
      continue;
    }
    auto bad_tensor = [&](std::string_view what) { return bad(cat("tensor ", name, ": ", what)); };
    if (!t.is_object() || !t.contains("dtype") || !t["dtype"].is_string() || !t.contains("shape") ||
        !t["shape"].is_array() || !t.contains("data_offsets") || !t["data_offsets"].is_array() ||
        t["data_offsets"].size() != 2) {
      return bad_tensor(cat("malformed entry ", t.dump().substr(0, 200), " (needs dtype, shape, data_offsets)"));
    }
    HfTensor e;
    e.name = name;
    e.file = index;
    e.dtype = t["dtype"].get<std::string>();
    const int64_t elem = safetensors_dtype_bytes(e.dtype);
    if (elem == 0) return bad_tensor(cat("unknown dtype \"", e.dtype, "\""));
    // The element count, refusing negative dimensions and overflow.
    int64_t numel = 1;
    for (const Json& d : t["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) return bad_tensor(cat("shape ", t["shape"].dump(), " is not a list of sizes"));
      const int64_t v = d.get<int64_t>();
      if (v != 0 && numel > std::numeric_limits<int64_t>::max() / 16 / v) return bad_tensor(cat("shape ", t["shape"].dump(), " is too large"));
      numel *= v;
      e.shape.push_back(v);
    }
    const Json& off = t["data_offsets"];
    if (!off[0].is_number_integer() || !off[1].is_number_integer() || off[0].get<int64_t>() < 0 ||
        off[1].get<int64_t>() < off[0].get<int64_t>()) {
      return bad_tensor(cat("data_offsets ", off.dump(), " is not a byte range"));
    }
    const int64_t begin = off[0].get<int64_t>(), end = off[1].get<int64_t>();
    if (end - begin != numel * elem) {
      return bad_tensor(cat("byte range [", begin, ", ", end, ") holds ", end - begin, " bytes, its shape ",
                            shape_string(e.shape), " of ", e.dtype, " needs ", numel * elem));
    }
    if (end > data_bytes) {
      return bad_tensor(cat("byte range [", begin, ", ", end, ") ends past the file's ", data_bytes,
                            " bytes of data (truncated?)"));
    }
    e.offset = data_start + begin;
    e.bytes = end - begin;
    auto [where, inserted] = tensors_.emplace(name, e);
    if (!inserted) {
      return bad_tensor(cat("also in ", files_.at(static_cast<size_t>(where->second.file)), " (a tensor is in one file only)"));
    }
    added.push_back(&where->second);
  }
  ZE_RETURN_IF_ERROR(check_no_overlap(file, data_start, added));
  files_.push_back(file);
  readers_.push_back(std::move(reader));
  metadata_.push_back(std::move(metadata));
  return absl::OkStatus();
}

absl::StatusOr<HfWeights> HfWeights::open(const std::string& path) {
  HfWeights w;
  w.path_ = path;
  // Every file is opened through FileReader, which refuses anything but a
  // regular file (a named pipe would block the open for ever).
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    if (!fs::exists(path, ec)) {
      return absl::NotFoundError(cat(path, ": no such file or directory (a Hugging Face model directory or a "
                                           "safetensors file)"));
    }
    ZE_RETURN_IF_ERROR(w.add_file(path));
    return w;
  }
  const std::string index_path = path + "/" + kIndexFile;
  if (fs::exists(index_path, ec)) {
    ZE_ASSIGN_OR_RETURN(const std::string index_text, read_file(index_path));
    ZE_ASSIGN_OR_RETURN(const Json index, parse_json_text(index_text, index_path));
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
      return absl::DataLossError(cat(index_path, ": no \"weight_map\" object (tensor name -> file)"));
    }
    const Json& map = index["weight_map"];
    std::vector<std::string> shards;
    for (auto it = map.begin(); it != map.end(); ++it) {
      if (!it.value().is_string()) {
        return absl::DataLossError(cat(index_path, ": weight_map[\"", it.key(), "\"] is ", it.value().dump(), ", not a file name"));
      }
      const std::string f = it.value().get<std::string>();
      if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..") {
        return absl::DataLossError(cat(index_path, ": tensor ", it.key(), " is in \"", f,
                                       "\", not a file name in the directory"));
      }
      if (std::find(shards.begin(), shards.end(), f) == shards.end()) {
        if (!fs::exists(path + "/" + f, ec)) {
          return absl::NotFoundError(cat(index_path, " puts tensor ", it.key(), " in ", f, ", which is missing from ",
                                         path, " (an incomplete download?)"));
        }
        shards.push_back(f);
      }
    }
    for (const std::string& f : shards) ZE_RETURN_IF_ERROR(w.add_file(path + "/" + f));
    for (auto it = map.begin(); it != map.end(); ++it) {
      const std::string file = path + "/" + it.value().get<std::string>();
      auto t = w.tensors_.find(it.key());
      if (t == w.tensors_.end() || w.files_[static_cast<size_t>(t->second.file)] != file) {
        return absl::DataLossError(cat(index_path, " puts tensor ", it.key(), " in ", file, ", whose header has no such tensor"));
      }
    }
    for (const auto& [name, t] : w.tensors_) {
      if (!map.contains(name)) {
        return absl::DataLossError(cat(w.files_[static_cast<size_t>(t.file)], " holds tensor ", name, ", which ",
                                       index_path, " does not list (shards of another model?)"));
      }
    }
    return w;
  }
  if (fs::exists(path + "/" + kSingleFile, ec)) {
    ZE_RETURN_IF_ERROR(w.add_file(path + "/" + kSingleFile));
    return w;
  }
  const bool torch_bin = fs::exists(path + "/pytorch_model.bin") || fs::exists(path + "/pytorch_model.bin.index.json");
  return absl::NotFoundError(cat(path, " is not a Hugging Face model directory: it has neither ", kSingleFile, " nor ",
                                 kIndexFile,
                                 torch_bin ? " (PyTorch .bin weights are not read: convert them to safetensors)" : ""));
}

absl::Status HfWeights::read(const HfTensor& t, int64_t first, int64_t count, float* out,
                             int64_t max_read_bytes) const {
  DType src;
  if (!loadable(t.dtype, &src)) {
    return absl::InvalidArgumentError(cat(files_.at(static_cast<size_t>(t.file)), ": tensor ", t.name, " has dtype ",
                                          t.dtype, " (F32, BF16 and F16 load)"));
  }
  const int64_t elem = static_cast<int64_t>(dtype_size(src));
  ZE_CHECK(first >= 0 && count >= 0 && (first + count) * elem <= t.bytes) << t.name << " [" << first << ", +" << count << ")";
  const int64_t chunk = std::max<int64_t>(1, max_read_bytes / elem);
  std::vector<char> raw(static_cast<size_t>(std::min(chunk, count) * elem));
  const FileReader& f = *readers_.at(static_cast<size_t>(t.file));
  for (int64_t done = 0; done < count;) {
    const int64_t n = std::min(chunk, count - done);
    ZE_RETURN_IF_ERROR(f.read_at(t.offset + (first + done) * elem, raw.data(), static_cast<size_t>(n * elem)));
    convert_to_fp32(raw.data(), src, n, out + done);
    done += n;
  }
  return absl::OkStatus();
}

namespace {

// What the files hold for each of the model's parameters (our names): one
// tensor, or a fused parameter's parts (gpt.h's fused_parts), whose
// row-major elements follow one another in ours.
struct Matched {
  std::vector<const HfTensor*> tensors;
  Shape shape;  // ours (unsplit)
  bool transposed;
};

// Elements [first, first + count) of ours from m's tensors.
absl::Status read_matched(const HfWeights& w, const Matched& m, int64_t first, int64_t count, float* out,
                          int64_t max_read_bytes) {
  int64_t start = 0;  // the tensor's first element in ours
  for (const HfTensor* t : m.tensors) {
    const int64_t n = shape_numel(t->shape), lo = std::max(first, start), hi = std::min(first + count, start + n);
    if (lo < hi) ZE_RETURN_IF_ERROR(w.read(*t, lo - start, hi - lo, out + (lo - first), max_read_bytes));
    start += n;
  }
  return absl::OkStatus();
}

// Which of the model's parameters a set of files holds: the base model's
// (a Hugging Face directory: every parameter but the LoRA adapters) or the
// adapters (a PEFT adapter file).
enum class WeightSet { kBase, kAdapters };

// A file's tensor name -> ours.
std::string ours_from_file_name(const GptConfig& config, const std::string& name, WeightSet set) {
  if (set == WeightSet::kBase) return ours_from_hf_tensor_name(config, name);
  return name.rfind(kPeftPrefix, 0) == 0 ? ours_from_hf_tensor_name(config, name.substr(kPeftPrefix.size()))
                                         : name;
}
std::string file_name_from_ours(const GptConfig& config, const std::string& ours, WeightSet set) {
  const std::string hf = hf_tensor_name(config, ours);
  return set == WeightSet::kBase ? hf : cat(kPeftPrefix, hf);
}

// Matches the files' tensors to the model's: every parameter of `config` in
// `set` present with its shape, nothing else there but the tolerated buffers.
absl::StatusOr<std::map<std::string, Matched>> match_tensors(const HfWeights& w, const GptConfig& config,
                                                             WeightSet set = WeightSet::kBase) {
  std::map<std::string, Shape> expected;
  for (const auto& [name, shape] : gpt_parameter_shapes(config)) {
    if (is_lora_parameter(name) == (set == WeightSet::kAdapters)) expected.emplace(name, shape);
  }
  const auto file_of = [&](const HfTensor& t) { return w.files().at(static_cast<size_t>(t.file)); };
  std::string model = cat("a ", model_family(config.arch).display, " model of ", config.n_layer, " layers, d_model ",
                          config.d_model, ", vocabulary ", config.vocab_size);
  if (set == WeightSet::kAdapters) {
    model = cat("LoRA r ", config.lora.r, " on target_modules [", absl::StrJoin(config.lora.target_modules, ", "),
                "] of ", model);
  }
  // A fused parameter's parts, by the part's name: {the fused one, its place}.
  std::map<std::string, std::pair<std::string, size_t>> part_of;
  for (const auto& [name, shape] : expected) {
    const std::vector<FusedPart> parts = fused_parts(config, name);
    for (size_t i = 0; i < parts.size(); ++i) part_of.emplace(parts[i].name, std::make_pair(name, i));
  }
  std::map<std::string, const HfTensor*> by_ours;  // ours, or a fused parameter's part
  for (const auto& [name, t] : w.tensors()) {
    const std::string ours = ours_from_file_name(config, name, set);
    if (expected.count(ours) || part_of.count(ours)) {
      auto [it, inserted] = by_ours.emplace(ours, &t);
      if (!inserted) {
        return absl::FailedPreconditionError(cat(w.path(), ": tensors ", it->second->name, " and ", name,
                                                 " are both the model's ", ours));
      }
    } else if ((config.features().gpt2_names && is_gpt2_mask_buffer(ours)) ||
               (ours == "lm_head.weight" && config.tied_head())) {
      continue;  // a buffer, or the tied head's copy of the token table
    } else {
      return absl::FailedPreconditionError(cat(file_of(t), ": tensor ", name, " ", shape_string(t.shape),
                                               " is not part of the model (", model, "): ",
                                               set == WeightSet::kBase
                                                   ? "weights of another architecture or configuration?"
                                                   : "an adapter of another model or LoRA configuration?"));
    }
  }
  std::map<std::string, Matched> out;
  for (const auto& [ours, shape] : expected) {
    const bool transposed = hf_stores_transposed(config, ours) && shape.size() == 2;
    // The tensors: ours itself, or each part with its rows of ours.
    std::vector<std::pair<std::string, Shape>> wanted;
    const std::vector<FusedPart> parts = fused_parts(config, ours);
    if (parts.empty()) wanted.emplace_back(ours, transposed ? Shape{shape[1], shape[0]} : shape);
    for (const FusedPart& part : parts) {
      Shape s = shape;
      s[0] = part.rows;
      wanted.emplace_back(part.name, s);
    }
    Matched m{{}, shape, transposed};
    for (const auto& [name, want] : wanted) {
      auto it = by_ours.find(name);
      if (it == by_ours.end()) {
        return absl::NotFoundError(cat(w.path(), ": no tensor ", file_name_from_ours(config, name, set), " (the model's ",
                                       name, ", ", shape_string(want), ")"));
      }
      const HfTensor& t = *it->second;
      if (Shape(t.shape.begin(), t.shape.end()) != want) {
        return absl::FailedPreconditionError(cat(file_of(t), ": tensor ", t.name, " has shape ", shape_string(t.shape),
                                                 ", the model (", model, ") needs ", shape_string(want)));
      }
      DType dt;
      if (!loadable(t.dtype, &dt)) {
        return absl::InvalidArgumentError(cat(file_of(t), ": tensor ", t.name, " has dtype ", t.dtype,
                                              " (F32, BF16 and F16 load)"));
      }
      m.tensors.push_back(&t);
    }
    out.emplace(ours, std::move(m));
  }
  return out;
}

// Streams local elements [r.begin, r.end) of r.param into the master
// weights, staging at most max_read_bytes / 4 values at a time.
absl::Status load_range(const HfWeights& w, const Matched& m, const StateRange& r, OptimizerStateStore& store,
                        int64_t max_read_bytes) {
  const Parameter& p = *r.param;
  const int64_t stage_elems = std::max<int64_t>(1, max_read_bytes / 4);
  std::vector<float> staged;
  staged.reserve(static_cast<size_t>(std::min(stage_elems, r.end - r.begin)));
  int64_t written = 0;
  auto flush = [&]() -> absl::Status {
    ZE_RETURN_IF_ERROR(store.write(0, r.offset + written, staged));
    written += static_cast<int64_t>(staged.size());
    staged.clear();
    return absl::OkStatus();
  };
  auto emit = [&](const float* v, int64_t count) -> absl::Status {
    while (count > 0) {
      const int64_t take = std::min(count, stage_elems - static_cast<int64_t>(staged.size()));
      staged.insert(staged.end(), v, v + take);
      v += take;
      count -= take;
      if (static_cast<int64_t>(staged.size()) == stage_elems) ZE_RETURN_IF_ERROR(flush());
    }
    return absl::OkStatus();
  };

  if (m.transposed) {
    // Stored [in, out]: any run of ours is spread over the whole tensor.
    const int64_t rows = m.shape[0], cols = m.shape[1];
    ZE_CHECK(m.tensors.size() == 1) << p.name() << ": a transposed tensor is one";
    std::vector<float> whole(static_cast<size_t>(rows * cols));
    ZE_RETURN_IF_ERROR(w.read(*m.tensors[0], 0, rows * cols, whole.data(), max_read_bytes));
    for (int64_t i = r.begin; i < r.end; ++i) {
      const int64_t g = p.global_index(i);
      const float v = whole[static_cast<size_t>(g % cols * rows + g / cols)];
      ZE_RETURN_IF_ERROR(emit(&v, 1));
    }
  } else {
    // The unsplit tensor's runs that this range holds (one for a whole
    // parameter), cut to the read size; neighbours less than kMaxGapElems
    // apart share one read (a row-parallel slice's rows), each read at most
    // stage_elems values.
    constexpr int64_t kMaxGapElems = 16384;
    struct Run {
      int64_t global, count;
    };
    std::vector<Run> runs;
    p.for_each_global_run(r.begin, r.end, [&](int64_t, int64_t global, int64_t count) {
      for (int64_t k = 0; k < count; k += stage_elems) runs.push_back({global + k, std::min(stage_elems, count - k)});
    });
    std::vector<float> window;
    for (size_t i = 0; i < runs.size();) {
      const int64_t start = runs[i].global;
      int64_t stop = start + runs[i].count;
      size_t j = i + 1;
      while (j < runs.size() && runs[j].global >= stop && runs[j].global - stop <= kMaxGapElems &&
             runs[j].global + runs[j].count - start <= stage_elems) {
        stop = runs[j].global + runs[j].count;
        ++j;
      }
      window.resize(static_cast<size_t>(stop - start));
      ZE_RETURN_IF_ERROR(read_matched(w, m, start, stop - start, window.data(), max_read_bytes));
      for (; i < j; ++i) ZE_RETURN_IF_ERROR(emit(window.data() + (runs[i].global - start), runs[i].count));
    }
  }
  if (!staged.empty()) ZE_RETURN_IF_ERROR(flush());
  ZE_CHECK(written == r.end - r.begin) << p.name() << ": wrote " << written << " of " << r.end - r.begin;
  return absl::OkStatus();
}

// Loads the engine's parameters of `set` from `path` (HfWeights::open's);
// the others are left as they are. A collective, as load_hf_weights.
absl::Status load_weight_set(Engine& engine, const GptConfig& config, const std::string& path, WeightSet set,
                             int64_t max_read_bytes) {
  absl::Status local = [&]() -> absl::Status {
    ZE_ASSIGN_OR_RETURN(const HfWeights w, HfWeights::open(path));
    ZE_ASSIGN_OR_RETURN(const auto matched, match_tensors(w, config, set));
    // The trainable parameters into their master weights, the frozen ones
    // (no master) straight into their model-dtype weights; under expert
    // parallelism each state its own (the experts by their global names).
    auto load = [&](const StateRange& r, OptimizerStateStore& into) -> absl::Status {
      const Parameter& p = *r.param;
      if (is_lora_parameter(p.name()) != (set == WeightSet::kAdapters)) return absl::OkStatus();
      auto it = matched.find(p.name());
      if (it == matched.end() || it->second.shape != p.global_shape()) {
        return absl::FailedPreconditionError(
            cat("loading ", path, ": the engine's parameter ", p.name(), " ", shape_string(p.global_shape()),
                it == matched.end() ? std::string(" is not one of the model config's")
                                    : cat(" is ", shape_string(it->second.shape), " in the model config"),
                " (the engine was built from another config)"));
      }
      return load_range(w, it->second, r, into, max_read_bytes);
    };
    for (ModelState* state : engine.states()) {
      for (const StateRange& r : state->held_ranges()) ZE_RETURN_IF_ERROR(load(r, state->state_store()));
      if (OptimizerStateStore* frozen = state->frozen_weights()) {
        for (const StateRange& r : state->frozen_held_ranges()) ZE_RETURN_IF_ERROR(load(r, *frozen));
      }
      ZE_RETURN_IF_ERROR(state->state_store().flush());
    }
    return absl::OkStatus();
  }();
  ZE_ASSIGN_OR_RETURN(double failed, engine.mesh().world().all_reduce_max(local.ok() ? 0.0 : 1.0));
  if (!local.ok()) return local;
  if (failed > 0) return absl::AbortedError(cat("reading ", path, ": another rank failed"));
  for (ModelState* state : engine.states()) ZE_RETURN_IF_ERROR(state->refresh_parameters());
  return absl::OkStatus();
}

}  // namespace

absl::Status load_hf_weights(Engine& engine, const GptConfig& config, const std::string& path,
                             int64_t max_read_bytes) {
  return load_weight_set(engine, config, path, WeightSet::kBase, max_read_bytes);
}

absl::Status load_peft_adapter(Engine& engine, const GptConfig& config, const std::string& dir,
                               int64_t max_read_bytes) {
  if (!config.lora.enabled()) {
    return absl::FailedPreconditionError(cat("loading the adapter ", dir, ": the model has no LoRA adapters"));
  }
  return load_weight_set(engine, config, cat(dir, "/", kPeftAdapterFile), WeightSet::kAdapters, max_read_bytes);
}

absl::Status load_safetensors_weights(Engine& engine, const std::string& path) {
  const Gpt* gpt = dynamic_cast<const Gpt*>(&engine.model());
  if (gpt == nullptr) {
    return absl::InvalidArgumentError(cat("loading ", path, ": only a Gpt model's weights load from safetensors"));
  }
  return load_hf_weights(engine, gpt->config(), path);
}

absl::Status consolidate_to_hf(const std::string& dir, const std::string& tag, const std::string& out_dir,
                               DType dtype, int64_t max_shard_bytes) {
  ZE_RETURN_IF_ERROR(check_export_dtype(dtype));
  if (max_shard_bytes <= 0) {
    return absl::InvalidArgumentError(cat("max shard size ", max_shard_bytes, " bytes: must be positive"));
  }
  ZE_ASSIGN_OR_RETURN(const CheckpointSource src, open_checkpoint_source(dir, tag));
  const Manifest& m = src.manifest;
  ZE_ASSIGN_OR_RETURN(const GptConfig config,
                      checkpoint_model_config(src, "a Hugging Face export needs it for config.json"));
  // Checked before anything is written.
  ZE_ASSIGN_OR_RETURN(const std::vector<ModelFile> model_files, read_model_files(src.dir, src.tag, m));

  // The base model's weights; a LoRA adapter is merged into the weight it
  // adapts (PEFT's merge_and_unload) and not written itself.
  std::set<std::string> names;
  for (const auto& [name, shape] : m.parameters) names.insert(name);
  std::vector<ExportedTensor> tensors;
  for (const auto& [name, shape] : m.parameters) {
    if (is_lora_parameter(name)) continue;
    const std::vector<FusedPart> parts = fused_parts(config, name);
    int64_t first_row = 0;
    for (const FusedPart& part : parts) {  // Hugging Face's separate tensors, by rows
      Shape s = shape;
      s[0] = part.rows;
      tensors.push_back({.name = hf_tensor_name(config, part.name), .param = name, .shape = s,
                         .param_shape = shape, .first_row = first_row});
      first_row += part.rows;
    }
    if (!parts.empty()) continue;
    ExportedTensor t{hf_tensor_name(config, name), name, shape, hf_stores_transposed(config, name)};
    const std::string module = absl::EndsWith(name, ".weight") ? name.substr(0, name.size() - 7) : "";
    if (!module.empty() && names.count(lora_a_name(module))) {
      t.merge = LoraMerge{lora_a_name(module), lora_b_name(module), config.lora.r, config.lora.scaling()};
    }
    tensors.push_back(std::move(t));
  }

  // Shards in order, each up to max_shard_bytes (a larger tensor alone).
  std::vector<std::vector<ExportedTensor>> shards;
  int64_t shard_bytes = 0, total = 0;
  for (const ExportedTensor& t : tensors) {
    const int64_t bytes = exported_bytes(t, dtype);
    if (shards.empty() || (shard_bytes > 0 && shard_bytes + bytes > max_shard_bytes)) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(t);
    shard_bytes += bytes;
    total += bytes;
  }
  if (shards.empty()) shards.emplace_back();
  const size_t n = shards.size();
  auto shard_name = [&](size_t i) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", i + 1, n);
    return n == 1 ? std::string(kSingleFile) : std::string(buf);
  };

  return write_directory_atomic(out_dir, "a Hugging Face directory", [&](const std::string& partial) -> absl::Status {
    ShardFiles files(m, src.tag_dir());
    const Json metadata = {{"format", "pt"}};
    Json weight_map = Json::object();
    for (size_t i = 0; i < n; ++i) {
      ZE_RETURN_IF_ERROR(write_checkpoint_safetensors(src, files, shards[i], metadata, dtype, partial + "/" + shard_name(i)));
      for (const ExportedTensor& t : shards[i]) weight_map[t.name] = shard_name(i);
    }
    if (n > 1) {
      const Json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
      ZE_RETURN_IF_ERROR(write_file_atomic(partial + "/" + kIndexFile, index.dump(2) + "\n"));
    }
    // The recorded description keeps the source's keys (token ids,
    // model_type, ...); the weights' dtype is this export's.
    const Json hf = hf_config_json(config, dtype, m.model);
    ZE_RETURN_IF_ERROR(write_file_atomic(partial + "/config.json", hf.dump(2) + "\n"));
    // The tokenizer and generation files the checkpoint carries, byte for
    // byte; a generation_config.json from config.json's ids where none came.
    bool generation_config = false;
    for (const ModelFile& f : model_files) {
      ZE_RETURN_IF_ERROR(write_file_atomic(partial + "/" + f.name, f.contents));
      generation_config = generation_config || f.name == kGenerationConfigFile;
    }
    if (!generation_config) {
      ZE_RETURN_IF_ERROR(write_file_atomic(partial + "/" + kGenerationConfigFile,
                                           generation_config_json(hf).dump(2) + "\n"));
    }
    return absl::OkStatus();
  });
}

}  // namespace zero
