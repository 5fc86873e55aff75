// safetensors export and import; see safetensors.h.
#include "runtime/checkpoint/safetensors.h"

#include <cstring>

#include "core/status.h"
#include "core/strings.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/file_io.h"
#include "zero/state_buffers.h"

namespace zero {

namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// [rows, cols] -> [cols, rows]
std::vector<float> transposed(const std::vector<float>& v, int64_t rows, int64_t cols) {
  std::vector<float> t(v.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = v[r * cols + c];
  return t;
}

Shape stored_shape(const std::string& name, const Shape& shape) {
  if (is_gpt2_conv1d_weight(name) && shape.size() == 2) return {shape[1], shape[0]};
  return shape;
}

}  // namespace

bool is_gpt2_conv1d_weight(const std::string& name) {
  for (const char* s : {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"})
    if (ends_with(name, s)) return true;
  return false;
}

absl::Status consolidate_to_safetensors(const std::string& dir, const std::string& tag_in, const std::string& out,
                                        DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16) {
    return absl::InvalidArgumentError(cat("--dtype ", dtype_name(dtype), ": consolidation writes fp32 or bf16"));
  }
  std::string tag = tag_in;
  if (tag.empty()) {
    ZE_ASSIGN_OR_RETURN(const ResumePoint point, resume_point(dir));  // the newest complete checkpoint
    tag = point.tag;
  }
  ZE_ASSIGN_OR_RETURN(Manifest m, read_manifest(dir, tag));
  const size_t elem = dtype_size(dtype);
  Json header = Json::object();
  header["__metadata__"] = {{"format", "pt"}, {"layout", "gpt2-conv1d"}, {"source", "zeroengine"},
                            {"checkpoint", tag}, {"global_step", std::to_string(m.progress.global_step)}};
  int64_t offset = 0;
  for (const auto& [name, shape] : m.parameters) {
    const Shape s = stored_shape(name, shape);
    const int64_t bytes = shape_numel(shape) * static_cast<int64_t>(elem);
    header[name] = {{"dtype", dtype == DType::kF32 ? "F32" : "BF16"},
                    {"shape", std::vector<int64_t>(s.begin(), s.end())},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // keep the data 8-byte aligned
  const std::string tmp = out + ".tmp";
  ZE_ASSIGN_OR_RETURN(FileWriter w, FileWriter::create(tmp));
  auto fail = [&](absl::Status s) {
    std::remove(tmp.c_str());
    return s;
  };
  const uint64_t hlen = h.size();
  absl::Status s = w.write(&hlen, 8);
  if (s.ok()) s = w.write(h.data(), h.size());
  if (!s.ok()) return fail(s);

  ShardFiles files(m, dir + "/" + tag);
  for (const auto& [name, shape] : m.parameters) {
    // One tensor at a time: gather its segments from the shards.
    const std::string key = Manifest::key("master", name);
    auto it = m.tensors.find(key);
    if (it == m.tensors.end()) return fail(absl::DataLossError(cat("checkpoint ", dir, "/", tag, " has no tensor ", key)));
    std::vector<float> values(static_cast<size_t>(shape_numel(shape)));
    for (const CheckpointSegment& seg : it->second.segments) {
      absl::StatusOr<const FileReader*> file = files.get(seg.file);
      if (!file.ok()) return fail(file.status());
      s = read_segment(**file, seg, key, [&](const float* data, int64_t first, int64_t n) {
        std::memcpy(values.data() + first, data, static_cast<size_t>(n) * 4);
        return absl::OkStatus();
      });
      if (!s.ok()) return fail(s);
    }
    if (is_gpt2_conv1d_weight(name) && shape.size() == 2) values = transposed(values, shape[0], shape[1]);
    if (dtype == DType::kF32) {
      s = w.write(values.data(), values.size() * 4);
    } else {
      std::vector<uint16_t> b(values.size());
      for (size_t i = 0; i < values.size(); ++i) b[i] = float_to_bf16(values[i]);
      s = w.write(b.data(), b.size() * 2);
    }
    if (!s.ok()) return fail(s);
  }
  s = w.close();
  if (s.ok()) s = rename_path(tmp, out);
  if (!s.ok()) return fail(s);
  return absl::OkStatus();
}

absl::Status load_safetensors_weights(Engine& engine, const std::string& path) {
  absl::Status local = [&]() -> absl::Status {
    ZE_ASSIGN_OR_RETURN(FileReader f, FileReader::open(path));
    uint64_t hlen = 0;
    if (f.size() < 8) return absl::DataLossError(cat(path, ": too short to be a safetensors file"));
    ZE_RETURN_IF_ERROR(f.read_at(0, &hlen, 8));
    if (hlen > static_cast<uint64_t>(f.size()) - 8 || hlen > (100u << 20)) {
      return absl::DataLossError(cat(path, ": header length ", hlen, " does not fit the file (not safetensors?)"));
    }
    std::string text(hlen, '\0');
    ZE_RETURN_IF_ERROR(f.read_at(8, text.data(), hlen));
    ZE_ASSIGN_OR_RETURN(Json header, parse_json_text(text, path));
    const bool conv1d = header.contains("__metadata__") &&
                        header["__metadata__"].value("layout", "") == "gpt2-conv1d";
    const int64_t data_start = 8 + static_cast<int64_t>(hlen);
    ModelState& state = engine.state();
    for (const StateRange& r : state.held_ranges()) {
      const std::string& name = r.param->name();
      if (!header.contains(name)) return absl::NotFoundError(cat(path, ": no tensor ", name));
      const Json& t = header[name];
      const std::string dt = t.value("dtype", "");
      const std::vector<int64_t> s = t.at("shape").get<std::vector<int64_t>>();
      // A tensor-parallel slice reads its elements out of the whole tensor.
      const Shape& whole = r.param->slice() ? r.param->slice()->global_shape : r.param->shape();
      const Shape want = conv1d ? stored_shape(name, whole) : whole;
      if (Shape(s.begin(), s.end()) != want) {
        return absl::FailedPreconditionError(cat(path, ": tensor ", name, " has shape ", shape_string(Shape(s.begin(), s.end())),
                                                 ", the model needs ", shape_string(want)));
      }
      const int64_t n = shape_numel(want);
      const int64_t begin = t.at("data_offsets")[0].get<int64_t>(), end = t.at("data_offsets")[1].get<int64_t>();
      const int64_t elem = dt == "F32" ? 4 : (dt == "BF16" || dt == "F16") ? 2 : 0;
      if (elem == 0) return absl::InvalidArgumentError(cat(path, ": tensor ", name, " has dtype ", dt, " (F32, BF16, F16 read)"));
      if (end - begin != n * elem) return absl::DataLossError(cat(path, ": tensor ", name, " byte range does not match its shape"));
      std::vector<char> raw(static_cast<size_t>(end - begin));
      ZE_RETURN_IF_ERROR(f.read_at(data_start + begin, raw.data(), raw.size()));
      std::vector<float> v(static_cast<size_t>(n));
      const DType src = dt == "F32" ? DType::kF32 : dt == "BF16" ? DType::kBF16 : DType::kF16;
      for (int64_t i = 0; i < n; ++i) v[i] = load_as_float(raw.data(), src, static_cast<size_t>(i));
      if (conv1d && is_gpt2_conv1d_weight(name) && want.size() == 2) v = transposed(v, want[0], want[1]);
      if (r.param->slice()) {
        std::vector<float> mine(static_cast<size_t>(r.end - r.begin));
        for (int64_t i = r.begin; i < r.end; ++i) mine[i - r.begin] = v[r.param->global_index(i)];
        v = std::move(mine);
      } else {
        v = std::vector<float>(v.begin() + r.begin, v.begin() + r.end);
      }
      ZE_RETURN_IF_ERROR(state.state_store().write(0, r.offset, v));
    }
    return state.state_store().flush();
  }();
  ZE_ASSIGN_OR_RETURN(double failed, engine.mesh().world().all_reduce_max(local.ok() ? 0.0 : 1.0));
  if (!local.ok()) return local;
  if (failed > 0) return absl::AbortedError(cat("reading ", path, ": another rank failed"));
  return engine.state().refresh_parameters();
}

}  // namespace zero
