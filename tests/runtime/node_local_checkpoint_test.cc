// Checkpoints on node-local storage (checkpoint.use_node_local_storage,
// runtime/checkpoint/node_local.h), with hosts played on one machine: each
// rank of an mpirun job runs under simulated_host.sh, in its own mount and
// UTS namespaces, with its host's name and its host's directory mounted at
// the same checkpoint path. 4 ranks on 2 hosts x 2, ZeRO-3 and ZeRO-1:
//  * a save leaves on each host only its ranks' shards, beside the manifest
//    (naming each shard's host), rank 0's model files and `latest`; on a
//    directory the hosts share it is refused;
//  * a resume on the same hosts continues with the losses and final weights
//    of the uninterrupted run, bit for bit;
//  * a resume whose hosts lack shards (one host of the two) is refused before
//    anything loads, naming the shards and the host that wrote them; once
//    the files are copied as the message says, it resumes;
//  * a resume on another layout (hosts swapped, 2 hosts x 1 rank, a fresh
//    host with no checkpoint at all) copies the shards each host lacks,
//    prints one "needs ... from host" line per source host, and continues on
//    the uninterrupted run's losses (bitwise at the same layout, else within
//    1e-6).
// The binary is its own worker: `--worker ...` trains under MPI.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "comm/device_mesh.h"
#include "graph/gpt.h"
#include "kernels/cpu/cpu_backend.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/engine/engine.h"
#include "tests/testing/counting_rows.h"
#include "tests/testing/run_command.h"
#include "tests/testing/test_files.h"

namespace zero {
namespace {

namespace fs = std::filesystem;

const GptConfig kModel{.n_layer = 2, .n_head = 2, .d_model = 16, .vocab_size = 41, .seq_len = 8};
constexpr int64_t kGlobalBatch = 4;  // rows per optimizer step, whatever the world size
constexpr int kSteps = 6;
constexpr int kSaveAt = 3;

// ---- the worker: one rank of a run.

struct WorkerArgs {
  int stage = 3;
  int steps = kSteps;
  int save_at = -1;  // save after this many steps (-1: never)
  bool resume = false;
  std::string dir, out;
};

uint64_t fnv(const std::vector<float>& v, uint64_t h) {
  for (float x : v) {
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    for (int i = 0; i < 4; ++i) h = (h ^ ((bits >> (8 * i)) & 0xff)) * 0x100000001b3ull;
  }
  return h;
}

int run_worker(const WorkerArgs& a) {
  setenv("ZE_COMM_TIMEOUT_S", "60", 0);
  absl::StatusOr<std::unique_ptr<Communicator>> comm = create_communicator();
  if (!comm.ok()) {
    std::fprintf(stderr, "worker: %s\n", std::string(comm.status().message()).c_str());
    return 2;
  }
  Communicator& world = **comm;
  std::unique_ptr<DeviceMesh> mesh = DeviceMesh::create(world).value();
  const int data_size = mesh->shape().data, data_rank = mesh->coordinates().data;
  CpuBackend backend;
  EngineConfig ec;
  ec.zero.stage = zero_stage(a.stage);
  ec.zero.reduce_bucket_size = ec.zero.allgather_bucket_size = ec.zero.prefetch_bucket_size = 500;
  ec.zero.param_persistence_threshold = 20;
  ec.micro_batch_size = kGlobalBatch / data_size;
  ec.pre_divide = data_size;
  std::unique_ptr<Engine> engine = Engine::create(std::make_unique<Gpt>(kModel), ec, backend, *mesh).value();
  testing::CountingRows rows{kModel.seq_len, kModel.vocab_size};
  std::ostringstream out;
  auto fail = [&](const absl::Status& s, const char* what) {
    if (world.rank() == 0) std::ofstream(a.out) << what << ": " << s.message() << "\n";
    std::fprintf(stderr, "rank %d: %s: %s\n", world.rank(), what, std::string(s.message()).c_str());
    return 3;
  };
  if (a.resume) {
    // No tag: the C++ API's form, which takes rank 0's resume point (a fresh
    // host has none of its own). zero-train's form (agree_resume_target, then
    // its tag) is ZeroTrainSavesPerHostAndResumesOnSwappedHosts below.
    LoadOptions lo;
    lo.node_local = true;
    const absl::Status s = load_checkpoint(*engine, a.dir, "", lo);
    if (!s.ok()) return fail(s, "load error");
  }
  for (int64_t step = engine->global_step(); step < a.steps; ++step) {
    const int64_t mb = ec.micro_batch_size;
    const absl::Status f = engine->forward(rows.make((step * data_size + data_rank) * mb, mb)).status();
    if (!f.ok()) return fail(f, "forward");
    if (const absl::Status b = engine->backward(); !b.ok()) return fail(b, "backward");
    absl::StatusOr<StepResult> r = engine->step();
    if (!r.ok()) return fail(r.status(), "step");
    out << "loss " << step << " " << std::hexfloat << r->loss << std::defaultfloat << "\n";
    if (step + 1 == a.save_at) {
      SaveOptions so;
      so.dir = a.dir;
      so.node_local = true;
      so.model = Json{{"model_type", "gpt2"}};
      // Only rank 0 could read the model's files: every host gets its copy.
      if (world.rank() == 0) so.model_files = {{"tokenizer.json", "{\"rank0\": true}"}};
      absl::StatusOr<std::string> tag = save_checkpoint(*engine, so);
      if (!tag.ok()) return fail(tag.status(), "save error");
    }
  }
  uint64_t hash = 0xcbf29ce484222325ull;
  for (Parameter* p : engine->model().parameters()) {
    absl::StatusOr<std::vector<float>> v = engine->state().gather_parameter(*p);
    if (!v.ok()) return fail(v.status(), "gather");
    hash = fnv(*v, hash);
  }
  out << "weights " << std::hex << hash << "\n";
  if (world.rank() == 0) std::ofstream(a.out) << out.str();
  return 0;
}

// ---- the driver.

struct Result {
  int exit_code = -1;
  std::string output;           // mpirun's, every rank's stdout and stderr
  std::string written;          // rank 0's out file
  std::vector<std::string> losses;  // hexfloat, in step order from the first step this run took
  std::string weights;
};

class NodeLocalCheckpointTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    const auto probe = testing::run_command("unshare --mount --uts --propagation private true 2>&1");
    if (probe.exit_code != 0) {
      GTEST_SKIP() << "simulating hosts needs mount and UTS namespaces (unshare --mount --uts), which this "
                      "machine refuses: "
                   << probe.output;
    }
    const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = t->name();
    for (char& c : name)
      if (c == '/') c = '_';
    base_ = ::testing::TempDir() + "/node_local." + name;
    fs::remove_all(base_);
    fs::create_directories(base_ + "/mnt");
  }
  std::string disk(const std::string& host) const { return base_ + "/disks/" + host; }
  std::string mount() const { return base_ + "/mnt"; }

  // `program` as `ranks` ranks, `per_host` per host, on `hosts` (in rank order).
  testing::CommandResult launch(int ranks, int per_host, const std::string& hosts, const std::string& program) {
    return testing::run_command(std::string("ZE_SIM_RANKS_PER_HOST=") + std::to_string(per_host) +
                                " ZE_SIM_HOSTS='" + hosts + "' ZE_SIM_ROOT=" + base_ + "/disks ZE_SIM_MOUNT=" +
                                mount() + " OMP_NUM_THREADS=1 timeout 120 " + ZE_MPIEXEC +
                                " --allow-run-as-root --oversubscribe -x ZE_SIM_RANKS_PER_HOST -x ZE_SIM_HOSTS"
                                " -x ZE_SIM_ROOT -x ZE_SIM_MOUNT -x OMP_NUM_THREADS -np " +
                                std::to_string(ranks) + " " + ZE_SIM_HOST_SCRIPT + " " + program + " 2>&1");
  }
  // The worker above as such a run.
  Result run(int ranks, int per_host, const std::string& hosts, int steps, int save_at, bool resume) {
    const std::string out = base_ + "/out.txt";
    fs::remove(out);
    const auto r = launch(ranks, per_host, hosts,
                          self_ + " --worker " + std::to_string(GetParam()) + " " + std::to_string(steps) + " " +
                              std::to_string(save_at) + " " + (resume ? "1" : "0") + " " + mount() + " " + out);
    Result res;
    res.exit_code = r.exit_code;
    res.output = r.output;
    res.written = testing::read_file(out);
    std::istringstream lines(res.written);
    for (std::string line; std::getline(lines, line);) {
      std::istringstream l(line);
      std::string what, a, b;
      l >> what >> a >> b;
      if (what == "loss") res.losses.push_back(b);
      if (what == "weights") res.weights = a;
    }
    return res;
  }
  std::vector<std::string> files(const std::string& host, const std::string& sub = "global_step3") const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(disk(host) + "/" + sub)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  // The uninterrupted run on 2 hosts x 2, and the save at step 3 of another.
  void reference_and_save() {
    reference_ = run(4, 2, "hA hB", kSteps, -1, false);
    ASSERT_EQ(reference_.exit_code, 0) << reference_.output;
    ASSERT_EQ(reference_.losses.size(), static_cast<size_t>(kSteps)) << reference_.written;
    fs::remove_all(base_ + "/disks");
    const Result saved = run(4, 2, "hA hB", kSaveAt, kSaveAt, false);
    ASSERT_EQ(saved.exit_code, 0) << saved.output;
    ASSERT_EQ(saved.losses, std::vector<std::string>(reference_.losses.begin(), reference_.losses.begin() + kSaveAt));
  }
  void expect_continues(const Result& r, bool bitwise, const std::string& what) {
    ASSERT_EQ(r.exit_code, 0) << what << "\n" << r.output;
    ASSERT_EQ(r.losses.size(), static_cast<size_t>(kSteps - kSaveAt)) << what << "\n" << r.written;
    for (int i = 0; i < kSteps - kSaveAt; ++i) {
      const std::string& want = reference_.losses[kSaveAt + i];
      if (bitwise) {
        EXPECT_EQ(r.losses[i], want) << what << ": step " << kSaveAt + i;
      } else {
        EXPECT_NEAR(std::stod(r.losses[i]), std::stod(want), 1e-6) << what << ": step " << kSaveAt + i;
      }
    }
    if (bitwise) EXPECT_EQ(r.weights, reference_.weights) << what;
  }

  std::string base_;
  const std::string self_ = fs::read_symlink("/proc/self/exe").string();
  Result reference_;
};

TEST_P(NodeLocalCheckpointTest, EachHostHoldsItsShardsAndResumesBitwise) {
  reference_and_save();
  if (HasFatalFailure()) return;
  // (a) each disk: its ranks' shards, the manifest, rank 0's model file, latest.
  EXPECT_EQ(files("hA"), (std::vector<std::string>{"manifest.json", "rank_00000.shard", "rank_00001.shard",
                                                    "tokenizer.json"}));
  EXPECT_EQ(files("hB"), (std::vector<std::string>{"manifest.json", "rank_00002.shard", "rank_00003.shard",
                                                    "tokenizer.json"}));
  for (const char* host : {"hA", "hB"}) {
    EXPECT_EQ(testing::read_file(disk(host) + "/latest"), "global_step3\n") << host;
    EXPECT_EQ(testing::read_file(disk(host) + "/global_step3/tokenizer.json"), "{\"rank0\": true}") << host;
    const nlohmann::json m = nlohmann::json::parse(testing::read_file(disk(host) + "/global_step3/manifest.json"));
    ASSERT_EQ(m["files"].size(), 4u);
    for (int r = 0; r < 4; ++r) EXPECT_EQ(m["files"][r]["host"], r < 2 ? "hA" : "hB") << host << " rank " << r;
    EXPECT_EQ(m["model"]["model_type"], "gpt2") << host;
  }
  // (b) the same hosts: nothing copied, the uninterrupted run's losses and weights.
  const Result same = run(4, 2, "hA hB", kSteps, -1, true);
  expect_continues(same, true, "same hosts");
  EXPECT_EQ(same.output.find("needs"), std::string::npos) << same.output;
  // The key on a directory the hosts share: refused, nothing published.
  fs::create_directories(disk("hS"));
  fs::create_directory_symlink(disk("hS"), disk("hT"));
  const Result shared = run(4, 2, "hS hT", kSaveAt, kSaveAt, false);
  EXPECT_NE(shared.exit_code, 0) << shared.output;
  EXPECT_NE(shared.written.find("both see " + mount() + ": it is one shared directory"), std::string::npos)
      << shared.written;
  EXPECT_FALSE(fs::exists(disk("hS") + "/global_step3"));
}

TEST_P(NodeLocalCheckpointTest, OtherLayoutsCopyTheShardsTheyLack) {
  reference_and_save();
  if (HasFatalFailure()) return;
  const std::string keep = base_ + "/saved";
  fs::copy(base_ + "/disks", keep, fs::copy_options::recursive);
  auto restore = [&] {
    fs::remove_all(base_ + "/disks");
    fs::copy(keep, base_ + "/disks", fs::copy_options::recursive);
  };
  // Hosts swapped: ranks 0-1 on hB, 2-3 on hA; each host lacks the other's shards.
  const Result swapped = run(4, 2, "hB hA", kSteps, -1, true);
  expect_continues(swapped, true, "hosts swapped");
  EXPECT_NE(swapped.output.find("resume: global_step3 needs rank_00000.shard, rank_00001.shard from host hA (rank 2)"),
            std::string::npos)
      << swapped.output;
  EXPECT_NE(swapped.output.find("resume: global_step3 needs rank_00002.shard, rank_00003.shard from host hB (rank 0)"),
            std::string::npos)
      << swapped.output;
  // 2 hosts x 1 rank: rank 0 on hB, rank 1 on hA (each needs the other's half).
  restore();
  const Result halves = run(2, 1, "hB hA", kSteps, -1, true);
  expect_continues(halves, false, "2 hosts x 1 rank");
  EXPECT_NE(halves.output.find("from host hA (rank 1)"), std::string::npos) << halves.output;
}

TEST_P(NodeLocalCheckpointTest, MissingShardsAreNamedThenAFreshHostGetsEverything) {
  reference_and_save();
  if (HasFatalFailure()) return;
  // (c) hA alone: hB's shards are on no host of the run.
  const Result alone = run(2, 2, "hA", kSteps, -1, true);
  EXPECT_NE(alone.exit_code, 0) << alone.output;
  EXPECT_NE(alone.written.find("has rank_00002.shard, rank_00003.shard (written by host hB)"), std::string::npos)
      << alone.written;
  EXPECT_NE(alone.written.find("Bring hB back into the run, or copy the files into " + mount() + "/global_step3/ "
                               "on a host of this run"),
            std::string::npos)
      << alone.written;
  EXPECT_TRUE(alone.losses.empty());
  // Doing what it says: hB's shards copied to hA; then hA and a fresh host hC
  // (no checkpoint at all) resume at 2 x 2, hC getting manifest, model file and shards.
  for (const char* shard : {"rank_00002.shard", "rank_00003.shard"})
    fs::copy_file(disk("hB") + "/global_step3/" + shard, disk("hA") + "/global_step3/" + shard);
  fs::remove_all(disk("hB"));
  const Result fresh = run(4, 2, "hA hC", kSteps, -1, true);
  expect_continues(fresh, true, "hA + a fresh host hC");
  EXPECT_NE(fresh.output.find("resume: global_step3 needs rank_00002.shard, rank_00003.shard from host hA (rank 0)"),
            std::string::npos)
      << fresh.output;
  EXPECT_EQ(files("hC"), (std::vector<std::string>{"manifest.json", "rank_00002.shard", "rank_00003.shard",
                                                    "tokenizer.json"}));
}

// zero-train with the key (train_loop.cc's wiring): each host's disk gets
// its ranks' shards; a resume on the hosts swapped copies them across and
// continues on the uninterrupted run's losses, bit for bit; a fresh host
// with no checkpoint directory takes an explicit --resume DIR.
TEST_P(NodeLocalCheckpointTest, ZeroTrainSavesPerHostAndResumesOnSwappedHosts) {
  const std::string metrics = base_ + "/metrics.jsonl";
  auto train = [&](const std::string& hosts, int steps, const std::string& more) {
    fs::remove(metrics);
    return launch(4, 2, hosts,
                  std::string(ZE_TRAIN_BIN) + " --config " + ZE_SOURCE_DIR + "/configs/small-gpt.json --config " +
                      ZE_SOURCE_DIR + "/configs/ds/fp32-adamw.json --set zero_optimization.stage=" +
                      std::to_string(GetParam()) + " --set checkpoint.use_node_local_storage=true --save-dir " +
                      mount() + "/ckpt --save-every 4 --metrics " + metrics + " --set run.steps=" + std::to_string(steps) +
                      " " + more);
  };
  auto losses = [&] {
    std::map<int, std::string> out;
    std::istringstream in(testing::read_file(metrics));
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);
      out[j["step"].get<int>()] = j["loss"].dump();
    }
    return out;
  };
  const auto reference = train("hA hB", 8, "");
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const std::map<int, std::string> want = losses();
  ASSERT_EQ(want.size(), 8u);
  fs::remove_all(base_ + "/disks");
  const auto first = train("hA hB", 4, "");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_EQ(files("hA", "ckpt/global_step4"), (std::vector<std::string>{"manifest.json", "rank_00000.shard",
                                                                        "rank_00001.shard"}));
  EXPECT_EQ(files("hB", "ckpt/global_step4"), (std::vector<std::string>{"manifest.json", "rank_00002.shard",
                                                                        "rank_00003.shard"}));
  const auto resumed = train("hB hA", 8, "--resume auto");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resume: global_step4 needs rank_00000.shard, rank_00001.shard from host hA (rank 2)"),
            std::string::npos)
      << resumed.output;
  const std::map<int, std::string> got = losses();
  ASSERT_EQ(got.size(), 4u) << resumed.output;
  for (const auto& [step, loss] : got) EXPECT_EQ(loss, want.at(step)) << "step " << step;
  // An explicit --resume DIR that only rank 0's host has: a fresh host hC
  // (no such directory) is given the checkpoint, not refused at start. The
  // swapped run saved step 8 with ranks 0-1 on hB; hA's shards go to hB first.
  for (const char* shard : {"rank_00002.shard", "rank_00003.shard"})
    fs::copy_file(disk("hA") + "/ckpt/global_step8/" + shard, disk("hB") + "/ckpt/global_step8/" + shard);
  const auto fresh = train("hB hC", 8, "--resume " + mount() + "/ckpt");
  ASSERT_EQ(fresh.exit_code, 0) << fresh.output;
  EXPECT_EQ(files("hC", "ckpt/global_step8"), (std::vector<std::string>{"manifest.json", "rank_00002.shard",
                                                                        "rank_00003.shard"}));
}

INSTANTIATE_TEST_SUITE_P(Stages, NodeLocalCheckpointTest, ::testing::Values(3, 1),
                         [](const ::testing::TestParamInfo<int>& info) { return "zero" + std::to_string(info.param); });

}  // namespace
}  // namespace zero

int main(int argc, char** argv) {
  if (argc == 8 && std::string(argv[1]) == "--worker") {
    zero::WorkerArgs a;
    a.stage = std::atoi(argv[2]);
    a.steps = std::atoi(argv[3]);
    a.save_at = std::atoi(argv[4]);
    a.resume = std::string(argv[5]) == "1";
    a.dir = argv[6];
    a.out = argv[7];
    return zero::run_worker(a);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
