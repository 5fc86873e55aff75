// Writing checkpoints as safetensors files; see safetensors.h.
#include "runtime/checkpoint/safetensors.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>

#include "core/check.h"
#include "core/status.h"
#include "core/strings.h"
#include "runtime/checkpoint/file_io.h"
#include "runtime/config/peft_config.h"

namespace zero {

namespace {

// [rows, cols] -> [cols, rows]
std::vector<float> transposed(const std::vector<float>& v, int64_t rows, int64_t cols) {
  std::vector<float> t(v.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = v[r * cols + c];
  return t;
}

Shape stored_shape(const ExportedTensor& t) {
  if (t.transposed && t.shape.size() == 2) return {t.shape[1], t.shape[0]};
  return t.shape;
}

// The master weights of one parameter, gathered from the shards' segments.
absl::StatusOr<std::vector<float>> gather_master(const CheckpointSource& src, ShardFiles& files,
                                                 const std::string& param, const Shape& shape) {
  const std::string key = Manifest::key("master", param);
  auto it = src.manifest.tensors.find(key);
  if (it == src.manifest.tensors.end()) return absl::DataLossError(cat("checkpoint ", src.tag_dir(), " has no tensor ", key));
  if (it->second.shape != shape) {
    return absl::DataLossError(cat("checkpoint ", src.tag_dir(), ": tensor ", key, " has shape ",
                                   shape_string(it->second.shape), ", its parameter ", shape_string(shape)));
  }
  std::vector<float> values(static_cast<size_t>(shape_numel(shape)));
  for (const CheckpointSegment& seg : it->second.segments) {
    ZE_ASSIGN_OR_RETURN(const FileReader* file, files.get(seg.file));
    ZE_RETURN_IF_ERROR(read_segment(*file, seg, key, [&](const float* data, int64_t first, int64_t n) {
      std::memcpy(values.data() + first, data, static_cast<size_t>(n) * 4);
      return absl::OkStatus();
    }));
  }
  return values;
}

// W (values, [rows, cols]) += scaling * (B @ A), A [rank, cols] and B
// [rows, rank] read from the checkpoint: PEFT's merge in fp32 (the product,
// each element summed over the rank in order, scaled, then added).
absl::Status merge_lora(const CheckpointSource& src, ShardFiles& files, const ExportedTensor& t,
                        std::vector<float>& values) {
  const LoraMerge& m = *t.merge;
  ZE_CHECK(t.shape.size() == 2) << t.param << ": an adapter merges into a 2-D weight";
  const int64_t rows = t.shape[0], cols = t.shape[1], rank = m.rank;
  ZE_ASSIGN_OR_RETURN(const std::vector<float> a, gather_master(src, files, m.lora_a, Shape{rank, cols}));
  ZE_ASSIGN_OR_RETURN(const std::vector<float> b, gather_master(src, files, m.lora_b, Shape{rows, rank}));
  std::vector<float> delta(static_cast<size_t>(cols));
  for (int64_t i = 0; i < rows; ++i) {
    std::fill(delta.begin(), delta.end(), 0.0f);
    for (int64_t k = 0; k < rank; ++k) {
      const float bik = b[static_cast<size_t>(i * rank + k)];
      const float* ak = a.data() + k * cols;
      for (int64_t j = 0; j < cols; ++j) delta[static_cast<size_t>(j)] += bik * ak[j];
    }
    float* w = values.data() + i * cols;
    for (int64_t j = 0; j < cols; ++j) w[j] += delta[static_cast<size_t>(j)] * m.scaling;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GptConfig> checkpoint_model_config(const CheckpointSource& src, const std::string& needed_for) {
  const Manifest& m = src.manifest;
  const std::string manifest_path = src.tag_dir() + "/manifest.json";
  if (m.model.is_null()) {
    return absl::FailedPreconditionError(cat(
        "checkpoint ", src.tag_dir(), " has no model description (its manifest has no \"model\": it was saved "
        "without one, or by an older build); ", needed_for, ". Export it with --format safetensors instead"));
  }
  ZE_ASSIGN_OR_RETURN(GptConfig config, gpt_config_from_hf(m.model, manifest_path + " \"model\""));
  if (!m.adapter.is_null()) {
    ZE_ASSIGN_OR_RETURN(config.lora, lora_config_from_peft(m.adapter, manifest_path + " \"adapter\""));
  }
  // The checkpoint's parameters must be the described model's, each once.
  const std::string described = m.adapter.is_null()
                                    ? "the model its \"model\" describes"
                                    : "the model and LoRA adapters its \"model\" and \"adapter\" describe";
  std::map<std::string, Shape> expected;
  for (const auto& [name, shape] : gpt_parameter_shapes(config)) expected.emplace(name, shape);
  for (const auto& [name, shape] : m.parameters) {
    auto it = expected.find(name);
    if (it == expected.end() || it->second != shape) {
      return absl::FailedPreconditionError(cat(manifest_path, ": parameter ", name, " ", shape_string(shape),
                                               it == expected.end() ? std::string(" is not one of")
                                                                    : cat(" is ", shape_string(it->second), " in"),
                                               " ", described));
    }
    expected.erase(it);
  }
  if (!expected.empty()) {
    return absl::FailedPreconditionError(cat(manifest_path, ": no parameter ", expected.begin()->first, ", which ",
                                             described, " has"));
  }
  return config;
}

absl::Status check_export_dtype(DType dtype) {
  if (dtype == DType::kF32 || dtype == DType::kBF16) return absl::OkStatus();
  return absl::InvalidArgumentError(cat("--dtype ", dtype_name(dtype), ": consolidation writes fp32 or bf16"));
}

int64_t exported_bytes(const ExportedTensor& t, DType dtype) {
  return shape_numel(t.shape) * static_cast<int64_t>(dtype_size(dtype));
}

absl::StatusOr<CheckpointSource> open_checkpoint_source(const std::string& dir, const std::string& tag) {
  CheckpointSource src{dir, tag, {}};
  if (src.tag.empty()) {
    ZE_ASSIGN_OR_RETURN(const ResumePoint point, resume_point(dir));  // the newest complete checkpoint
    src.tag = point.tag;
  }
  ZE_ASSIGN_OR_RETURN(src.manifest, read_manifest(dir, src.tag));
  return src;
}

absl::Status write_checkpoint_safetensors(const CheckpointSource& src, ShardFiles& files,
                                          const std::vector<ExportedTensor>& tensors, const Json& metadata,
                                          DType dtype, const std::string& out) {
  ZE_RETURN_IF_ERROR(check_export_dtype(dtype));
  Json header = Json::object();
  header["__metadata__"] = metadata;
  int64_t offset = 0;
  for (const ExportedTensor& t : tensors) {
    const Shape s = stored_shape(t);
    const int64_t bytes = exported_bytes(t, dtype);
    header[t.name] = {{"dtype", dtype == DType::kF32 ? "F32" : "BF16"},
                      {"shape", std::vector<int64_t>(s.begin(), s.end())},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // keep the data 8-byte aligned
  const std::string tmp = out + ".tmp";
  ZE_ASSIGN_OR_RETURN(FileWriter w, FileWriter::create(tmp));
  const absl::Status s = [&]() -> absl::Status {
    const uint64_t hlen = h.size();
    ZE_RETURN_IF_ERROR(w.write(&hlen, 8));
    ZE_RETURN_IF_ERROR(w.write(h.data(), h.size()));
    for (const ExportedTensor& t : tensors) {
      const bool part = !t.param_shape.empty();
      ZE_ASSIGN_OR_RETURN(std::vector<float> values,
                          gather_master(src, files, t.param, part ? t.param_shape : t.shape));
      if (part) {
        const int64_t row = shape_numel(t.shape) / t.shape[0];
        ZE_CHECK(t.first_row >= 0 && (t.first_row + t.shape[0]) * row <= static_cast<int64_t>(values.size()))
            << t.name << ": rows [" << t.first_row << ", +" << t.shape[0] << ") of " << t.param;
        values = std::vector<float>(values.begin() + t.first_row * row,
                                    values.begin() + (t.first_row + t.shape[0]) * row);
      }
      if (t.merge) ZE_RETURN_IF_ERROR(merge_lora(src, files, t, values));
      if (t.transposed && t.shape.size() == 2) values = transposed(values, t.shape[0], t.shape[1]);
      if (dtype == DType::kF32) {
        ZE_RETURN_IF_ERROR(w.write(values.data(), values.size() * 4));
      } else {
        std::vector<uint16_t> b(values.size());
        for (size_t i = 0; i < values.size(); ++i) b[i] = float_to_bf16(values[i]);
        ZE_RETURN_IF_ERROR(w.write(b.data(), b.size() * 2));
      }
    }
    ZE_RETURN_IF_ERROR(w.close());
    return rename_path(tmp, out);
  }();
  if (!s.ok()) std::remove(tmp.c_str());
  return s;
}

absl::Status consolidate_to_safetensors(const std::string& dir, const std::string& tag, const std::string& out,
                                        DType dtype) {
  ZE_RETURN_IF_ERROR(check_export_dtype(dtype));
  ZE_ASSIGN_OR_RETURN(const CheckpointSource src, open_checkpoint_source(dir, tag));
  const Manifest& m = src.manifest;
  std::vector<ExportedTensor> tensors;
  for (const auto& [name, shape] : m.parameters) tensors.push_back({name, name, shape, is_gpt2_conv1d_weight(name)});
  const Json metadata = {{"format", "pt"}, {"layout", "gpt2-conv1d"}, {"source", "zeroengine"},
                         {"checkpoint", src.tag}, {"global_step", std::to_string(m.progress.global_step)}};
  ShardFiles files(m, src.tag_dir());
  return write_checkpoint_safetensors(src, files, tensors, metadata, dtype, out);
}

}  // namespace zero
