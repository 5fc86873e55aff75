// zero-report as a user runs it: aligned `key : value` text and the same keys
// as JSON; every check a definite yes or no with a reason (whichever this
// machine gives: the test passes with or without O_DIRECT, io_uring or a
// GPU); the SIMD table and OpenMP threads follow their environment
// variables; the O_DIRECT probe leaves nothing behind; a bad --path is a
// usage error.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/testing/run_command.h"

namespace {

using zero::testing::CommandResult;
using zero::testing::run_command;
namespace fs = std::filesystem;

CommandResult report(const std::string& args, const std::string& env = "") {
  // stdout only: a report must not need stderr to be read.
  return run_command("( " + env + " " + std::string(ZE_REPORT_BIN) + " " + args + " 2>/dev/null )");
}

nlohmann::json report_json(const std::string& args = "", const std::string& env = "") {
  const CommandResult r = report("--json " + args, env);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return nlohmann::json::parse(r.output);  // throws (fails the test) when not JSON
}

void expect_check(const nlohmann::json& j, const std::string& key) {
  ASSERT_TRUE(j.contains(key)) << key << " missing from " << j.dump(1);
  ASSERT_TRUE(j[key].is_object()) << key << ": " << j[key];
  EXPECT_TRUE(j[key]["ok"].is_boolean()) << key << ": " << j[key];
  ASSERT_TRUE(j[key]["reason"].is_string()) << key << ": " << j[key];
  EXPECT_FALSE(j[key]["reason"].get<std::string>().empty()) << key;
}

TEST(ZeroReportTest, TextIsAlignedKeyValueLines) {
  const CommandResult r = report("");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::istringstream in(r.output);
  const std::regex line_re(R"(^([a-z0-9_.]+) *: (.+)$)");
  size_t colon = std::string::npos;
  int lines = 0;
  std::set<std::string> keys;
  for (std::string line; std::getline(in, line); ++lines) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, line_re)) << "not `key : value`: " << line;
    keys.insert(m[1]);
    const size_t at = line.find(" : ");
    if (colon == std::string::npos) colon = at;
    EXPECT_EQ(at, colon) << "not aligned: " << line;
  }
  EXPECT_GT(lines, 15);
  for (const char* key : {"version", "revision", "features", "compiler", "memory.total", "memory.available", "gpus",
                          "mpi", "onednn", "onednn.cpu_isa", "simd.kernels", "openmp.threads", "liburing", "io_uring",
                          "io_uring.registered_buffers", "o_direct", "o_direct.path", "abseil", "nlohmann_json"}) {
    EXPECT_TRUE(keys.count(key)) << key << " missing from:\n" << r.output;
  }
  // A check reads yes or no, then why.
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(\no_direct +: (yes|no) \(.+\)\n)"))) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(\nio_uring +: (yes|no) \(.+\)\n)"))) << r.output;
}

TEST(ZeroReportTest, JsonHasTheKeysWithSaneValues) {
  const nlohmann::json j = report_json();
  EXPECT_EQ(j["version"], ZE_VERSION);
  EXPECT_FALSE(j["revision"].get<std::string>().empty());
  EXPECT_NE(j["features"].get<std::string>().find("simd avx512 avx2"), std::string::npos) << j["features"];
  const std::string simd = j["simd.kernels"];
  EXPECT_TRUE(simd == "avx512" || simd == "avx2") << simd;
  EXPECT_GE(j["openmp.threads"].get<int>(), 1);
  EXPECT_GT(j["memory.total"].get<int64_t>(), 0);
  EXPECT_GT(j["memory.available"].get<int64_t>(), 0);
  EXPECT_LE(j["memory.available"].get<int64_t>(), j["memory.total"].get<int64_t>());
  EXPECT_EQ(j["mpi"].get<std::string>().rfind("Open MPI v", 0), 0u) << j["mpi"];
  EXPECT_TRUE(std::regex_match(j["onednn"].get<std::string>(), std::regex(R"(\d+\.\d+\.\d+( \(.*\))?)"))) << j["onednn"];
  EXPECT_FALSE(j["onednn.cpu_isa"].get<std::string>().empty());
  EXPECT_TRUE(j["gpus"].is_number_integer()) << j["gpus"];
  EXPECT_GE(j["gpus"].get<int>(), 0);
  EXPECT_EQ(j["o_direct.path"], "/var/tmp");
  expect_check(j, "o_direct");
  expect_check(j, "io_uring");
  expect_check(j, "io_uring.registered_buffers");
  // No ring, no registered buffers.
  if (!j["io_uring"]["ok"].get<bool>()) {
    EXPECT_FALSE(j["io_uring.registered_buffers"]["ok"].get<bool>());
  }
}

TEST(ZeroReportTest, FollowsZeSimdAndOmpNumThreads) {
  const nlohmann::json j = report_json("", "ZE_SIMD=avx2 OMP_NUM_THREADS=3");
  EXPECT_EQ(j["simd.kernels"], "avx2");
  EXPECT_EQ(j["openmp.threads"], 3);
}

// On any directory the probe says yes or no with a reason and removes its
// file; on tmpfs it names the filesystem (whether O_DIRECT works there
// depends on the kernel: Linux 6.6 added it).
TEST(ZeroReportTest, ODirectProbeOnAGivenPathLeavesNothing) {
  const fs::path dir = fs::path(::testing::TempDir()) / "ZeroReportTest.odirect";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const nlohmann::json j = report_json("--path " + dir.string());
  EXPECT_EQ(j["o_direct.path"], dir.string());
  expect_check(j, "o_direct");
  EXPECT_TRUE(fs::is_empty(dir)) << "the probe left a file in " << dir;
  if (fs::is_directory("/dev/shm")) {
    const nlohmann::json shm = report_json("--path /dev/shm");
    expect_check(shm, "o_direct");
    EXPECT_FALSE(shm["o_direct.filesystem"].get<std::string>().empty());
  }
}

TEST(ZeroReportTest, MissingPathIsAUsageError) {
  const CommandResult r =
      run_command("( " + std::string(ZE_REPORT_BIN) + " --path /no/such/dir >/dev/null )");  // stderr only
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("/no/such/dir"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("usage: zero-report"), std::string::npos) << r.output;
}

}  // namespace
