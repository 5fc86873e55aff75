// The table of real DeepSpeed configs in docs/config-reference.md is what
// they do: every file of tests/data/ds_configs (verbatim copies of configs
// from public projects, listed with their origins in its README.md) is layered on
// configs/small-gpt.json and run through zero-train for a few steps, exactly
// as a user would run it; the outcome (trains, or refused and why, with the
// messages zero-train printed) becomes one row. The rows must equal the
// page's table between its markers. A file whose offload asks for an
// nvme_path gets it pointed at a local directory (the only change, and the
// row says so).
//
// When a change alters an outcome, the test fails with the new table;
// ZE_UPDATE_DOCS=1 writes it into docs/config-reference.md instead.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "nlohmann/json.hpp"
#include "tests/testing/generated_section.h"
#include "tests/testing/run_command.h"

namespace {

namespace fs = std::filesystem;
const std::string kSource = ZE_SOURCE_DIR;
constexpr int kSteps = 3;
constexpr const char* kBegin = "<!-- real-ds-configs: begin (tests/runtime/real_ds_configs_test.cc writes this) -->";
constexpr const char* kEnd = "<!-- real-ds-configs: end -->";

std::string escape_cell(std::string s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else if (c == '\n') out += "<br>";
    else out += c;
  }
  return out;
}

// zero-train's own lines (errors, warnings), without the program's name.
std::string messages(const std::string& output) {
  std::istringstream in(output);
  std::string line, out;
  while (std::getline(in, line)) {
    std::string text;
    if (line.rfind("zero-train: ", 0) == 0) text = line.substr(12);
    else if (line.rfind("  ", 0) == 0 && !out.empty()) text = line.substr(2);  // a multi-error message's lines
    else continue;
    out += (out.empty() ? "" : "\n") + text;
  }
  return out;
}

// `--set` for every offload section of the file that puts something on NVMe.
std::string nvme_overrides(const std::string& file, const std::string& dir) {
  std::ifstream f(file);
  const nlohmann::json j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  std::string sets;
  if (!j.contains("zero_optimization") || !j["zero_optimization"].is_object()) return sets;
  for (const char* section : {"offload_optimizer", "offload_param"}) {
    const nlohmann::json& z = j["zero_optimization"];
    if (z.contains(section) && z[section].is_object() && z[section].value("device", "") == "nvme") {
      sets += std::string(" --set zero_optimization.") + section + ".nvme_path=" + dir;
    }
  }
  return sets;
}

std::string table() {
  const std::string dir = kSource + "/tests/data/ds_configs";
  const std::string swap = ::testing::TempDir() + "/real_ds_configs.swap";
  fs::create_directories(swap);
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".json") files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  std::string out = "| file | outcome | what zero-train says |\n| --- | --- | --- |\n";
  int trains = 0, with_path = 0;
  for (const std::string& file : files) {
    const std::string sets = nvme_overrides(dir + "/" + file, swap);
    const auto r = zero::testing::run_command("cd " + kSource + " && " + ZE_TRAIN_BIN +
                                              " --config configs/small-gpt.json --config tests/data/ds_configs/" +
                                              file + " --steps " + std::to_string(kSteps) + sets);
    std::string outcome;
    if (r.exit_code == 0) {
      EXPECT_NE(r.output.find("done: " + std::to_string(kSteps) + " steps"), std::string::npos) << file << r.output;
      outcome = "trains";
      ++trains;
      with_path += sets.empty() ? 0 : 1;
    } else if (r.exit_code == 2) {
      outcome = "refused";
    } else {
      ADD_FAILURE() << file << ": exit " << r.exit_code << "\n" << r.output;
      outcome = "fails (exit " + std::to_string(r.exit_code) + ")";
    }
    if (!sets.empty()) outcome += " (with `nvme_path` set to a local directory)";
    std::string said = messages(r.output);
    // The swap directory is this machine's; the page shows a placeholder.
    for (size_t at; (at = said.find(swap)) != std::string::npos;) said.replace(at, swap.size(), "DIR");
    // A layered key's message names its file, which the table's first column already does.
    const std::string source = "tests/data/ds_configs/" + file + ": ";
    for (size_t at; (at = said.find(source)) != std::string::npos;) said.erase(at, source.size());
    out += "| `" + file + "` | " + outcome + " | " + escape_cell(said.empty() ? "—" : said) + " |\n";
  }
  out += "\n" + std::to_string(trains) + " of " + std::to_string(files.size()) + " train";
  if (with_path > 0) out += " (" + std::to_string(with_path) + " with its `nvme_path` pointed at a local directory)";
  out += "; the rest are refused with every offending key named.\n";
  return out;
}

TEST(RealDeepSpeedConfigsTest, DocsTableIsWhatTheyDo) {
  zero::testing::expect_generated_section(kSource + "/docs/config-reference.md", kBegin, kEnd, table());
}

}  // namespace
