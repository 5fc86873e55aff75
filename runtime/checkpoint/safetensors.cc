// Writing checkpoints as safetensors files; see safetensors.h.
#include "runtime/checkpoint/safetensors.h"

#include <cstdio>
#include <cstring>

#include "core/status.h"
#include "core/strings.h"
#include "runtime/checkpoint/file_io.h"

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

}  // namespace

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
      ZE_ASSIGN_OR_RETURN(std::vector<float> values, gather_master(src, files, t.param, t.shape));
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
