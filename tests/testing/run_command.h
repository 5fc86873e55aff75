// Runs a command line in a shell and captures its exit status and its
// stdout+stderr: the tests of the command-line programs use it to see what
// a user sees.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace zero::testing {

struct CommandResult {
  int exit_code;       // -1 if the process did not exit normally
  std::string output;  // stdout and stderr, interleaved
};

inline CommandResult run_command(const std::string& command) {
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return {-1, "popen failed"};
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace zero::testing
