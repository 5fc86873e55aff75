// Files a test makes for itself: paths under GoogleTest's temporary
// directory named after the running test (so tests running side by side
// never share one), emptied on request, and whole-file reads and writes.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <system_error>
#include <fstream>
#include <iterator>
#include <string>

namespace zero::testing {

// <TempDir>/<suite>.<test>.<name>
inline std::string test_path(const std::string& name) {
  const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
  return ::testing::TempDir() + "/" + t->test_suite_name() + "." + t->name() + "." + name;
}

// test_path(name) with whatever an earlier run left there removed. Entries
// may vanish while it walks them (a process the test killed is still being
// reaped, its files going with it), so a failed pass is retried, not thrown.
inline std::string fresh_test_path(const std::string& name) {
  const std::string p = test_path(name);
  std::error_code ec;
  for (int tries = 0; tries < 5; ++tries) {
    std::filesystem::remove_all(p, ec);
    if (!std::filesystem::exists(p, ec)) break;
  }
  return p;
}

// fresh_test_path(name), made an empty directory.
inline std::string fresh_test_dir(const std::string& name) {
  const std::string p = fresh_test_path(name);
  std::filesystem::create_directories(p);
  return p;
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// Writes `text` to test_path(name) and returns that path.
inline std::string write_test_file(const std::string& name, const std::string& text) {
  const std::string p = test_path(name);
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

}  // namespace zero::testing
