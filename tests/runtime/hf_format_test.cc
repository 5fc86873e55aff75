// Hugging Face's model directories (config.json and names: hf_config_test.cc).
//  * the directory reader on files written here: one file, shards with an
//    index, F32/BF16/F16 converted exactly, chunked reads; a truncated shard,
//    an index naming a missing file, a tensor of the wrong shape, a missing
//    tensor and one that is not the model's are refused by name; so are
//    overlapping byte ranges (both tensors named) and named pipes in place
//    of model.safetensors, its index or a shard (without blocking);
//  * a GPT-2 file written here by Hugging Face's rules (transformer. names,
//    Conv1D [in, out]) loads into an engine with every weight where the
//    rules put it;
//  * a checkpoint consolidated to a Hugging Face directory (one file, or
//    shards whose index maps every tensor once) reloads bit for bit; an
//    existing non-empty directory is refused and left alone; a checkpoint
//    without a model description is refused with the fix; the tokenizer
//    files a checkpoint carries come back byte for byte beside a
//    generation_config.json, and a changed one is refused by name.
//  * the same for a trained Llama with grouped-query attention, its head
//    tied or not (model. names, lm_head.weight only when untied).
// Not covered here: multi-rank loads of tensor-parallel slices and ZeRO
// partitions (one rank holds whole tensors).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "graph/gpt.h"
#include "kernels/cpu/cpu_backend.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/hf_weights.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/config/hf_config.h"
#include "runtime/engine/engine.h"
#include "tests/testing/hf_files.h"
#include "tests/testing/test_files.h"
#include "tests/testing/trained_gpt.h"

namespace zero {
namespace {

namespace fs = std::filesystem;

const GptConfig kModel{.n_layer = 2, .n_head = 2, .d_model = 16, .vocab_size = 41, .seq_len = 8};

std::string fresh_dir(const std::string& name) {
  const std::string d = testing::fresh_test_path(name);
  fs::create_directories(d);
  return d;
}

#define EXPECT_MESSAGE_HAS(status, text) \
  EXPECT_NE(std::string((status).message()).find(text), std::string::npos) << (status)

// ---------------------------------------------------------------- the reader

struct StTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

template <typename T>
std::string raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

void write_safetensors(const std::string& path, const std::vector<StTensor>& tensors, const Json& meta = Json()) {
  Json h = Json::object();
  if (!meta.is_null()) h["__metadata__"] = meta;
  int64_t off = 0;
  for (const StTensor& t : tensors) {
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + static_cast<int64_t>(t.bytes.size())}}};
    off += static_cast<int64_t>(t.bytes.size());
  }
  const std::string text = h.dump();
  const uint64_t n = text.size();
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << text;
  for (const StTensor& t : tensors) f << t.bytes;
}

std::vector<float> read_all(const HfWeights& w, const std::string& name, int64_t max_read_bytes = 64 << 20) {
  const HfTensor& t = w.tensors().at(name);
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  std::vector<float> out(static_cast<size_t>(n));
  EXPECT_TRUE(w.read(t, 0, n, out.data(), max_read_bytes).ok());
  return out;
}

TEST(HfWeightsTest, ReadsOneFileAndConvertsEachDtypeExactly) {
  const std::string dir = fresh_dir("st");
  const std::vector<float> f32 = {1.5f, -2.25f, 3e-8f, 65504.0f, -0.0f, 7.0f};
  std::vector<uint16_t> bf16, f16;
  for (float v : f32) bf16.push_back(float_to_bf16(v * 3.3f)), f16.push_back(float_to_fp16(v / 7.0f));
  write_safetensors(dir + "/x.safetensors", {{"a", "F32", {2, 3}, raw(f32)},
                                             {"b", "BF16", {6}, raw(bf16)},
                                             {"c", "F16", {3, 2}, raw(f16)}},
                    {{"format", "pt"}});
  absl::StatusOr<HfWeights> w = HfWeights::open(dir + "/x.safetensors");
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->tensors().size(), 3u);
  EXPECT_EQ(w->metadata(0).value("format", ""), "pt");
  EXPECT_EQ(w->tensors().at("c").shape, (Shape{3, 2}));
  EXPECT_EQ(read_all(*w, "a"), f32);
  for (int64_t chunk : {int64_t{64} << 20, int64_t{2}, int64_t{6}}) {  // 1 and 3 elements a read
    const std::vector<float> b = read_all(*w, "b", chunk), c = read_all(*w, "c", chunk);
    for (size_t i = 0; i < f32.size(); ++i) {
      EXPECT_EQ(b[i], bf16_to_float(bf16[i])) << i;
      EXPECT_EQ(c[i], fp16_to_float(f16[i])) << i;
    }
  }
  // A directory with model.safetensors reads the same.
  fs::rename(dir + "/x.safetensors", dir + "/model.safetensors");
  w = HfWeights::open(dir);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(read_all(*w, "a"), f32);
}

TEST(HfWeightsTest, ReadsShardsThroughTheIndexAndRefusesBrokenOnes) {
  const std::string dir = fresh_dir("sharded");
  const std::vector<float> a = {1, 2, 3, 4}, b = {5, 6}, c = {7, 8, 9};
  write_safetensors(dir + "/model-00001-of-00002.safetensors", {{"a", "F32", {2, 2}, raw(a)}, {"b", "F32", {2}, raw(b)}});
  write_safetensors(dir + "/model-00002-of-00002.safetensors", {{"c", "F32", {3}, raw(c)}});
  Json index = {{"metadata", {{"total_size", 36}}},
                {"weight_map", {{"a", "model-00001-of-00002.safetensors"},
                                {"b", "model-00001-of-00002.safetensors"},
                                {"c", "model-00002-of-00002.safetensors"}}}};
  auto write_index = [&](const Json& j) { std::ofstream(dir + "/model.safetensors.index.json") << j.dump(); };
  write_index(index);
  absl::StatusOr<HfWeights> w = HfWeights::open(dir);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->files().size(), 2u);
  EXPECT_EQ(read_all(*w, "a"), a);
  EXPECT_EQ(read_all(*w, "c"), c);
  EXPECT_EQ(w->files()[static_cast<size_t>(w->tensors().at("c").file)], dir + "/model-00002-of-00002.safetensors");

  // A tensor the index puts in the wrong shard.
  Json wrong = index;
  wrong["weight_map"]["c"] = "model-00001-of-00002.safetensors";
  write_index(wrong);
  absl::Status s = HfWeights::open(dir).status();
  EXPECT_MESSAGE_HAS(s, "puts tensor c in " + dir + "/model-00001-of-00002.safetensors, whose header has no such tensor");

  // An index naming a file that is not there.
  wrong = index;
  wrong["weight_map"]["c"] = "model-00003-of-00003.safetensors";
  write_index(wrong);
  s = HfWeights::open(dir).status();
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_MESSAGE_HAS(s, "puts tensor c in model-00003-of-00003.safetensors, which is missing");

  // A truncated shard: the tensor whose bytes are cut is named.
  write_index(index);
  fs::resize_file(dir + "/model-00002-of-00002.safetensors", fs::file_size(dir + "/model-00002-of-00002.safetensors") - 2);
  s = HfWeights::open(dir).status();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_MESSAGE_HAS(s, dir + "/model-00002-of-00002.safetensors: tensor c: byte range [0, 12) ends past the file's 10 bytes");
  fs::resize_file(dir + "/model-00002-of-00002.safetensors", 12);
  s = HfWeights::open(dir).status();
  EXPECT_MESSAGE_HAS(s, "model-00002-of-00002.safetensors: header length");

  // A byte range that does not match the shape x dtype.
  write_safetensors(dir + "/model-00002-of-00002.safetensors", {{"c", "F32", {4}, raw(c)}});
  s = HfWeights::open(dir).status();
  EXPECT_MESSAGE_HAS(s, "tensor c: byte range [0, 12) holds 12 bytes, its shape [4] of F32 needs 16");

  // Neither file nor index.
  const std::string empty = fresh_dir("empty");
  s = HfWeights::open(empty).status();
  EXPECT_MESSAGE_HAS(s, "is not a Hugging Face model directory");
}

// A header as given (data_offsets and all), then `data_bytes` zero bytes.
void write_raw_safetensors(const std::string& path, const Json& header, size_t data_bytes) {
  const std::string text = header.dump();
  const uint64_t n = text.size();
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << text << std::string(data_bytes, '\0');
}

TEST(HfWeightsTest, OverlappingByteRangesAreRefusedNamingBothTensors) {
  const std::string dir = fresh_dir("overlap");
  const std::string file = dir + "/model.safetensors";
  auto entry = [](int64_t begin, int64_t end) {
    return Json{{"dtype", "F32"}, {"shape", {(end - begin) / 4}}, {"data_offsets", {begin, end}}};
  };
  write_raw_safetensors(file, {{"first", entry(0, 16)}, {"second", entry(8, 24)}}, 24);
  absl::Status s = HfWeights::open(dir).status();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_MESSAGE_HAS(s, file + ": tensors first (bytes [0, 16)) and second (bytes [8, 24)) overlap");

  // One long range over two later ones: the first it meets is named; an
  // empty tensor inside it shares no bytes and is not.
  write_raw_safetensors(file, {{"a.whole", entry(0, 32)}, {"b.empty", entry(4, 4)}, {"c.part", entry(16, 24)},
                               {"d.part", entry(24, 32)}},
                        32);
  s = HfWeights::open(dir).status();
  EXPECT_MESSAGE_HAS(s, "tensors a.whole (bytes [0, 32)) and c.part (bytes [16, 24)) overlap");

  // The same ranges side by side (and an empty one at a boundary) load.
  write_raw_safetensors(file, {{"a", entry(0, 16)}, {"b", entry(16, 16)}, {"c", entry(16, 24)}}, 24);
  EXPECT_TRUE(HfWeights::open(dir).ok()) << HfWeights::open(dir).status();
}

// Ends the test process (SIGALRM's default action) if it is still running
// after `seconds`: a loader that blocks in open() on a named pipe fails the
// test instead of hanging it.
struct Deadline {
  explicit Deadline(unsigned seconds) { alarm(seconds); }
  ~Deadline() { alarm(0); }
};

TEST(HfWeightsTest, NamedPipesAreRefusedWithoutBlocking) {
  const Deadline deadline(20);
  auto fifo = [](const std::string& path) { ASSERT_EQ(mkfifo(path.c_str(), 0600), 0) << path; };
  const std::vector<float> a = {1, 2};

  // model.safetensors.
  const std::string single = fresh_dir("fifo_single");
  fifo(single + "/model.safetensors");
  absl::Status s = HfWeights::open(single).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_MESSAGE_HAS(s, single + "/model.safetensors: a named pipe (FIFO), not a regular file");

  // model.safetensors.index.json.
  const std::string indexed = fresh_dir("fifo_index");
  write_safetensors(indexed + "/model-00001-of-00001.safetensors", {{"a", "F32", {2}, raw(a)}});
  fifo(indexed + "/model.safetensors.index.json");
  s = HfWeights::open(indexed).status();
  EXPECT_MESSAGE_HAS(s, indexed + "/model.safetensors.index.json: a named pipe (FIFO), not a regular file");

  // A shard the index names.
  const std::string shard = fresh_dir("fifo_shard");
  fifo(shard + "/model-00001-of-00001.safetensors");
  std::ofstream(shard + "/model.safetensors.index.json")
      << Json{{"weight_map", {{"a", "model-00001-of-00001.safetensors"}}}}.dump();
  s = HfWeights::open(shard).status();
  EXPECT_MESSAGE_HAS(s, shard + "/model-00001-of-00001.safetensors: a named pipe (FIFO), not a regular file");

  // The path itself.
  s = HfWeights::open(single + "/model.safetensors").status();
  EXPECT_MESSAGE_HAS(s, single + "/model.safetensors: a named pipe (FIFO), not a regular file");
}

// ---------------------------------------------------------------- loading into an engine

// kModel trained 3 steps by default (tests/testing/trained_gpt.h).
struct Trained : testing::TrainedGpt {
  explicit Trained(const GptConfig& model = kModel, int steps = 3, uint64_t seed = EngineConfig{}.seed)
      : TrainedGpt(model, steps, seed) {}
};

// Parameter k's value at element e of our [out, in] layout.
float synthetic(size_t k, int64_t e) { return static_cast<float>(static_cast<int64_t>(k) * 1000 + e) / 1024.0f; }

// kModel's weights as Hugging Face stores them (transformer. names, Conv1D
// [in, out]), each parameter's values synthetic(k, e); then `extra`.
std::vector<StTensor> hf_gpt2_tensors(const GptConfig& c) {
  std::vector<StTensor> out;
  const auto shapes = gpt_parameter_shapes(c);
  for (size_t k = 0; k < shapes.size(); ++k) {
    const auto& [name, shape] = shapes[k];
    const bool t = hf_stores_transposed(c, name);
    std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
    for (int64_t e = 0; e < static_cast<int64_t>(v.size()); ++e) {
      // ours (o, i) = e -> stored (i, o)
      const int64_t at = t ? (e % shape[1]) * shape[0] + e / shape[1] : e;
      v[static_cast<size_t>(at)] = synthetic(k, e);
    }
    std::vector<int64_t> s(shape.begin(), shape.end());
    if (t) std::swap(s[0], s[1]);
    out.push_back({hf_tensor_name(c, name), "F32", s, raw(v)});
  }
  return out;
}

TEST(HfLoadTest, AHuggingFaceGpt2FileLoadsEveryWeightWhereItsRulesPutIt) {
  const std::string dir = fresh_dir("hf");
  std::vector<StTensor> tensors = hf_gpt2_tensors(kModel);
  // What transformers saves besides the weights: the mask buffer, and a tied head.
  tensors.push_back({"transformer.h.0.attn.bias", "F32", {1, 1, 8, 8}, raw(std::vector<float>(64, 1.0f))});
  tensors.push_back({"lm_head.weight", "F32", {41, 16}, raw(std::vector<float>(41 * 16, 0.0f))});
  write_safetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}});
  Trained b(kModel, 0);
  // Small reads: chunking and staging of 7 values at a time.
  absl::Status s = load_hf_weights(*b.engine, kModel, dir, 28);
  ASSERT_TRUE(s.ok()) << s;
  const auto shapes = gpt_parameter_shapes(kModel);
  for (size_t k = 0; k < shapes.size(); ++k) {
    const std::vector<float> got = b.weights(shapes[k].first);
    ASSERT_EQ(got.size(), static_cast<size_t>(shape_numel(shapes[k].second)));
    for (size_t e = 0; e < got.size(); ++e) ASSERT_EQ(got[e], synthetic(k, static_cast<int64_t>(e))) << shapes[k].first << "[" << e << "]";
  }
  // The model-dtype parameters follow the master weights.
  for (Parameter* p : b.engine->model().parameters()) {
    if (p->name() != "wpe.weight") continue;
    EXPECT_EQ(load_as_float(p->data.data(), p->data.dtype(), 3), synthetic(1, 3));
  }
}

TEST(HfLoadTest, WrongMissingAndForeignTensorsAreRefusedByName) {
  const std::string dir = fresh_dir("hf");
  Trained b(kModel, 0);
  const std::vector<float> before = b.weights("wte.weight");
  auto load_with = [&](const std::function<void(std::vector<StTensor>&)>& edit) {
    std::vector<StTensor> tensors = hf_gpt2_tensors(kModel);
    edit(tensors);
    write_safetensors(dir + "/model.safetensors", tensors);
    return load_hf_weights(*b.engine, kModel, dir);
  };
  absl::Status s = load_with([](std::vector<StTensor>& t) {
    for (StTensor& x : t)
      if (x.name == "transformer.wpe.weight") x.shape = {7, 16}, x.bytes.resize(7 * 16 * 4);
  });
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_MESSAGE_HAS(s, "tensor transformer.wpe.weight has shape [7, 16]");
  EXPECT_MESSAGE_HAS(s, "needs [8, 16]");
  s = load_with([](std::vector<StTensor>& t) {
    t.push_back({"transformer.h.0.attn.rotary.weight", "F32", {2}, raw(std::vector<float>{1, 2})});
  });
  EXPECT_MESSAGE_HAS(s, "tensor transformer.h.0.attn.rotary.weight [2] is not part of the model");
  s = load_with([](std::vector<StTensor>& t) {
    t.push_back({"transformer.h.2.ln_1.weight", "F32", {16}, raw(std::vector<float>(16))});
  });
  EXPECT_MESSAGE_HAS(s, "tensor transformer.h.2.ln_1.weight [16] is not part of the model");
  s = load_with([](std::vector<StTensor>& t) {
    t.erase(std::remove_if(t.begin(), t.end(), [](const StTensor& x) { return x.name == "transformer.ln_f.bias"; }), t.end());
  });
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_MESSAGE_HAS(s, "no tensor transformer.ln_f.bias");
  s = load_with([](std::vector<StTensor>& t) { t[0].dtype = "I32"; });
  EXPECT_MESSAGE_HAS(s, "tensor transformer.wte.weight has dtype I32");
  // Nothing was written by any refused load.
  EXPECT_EQ(b.weights("wte.weight"), before);
  // A config that is not the engine's.
  GptConfig other = kModel;
  other.vocab_size = 40;
  write_safetensors(dir + "/model.safetensors", hf_gpt2_tensors(other));
  s = load_hf_weights(*b.engine, other, dir);
  EXPECT_MESSAGE_HAS(s, "the engine's parameter wte.weight [41, 16] is [40, 16] in the model config");
}

// ---------------------------------------------------------------- consolidation

std::string saved_checkpoint(Trained& a, const std::string& dir, bool with_model = true,
                             const GptConfig& model = kModel) {
  SaveOptions so{dir, "", 0};
  if (with_model) so.model = hf_config_json(model, DType::kF32);
  EXPECT_TRUE(save_checkpoint(*a.engine, so).ok());
  return dir;
}

void expect_weights_equal(Trained& a, Trained& b, DType dt) {
  for (Parameter* p : a.engine->model().parameters()) {
    const std::vector<float> live = a.engine->master_values(*p);
    const std::vector<float> reloaded = b.weights(p->name());
    ASSERT_EQ(live.size(), reloaded.size());
    for (size_t i = 0; i < live.size(); ++i) {
      const float want = dt == DType::kF32 ? live[i] : bf16_to_float(float_to_bf16(live[i]));
      ASSERT_EQ(reloaded[i], want) << p->name() << "[" << i << "] " << dtype_name(dt);
    }
  }
}

Json safetensors_header(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  std::string text(n, '\0');
  f.read(text.data(), static_cast<std::streamsize>(n));
  return Json::parse(text);
}

TEST(HfConsolidateTest, OneFileReloadsBitForBit) {
  Trained a;
  const std::string root = fresh_dir("root");
  const std::string ckpt = saved_checkpoint(a, root + "/ckpt");
  EXPECT_FALSE(read_manifest(ckpt, "global_step3").value().model.is_null());
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const std::string out = root + "/hf_" + std::string(dtype_name(dt));
    absl::Status s = consolidate_to_hf(ckpt, "", out, dt, int64_t{5} << 30);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_TRUE(fs::exists(out + "/model.safetensors"));
    EXPECT_FALSE(fs::exists(out + "/model.safetensors.index.json"));
    const Json config = load_json_file(out + "/config.json").value();
    EXPECT_EQ(config["torch_dtype"], dt == DType::kF32 ? "float32" : "bfloat16");
    testing::expect_same_model(gpt_config_from_hf(config, "config.json").value(), kModel);
    const Json header = safetensors_header(out + "/model.safetensors");
    EXPECT_EQ(header["__metadata__"], Json({{"format", "pt"}}));
    EXPECT_EQ(header["transformer.h.0.attn.c_attn.weight"]["shape"], Json({16, 48}));  // Conv1D [in, out]
    EXPECT_EQ(header["transformer.h.0.attn.c_attn.weight"]["dtype"], dt == DType::kF32 ? "F32" : "BF16");
    EXPECT_FALSE(header.contains("lm_head.weight"));  // tied: not stored
    EXPECT_EQ(header.size(), 1 + gpt_parameter_shapes(kModel).size());
    Trained b(kModel, 0);
    s = load_hf_weights(*b.engine, kModel, out);
    ASSERT_TRUE(s.ok()) << s;
    expect_weights_equal(a, b, dt);
  }
  // Our single-file export (own names, "gpt2-conv1d") still loads.
  const std::string file = root + "/old.safetensors";
  ASSERT_TRUE(consolidate_to_safetensors(ckpt, "", file, DType::kF32).ok());
  Trained c(kModel, 0);
  absl::Status s = load_hf_weights(*c.engine, kModel, file);
  ASSERT_TRUE(s.ok()) << s;
  expect_weights_equal(a, c, DType::kF32);
}

TEST(HfConsolidateTest, ShardsAndTheirIndexCoverEveryTensorOnce) {
  Trained a;
  const std::string root = fresh_dir("root");
  const std::string ckpt = saved_checkpoint(a, root + "/ckpt");
  const std::string out = root + "/hf";
  constexpr int64_t kMaxShard = 4096;  // wte alone is 2624 bytes; c_fc 4096
  absl::Status s = consolidate_to_hf(ckpt, "", out, DType::kF32, kMaxShard);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_FALSE(fs::exists(out + "/model.safetensors"));
  const Json index = load_json_file(out + "/model.safetensors.index.json").value();
  const Json& map = index.at("weight_map");
  std::set<std::string> want;
  int64_t total = 0;
  for (const auto& [name, shape] : gpt_parameter_shapes(kModel)) {
    want.insert(hf_tensor_name(kModel, name));
    total += shape_numel(shape) * 4;
  }
  std::set<std::string> mapped, files;
  for (auto it = map.begin(); it != map.end(); ++it) {
    EXPECT_TRUE(mapped.insert(it.key()).second) << it.key();
    files.insert(it.value().get<std::string>());
  }
  EXPECT_EQ(mapped, want);
  EXPECT_EQ(index.at("metadata").at("total_size").get<int64_t>(), total);
  ASSERT_GT(files.size(), 2u);
  std::set<std::string> names;
  for (size_t i = 1; i <= files.size(); ++i) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", i, files.size());
    names.insert(buf);
  }
  EXPECT_EQ(files, names);
  std::set<std::string> in_shards;
  for (const std::string& f : files) {
    const Json header = safetensors_header(out + "/" + f);
    int64_t bytes = 0;
    for (auto it = header.begin(); it != header.end(); ++it) {
      if (it.key() == "__metadata__") continue;
      EXPECT_EQ(map.at(it.key()), f);
      EXPECT_TRUE(in_shards.insert(it.key()).second) << it.key();
      bytes += it.value()["data_offsets"][1].get<int64_t>() - it.value()["data_offsets"][0].get<int64_t>();
    }
    EXPECT_TRUE(bytes <= kMaxShard || header.size() == 2) << f << ": " << bytes << " bytes";
  }
  EXPECT_EQ(in_shards, want);
  Trained b(kModel, 0);
  s = load_hf_weights(*b.engine, kModel, out, 40);
  ASSERT_TRUE(s.ok()) << s;
  expect_weights_equal(a, b, DType::kF32);
}

TEST(HfConsolidateTest, AnExistingDirectoryAndAMissingDescriptionAreRefused) {
  Trained a;
  const std::string root = fresh_dir("root");
  const std::string ckpt = saved_checkpoint(a, root + "/ckpt");
  const std::string out = root + "/taken";
  fs::create_directories(out);
  std::ofstream(out + "/mine.txt") << "keep me";
  absl::Status s = consolidate_to_hf(ckpt, "", out, DType::kF32, int64_t{1} << 30);
  EXPECT_TRUE(absl::IsAlreadyExists(s)) << s;
  EXPECT_MESSAGE_HAS(s, out + " exists and is not empty");
  EXPECT_EQ(fs::file_size(out + "/mine.txt"), 7u);
  EXPECT_EQ(std::distance(fs::directory_iterator(out), fs::directory_iterator()), 1);
  // An empty one is filled; no temporary directory is left beside it.
  const std::string empty = root + "/empty";
  fs::create_directories(empty);
  s = consolidate_to_hf(ckpt, "", empty, DType::kF32, int64_t{1} << 30);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(fs::exists(empty + "/config.json"));
  for (const auto& e : fs::directory_iterator(root))
    EXPECT_EQ(e.path().filename().string().find(".partial"), std::string::npos) << e.path();

  Trained c;
  const std::string bare = saved_checkpoint(c, root + "/bare", /*with_model=*/false);
  EXPECT_TRUE(read_manifest(bare, "global_step3").value().model.is_null());
  s = consolidate_to_hf(bare, "", root + "/none", DType::kF32, int64_t{1} << 30);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_MESSAGE_HAS(s, "has no model description");
  EXPECT_MESSAGE_HAS(s, "--format safetensors");
  EXPECT_FALSE(fs::exists(root + "/none"));
}

// The model's own files travel in the checkpoint (listed with size and
// CRC-32C) and come out of the export byte for byte; where none is a
// generation_config.json, one is written from config.json's token ids. A
// file changed after the save is refused by name, and nothing is exported.
TEST(HfConsolidateTest, TokenizerFilesComeBackByteForByteWithAGenerationConfig) {
  Trained a;
  const std::string root = fresh_dir("root");
  Json source = hf_config_json(kModel, DType::kF32);
  source["bos_token_id"] = 7;
  source["eos_token_id"] = Json::array({8, 9});
  std::string binary;
  for (int i = 0; i < 512; ++i) binary += static_cast<char>(i * 37 % 256);  // every byte, NULs too
  const std::vector<ModelFile> files = {{"tokenizer.json", R"({"version": "1.0", "model": {"type": "BPE"}})"},
                                        {"tokenizer.model", binary},
                                        {"special_tokens_map.json", R"({"eos_token": "<|end|>"})"}};
  SaveOptions so{root + "/ckpt", "", 0};
  so.model = hf_config_json(kModel, DType::kF32, source);
  so.model_files = files;
  ASSERT_TRUE(save_checkpoint(*a.engine, so).ok());
  const Manifest m = read_manifest(root + "/ckpt", "global_step3").value();
  ASSERT_EQ(m.model_files.size(), 3u);
  EXPECT_EQ(m.model_files[1].name, "tokenizer.model");
  EXPECT_EQ(m.model_files[1].bytes, 512);

  const std::string out = root + "/hf";
  absl::Status s = consolidate_to_hf(root + "/ckpt", "", out, DType::kF32, int64_t{1} << 30);
  ASSERT_TRUE(s.ok()) << s;
  for (const ModelFile& f : files) EXPECT_EQ(testing::read_file(out + "/" + f.name), f.contents) << f.name;
  const Json config = load_json_file(out + "/config.json").value();
  EXPECT_EQ(config["bos_token_id"], 7);
  EXPECT_EQ(config["eos_token_id"], Json::array({8, 9}));
  const Json generation = load_json_file(out + "/generation_config.json").value();
  EXPECT_EQ(generation["bos_token_id"], 7);
  EXPECT_EQ(generation["eos_token_id"], Json::array({8, 9}));
  EXPECT_FALSE(generation.contains("pad_token_id"));

  // The source's own generation_config.json is the one written.
  Trained b;
  so.dir = root + "/ckpt2";
  so.model_files.push_back({"generation_config.json", R"({"do_sample": true, "temperature": 0.6})"});
  ASSERT_TRUE(save_checkpoint(*b.engine, so).ok());
  s = consolidate_to_hf(so.dir, "", root + "/hf2", DType::kF32, int64_t{1} << 30);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(testing::read_file(root + "/hf2/generation_config.json"), R"({"do_sample": true, "temperature": 0.6})");

  // One byte of tokenizer.json changed: refused naming it, no export made.
  std::string changed = files[0].contents;
  changed[3] = 'X';
  std::ofstream(root + "/ckpt/global_step3/tokenizer.json", std::ios::binary | std::ios::trunc) << changed;
  s = consolidate_to_hf(root + "/ckpt", "", root + "/hf3", DType::kF32, int64_t{1} << 30);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_MESSAGE_HAS(s, "model file tokenizer.json has ");
  EXPECT_FALSE(fs::exists(root + "/hf3"));
}

// Model file names are plain names beside the shards, none of the
// checkpoint's own: a save given another is refused, and so is a manifest
// listing one (a checksummed manifest cannot be edited to say it, but a bug
// could write it).
TEST(HfConsolidateTest, AModelFileThatIsNotAPlainNameIsRefused) {
  Trained a;
  const std::string root = fresh_dir("root");
  SaveOptions so{root + "/ckpt", "", 0};
  so.model_files = {{"../escape.json", "{}"}};
  const absl::StatusOr<std::string> saved = save_checkpoint(*a.engine, so);
  EXPECT_TRUE(absl::IsInvalidArgument(saved.status())) << saved.status();
  EXPECT_MESSAGE_HAS(saved.status(), "model file \"../escape.json\" is not a plain file name");
  EXPECT_FALSE(fs::exists(root + "/escape.json"));
  EXPECT_FALSE(fs::exists(root + "/ckpt/global_step3"));
  // A manifest that lists one (its checksum recomputed) does not parse.
  so.model_files = {{"tokenizer.json", "{}"}};
  ASSERT_TRUE(save_checkpoint(*a.engine, so).ok());
  Manifest m = read_manifest(root + "/ckpt", "global_step3").value();
  for (const char* name : {"../escape.json", "manifest.json", "rank_00000.shard", ""}) {
    m.model_files[0].name = name;
    const absl::StatusOr<Manifest> back = Manifest::parse(m.to_json(), "manifest.json");
    EXPECT_TRUE(absl::IsDataLoss(back.status())) << name << ": " << back.status();
    EXPECT_MESSAGE_HAS(back.status(), "is not a file name of the tag directory");
  }
}

GptConfig llama_model(bool tied) {
  GptConfig c{.n_layer = 2, .n_head = 4, .d_model = 16, .vocab_size = 41, .seq_len = 8};
  c.arch = ModelArch::kLlama;
  c.n_kv_head = 2;
  c.d_ff = 24;
  c.max_positions = 16;
  c.rope_theta = 500000.0;
  c.norm_eps = 1e-6f;
  c.tie_word_embeddings = tied;
  return c;
}

// A trained Llama (grouped-query attention, tied head or not) through a
// Hugging Face directory into an engine initialised differently.
TEST(HfConsolidateTest, LlamaReloadsBitForBit) {
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    const GptConfig model = llama_model(tied);
    {
      Gpt gpt(model);
      const std::vector<Parameter*> params = gpt.parameters();
      const auto shapes = gpt_parameter_shapes(model);
      ASSERT_EQ(params.size(), shapes.size());
      for (size_t i = 0; i < params.size(); ++i) {
        EXPECT_EQ(params[i]->name(), shapes[i].first);
        EXPECT_EQ(params[i]->shape(), shapes[i].second) << shapes[i].first;
      }
    }
    Trained a(model, 2);
    const std::string root = fresh_dir(tied ? "tied" : "untied");
    const std::string ckpt = saved_checkpoint(a, root + "/ckpt", true, model);
    const std::string out = root + "/hf";
    absl::Status s = consolidate_to_hf(ckpt, "", out, DType::kF32, int64_t{1} << 30);
    ASSERT_TRUE(s.ok()) << s;
    const Json header = safetensors_header(out + "/model.safetensors");
    EXPECT_EQ(header["model.layers.1.self_attn.k_proj.weight"]["shape"], Json({8, 16}));  // [kv heads x 4, C]
    EXPECT_EQ(header["model.layers.0.mlp.down_proj.weight"]["shape"], Json({16, 24}));     // [out, in]
    EXPECT_EQ(header.contains("lm_head.weight"), !tied);
    const Json config = load_json_file(out + "/config.json").value();
    EXPECT_EQ(config["architectures"], Json::array({"LlamaForCausalLM"}));
    testing::expect_same_model(gpt_config_from_hf(config, "config.json").value(), model);
    Trained b(model, 0, /*seed=*/7);
    EXPECT_NE(b.weights("layers.0.self_attn.qkv_proj.weight"), a.weights("layers.0.self_attn.qkv_proj.weight"));
    s = load_hf_weights(*b.engine, model, out, 36);
    ASSERT_TRUE(s.ok()) << s;
    expect_weights_equal(a, b, DType::kF32);
  }
}

}  // namespace
}  // namespace zero
