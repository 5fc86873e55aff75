// Checkpoints in one process: what is on disk, what comes back, and what a
// user sees when the files are wrong.
//  * size: the shards hold exactly the fp32 master weights and the optimizer
//    state (12 bytes per parameter with Adam) plus a 128-byte header each;
//  * a save and a load into a fresh engine give back every master weight and
//    optimizer state bit for bit, and the counters;
//  * consolidate to safetensors, then initialise a fresh engine from the file:
//    the weights equal the live ones (fp32 exactly; bf16 = rounded master);
//  * a truncated shard, a corrupted byte, a model that does not match, a
//    missing manifest, an edited manifest: each refused with the file (and
//    the tensor) named, and the checkpoint `latest` names is never
//    overwritten;
//  * every state a save can be killed in leaves a directory that resumes
//    from the newest complete checkpoint and takes the next save: a
//    .partial of any age, a `latest.tmp`, a complete tag newer than `latest`
//    (killed between the publishing rename and `latest`), a missing, empty or
//    dangling `latest`.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "graph/gpt.h"
#include "kernels/cpu/cpu_backend.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/engine/engine.h"
#include "zero/state_buffers.h"
#include "tests/testing/test_files.h"
#include "tests/testing/trained_gpt.h"

namespace zero {
namespace {

namespace fs = std::filesystem;

const GptConfig kModel{.n_layer = 2, .n_head = 2, .d_model = 16, .vocab_size = 41, .seq_len = 8};

std::string fresh_dir(const std::string& name) {
  const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string d = ::testing::TempDir() + "/" + t->test_suite_name() + "." + t->name() + "." + name;
  fs::remove_all(d);
  return d;
}

// kModel trained 3 steps by default (tests/testing/trained_gpt.h).
struct Trained : testing::TrainedGpt {
  explicit Trained(const GptConfig& model = kModel, int steps = 3, uint64_t seed = EngineConfig{}.seed)
      : TrainedGpt(model, steps, seed) {}
};

TEST(CheckpointTest, RoundTripIsBitwiseAndSizeIsStateBytes) {
  Trained a;
  const std::string dir = fresh_dir("ckpt");
  absl::StatusOr<std::string> tag = save_checkpoint(*a.engine, {dir, "", 0});
  ASSERT_TRUE(tag.ok()) << tag.status();
  EXPECT_EQ(*tag, "global_step3");
  EXPECT_EQ(latest_tag(dir).value(), "global_step3");
  const int64_t psi = a.engine->num_parameters();
  EXPECT_EQ(static_cast<int64_t>(fs::file_size(dir + "/global_step3/rank_00000.shard")), 12 * psi + kShardHeaderBytes);
  std::printf("checkpoint of %lld parameters: shard %lld bytes (12 x %lld + 128), manifest %lld bytes\n",
              static_cast<long long>(psi), static_cast<long long>(fs::file_size(dir + "/global_step3/rank_00000.shard")),
              static_cast<long long>(psi), static_cast<long long>(fs::file_size(dir + "/global_step3/manifest.json")));

  Trained b(kModel, 0);
  ASSERT_TRUE(load_checkpoint(*b.engine, dir).ok());
  EXPECT_EQ(b.engine->global_step(), 3);
  OptimizerStateStore &sa = a.engine->state().state_store(), &sb = b.engine->state().state_store();
  ASSERT_EQ(sa.names(), (std::vector<std::string>{"master", "exp_avg", "exp_avg_sq"}));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(sa.read(i, 0, sa.numel()).value(), sb.read(i, 0, sb.numel()).value()) << sa.names()[i];
  // The checkpoint `latest` names is never overwritten.
  absl::StatusOr<std::string> again = save_checkpoint(*a.engine, {dir, "", 0});
  ASSERT_FALSE(again.ok());
  EXPECT_NE(std::string(again.status().message()).find("already exists and is the one"), std::string::npos)
      << again.status();
}

TEST(CheckpointTest, ConsolidatedSafetensorsReloadToTheLiveWeights) {
  Trained a;
  const std::string dir = fresh_dir("ckpt");
  ASSERT_TRUE(save_checkpoint(*a.engine, {dir, "", 0}).ok());
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const std::string file = dir + "/model_" + std::string(dtype_name(dt)) + ".safetensors";
    ASSERT_TRUE(consolidate_to_safetensors(dir, "", file, dt).ok());
    Trained b(kModel, 0);
    ASSERT_TRUE(load_safetensors_weights(*b.engine, file).ok());
    for (Parameter* p : a.engine->model().parameters()) {
      const std::vector<float> live = a.engine->master_values(*p);
      const Parameter* q = b.engine->model().parameters()[p->index()];
      const std::vector<float> reloaded = b.engine->master_values(*q);
      for (size_t i = 0; i < live.size(); ++i) {
        const float want = dt == DType::kF32 ? live[i] : bf16_to_float(float_to_bf16(live[i]));
        ASSERT_EQ(reloaded[i], want) << p->name() << "[" << i << "] from " << dtype_name(dt);
      }
    }
  }
  // GPT-2's layout: the Conv1D weights are stored [in, out].
  std::ifstream f(dir + "/model_fp32.safetensors", std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, '\0');
  f.read(header.data(), static_cast<std::streamsize>(n));
  EXPECT_NE(header.find("\"h.0.attn.c_attn.weight\":{\"dtype\":\"F32\",\"shape\":[16,48]"), std::string::npos)
      << header;
}

TEST(CheckpointTest, DamagedFilesAreRefusedByName) {
  Trained a;
  const std::string dir = fresh_dir("ckpt");
  ASSERT_TRUE(save_checkpoint(*a.engine, {dir, "", 0}).ok());
  const std::string shard = dir + "/global_step3/rank_00000.shard";
  const auto size = fs::file_size(shard);

  // A flipped byte in the middle of the data.
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size / 2));
    char c;
    f.read(&c, 1);
    f.seekp(static_cast<std::streamoff>(size / 2));
    c = static_cast<char>(c ^ 0x10);
    f.write(&c, 1);
  }
  Trained b(kModel, 0);
  absl::Status s = load_checkpoint(*b.engine, dir);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("rank_00000.shard: tensor "), std::string::npos) << s;
  EXPECT_NE(std::string(s.message()).find("fail their checksum"), std::string::npos) << s;

  // Truncated.
  fs::resize_file(shard, size - 1000);
  s = load_checkpoint(*b.engine, dir);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("rank_00000.shard has " + std::to_string(size - 1000) + " bytes, the manifest says"),
            std::string::npos)
      << s;

  // Missing manifest (a save that never finished looks like this, but under a
  // hidden name: loading by tag says what is missing).
  fs::remove(dir + "/global_step3/manifest.json");
  s = load_checkpoint(*b.engine, dir);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("has no manifest.json"), std::string::npos) << s;
}

// Consolidation (and zero-ckpt inspect) open shards through the loader's
// ShardFiles, so a shard the loader refuses is refused there too: here one
// with bytes appended after what the manifest describes.
TEST(CheckpointTest, ConsolidationRefusesWhatLoadingRefuses) {
  Trained a;
  const std::string dir = fresh_dir("ckpt");
  ASSERT_TRUE(save_checkpoint(*a.engine, {dir, "", 0}).ok());
  const std::string shard = dir + "/global_step3/rank_00000.shard";
  const auto size = fs::file_size(shard);
  {
    std::ofstream f(shard, std::ios::binary | std::ios::app);
    f << std::string(16, 'x');
  }
  const std::string want = "rank_00000.shard has " + std::to_string(size + 16) + " bytes, the manifest says";
  Trained b(kModel, 0);
  absl::Status s = load_checkpoint(*b.engine, dir);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find(want), std::string::npos) << s;
  s = consolidate_to_safetensors(dir, "", dir + "/model.safetensors", DType::kF32);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find(want), std::string::npos) << s;
  EXPECT_FALSE(fs::exists(dir + "/model.safetensors"));
}

TEST(CheckpointTest, AnotherModelIsRefusedNamingTheTensor) {
  Trained a;
  const std::string dir = fresh_dir("ckpt");
  ASSERT_TRUE(save_checkpoint(*a.engine, {dir, "", 0}).ok());
  GptConfig wider = kModel;
  wider.d_model = 24;
  Trained b(wider, 0);
  absl::Status s = load_checkpoint(*b.engine, dir);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("is from another model: tensor wte.weight has shape [41, 16] there and [41, 24]"),
            std::string::npos)
      << s;
  GptConfig deeper = kModel;
  deeper.n_layer = 3;
  Trained c(deeper, 0);
  s = load_checkpoint(*c.engine, dir);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("it has no tensor h.2.ln_1.weight"), std::string::npos) << s;
  EXPECT_NE(latest_tag(fresh_dir("empty")).status().message().find("no checkpoint in"), std::string::npos);
}

// Every on-disk state a save leaves when killed at one of its points, built
// the way the save builds it: resume takes the newest complete checkpoint
// (saying why when `latest` does not name it), and the next save succeeds.
TEST(CheckpointTest, EveryInterruptedSaveResumesFromTheNewestCompleteCheckpoint) {
  const std::string dir = fresh_dir("ckpt");
  Trained a;  // step 3
  ASSERT_TRUE(save_checkpoint(*a.engine, {dir, "", 0}).ok());
  Trained b(kModel, 4);  // step 4
  ASSERT_TRUE(save_checkpoint(*b.engine, {dir, "", 0}).ok());
  auto write = [&](const std::string& name, const std::string& text) { std::ofstream(dir + "/" + name) << text; };
  auto expect_resume = [&](const std::string& state, const std::string& tag, const std::string& note) {
    absl::StatusOr<ResumePoint> p = resume_point(dir);
    ASSERT_TRUE(p.ok()) << state << ": " << p.status();
    EXPECT_EQ(p->tag, tag) << state;
    if (note.empty()) EXPECT_EQ(p->note, "") << state;
    else EXPECT_NE(p->note.find(note), std::string::npos) << state << ": " << p->note;
    Trained fresh(kModel, 0);
    ASSERT_TRUE(load_checkpoint(*fresh.engine, dir).ok()) << state;
    EXPECT_EQ(fresh.engine->global_step(), tag == "global_step4" ? 4 : 3) << state;
  };
  expect_resume("complete", "global_step4", "");
  // Killed while writing shards (a .partial) or `latest` (latest.tmp).
  fs::create_directories(dir + "/.global_step5.partial");
  write(".global_step5.partial/rank_00000.shard.tmp", "half");
  write("latest.tmp", "global_st");
  expect_resume("partial save and latest.tmp", "global_step4", "");
  // Killed after publishing global_step4 but before rewriting latest.
  write("latest", "global_step3\n");
  expect_resume("stale latest", "global_step4", "latest names global_step3, but global_step4 is newer and complete");
  // A missing, empty or dangling latest.
  fs::remove(dir + "/latest");
  expect_resume("no latest", "global_step4", "resuming from the newest complete checkpoint, global_step4");
  write("latest", "");
  expect_resume("empty latest", "global_step4", "resuming from the newest complete checkpoint");
  write("latest", "global_step9\n");
  expect_resume("dangling latest", "global_step4", "resuming from the newest complete checkpoint");
  // The run that resumed from step 3 (latest's) trains step 4 again: its save
  // replaces the leftover global_step4 and moves latest on.
  write("latest", "global_step3\n");
  write("global_step4/leftover-marker", "from the interrupted save");
  Trained again(kModel, 4);
  absl::StatusOr<std::string> saved = save_checkpoint(*again.engine, {dir, "", 0});
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(latest_tag(dir).value(), "global_step4");
  EXPECT_FALSE(fs::exists(dir + "/global_step4/leftover-marker")) << "the leftover was replaced, not kept";
  // The checkpoint latest names, or another run's, is never overwritten.
  absl::StatusOr<std::string> twice = save_checkpoint(*again.engine, {dir, "", 0});
  EXPECT_FALSE(twice.ok());
  write("latest", "global_step9\n");  // another run's latest
  twice = save_checkpoint(*again.engine, {dir, "", 0});
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(std::string(twice.status().message()).find("already exists; not overwriting it"), std::string::npos)
      << twice.status();
  EXPECT_TRUE(fs::exists(dir + "/.global_step5.partial")) << "a later save's leftover stays until that save";
  // Nothing complete: not found, said as such.
  const std::string empty = fresh_dir("empty");
  fs::create_directories(empty + "/.global_step1.partial");
  EXPECT_TRUE(absl::IsNotFound(resume_point(empty).status())) << resume_point(empty).status();
}

// The manifest checks itself: a field edited after the save (a global step
// moved on, say) is refused like a damaged shard.
TEST(CheckpointTest, AnEditedManifestIsRefused) {
  const std::string dir = fresh_dir("ckpt");
  Trained a;
  ASSERT_TRUE(save_checkpoint(*a.engine, {dir, "", 0}).ok());
  const std::string path = dir + "/global_step3/manifest.json";
  std::string text = testing::read_file(path);
  const size_t at = text.find("\"global_step\": 3");
  ASSERT_NE(at, std::string::npos) << text.substr(0, 400);
  text.replace(at, 16, "\"global_step\": 13");
  std::ofstream(path) << text;
  absl::StatusOr<Manifest> m = read_manifest(dir, "global_step3");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(std::string(m.status().message()).find("checksum mismatch"), std::string::npos) << m.status();
  Trained b(kModel, 0);
  EXPECT_FALSE(load_checkpoint(*b.engine, dir).ok());
}

// Version 1 had no checksum: a manifest edited to say so (and to move its
// global step on) is refused, not read unchecked.
TEST(CheckpointTest, AManifestClaimingTheUncheckedVersionIsRefused) {
  const std::string dir = fresh_dir("ckpt");
  Trained a;
  ASSERT_TRUE(save_checkpoint(*a.engine, {dir, "", 0}).ok());
  const std::string path = dir + "/global_step3/manifest.json";
  Json j = Json::parse(testing::read_file(path));
  j["version"] = 1;
  j["progress"]["global_step"] = 13;
  j.erase("crc32c");
  std::ofstream(path) << j.dump(2);
  absl::StatusOr<Manifest> m = read_manifest(dir, "global_step3");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(std::string(m.status().message()).find("format version 1, this build reads versions 2 to"),
            std::string::npos)
      << m.status();
  Trained b(kModel, 0);
  EXPECT_FALSE(load_checkpoint(*b.engine, dir).ok());
  EXPECT_EQ(b.engine->global_step(), 0);
}

// Checkpoint directories whose manifests all fail to read, and no latest:
// the directory is damaged, not empty, so resuming is refused up front,
// naming each (resume "auto" would otherwise start fresh and collide with
// them at the first save).
TEST(CheckpointTest, OnlyDamagedCheckpointsAreRefusedByName) {
  const std::string dir = fresh_dir("ckpt");
  Trained a;
  ASSERT_TRUE(save_checkpoint(*a.engine, {dir, "", 0}).ok());
  Trained b(kModel, 4);
  ASSERT_TRUE(save_checkpoint(*b.engine, {dir, "", 0}).ok());
  std::ofstream(dir + "/global_step3/manifest.json") << "{ not json";
  std::ofstream(dir + "/global_step4/manifest.json") << "";
  fs::remove(dir + "/latest");
  absl::StatusOr<ResumePoint> p = resume_point(dir);
  ASSERT_FALSE(p.ok());
  EXPECT_TRUE(absl::IsDataLoss(p.status())) << p.status();
  const std::string msg(p.status().message());
  EXPECT_NE(msg.find("global_step3 ("), std::string::npos) << msg;
  EXPECT_NE(msg.find("global_step4 ("), std::string::npos) << msg;
  EXPECT_NE(msg.find("none is readable"), std::string::npos) << msg;
}

}  // namespace
}  // namespace zero
