// The source folders are layers (docs/internals.md, "Layers"): a file
// includes from its own layer and the layers before it, never from a later
// one, and never from tests/, bench/ or examples/. The order is read from the
// page's layers line, so the documentation and the rule cannot drift apart; every
// source file must sit in a layer, and every CMake target of a layer folder
// builds sources of that folder only.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
const fs::path kSource = ZE_SOURCE_DIR;
const fs::path kPage = "docs/internals.md";  // the page that names the layers, under kSource
constexpr const char* kMarker = "<!-- layers (tests/layering_test.cc reads this line) -->";

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The page's layer order: the line after the marker, "`a` → `b` → ...".
std::vector<std::string> documented_layers() {
  std::istringstream page(read(kSource / kPage));
  std::string line;
  while (std::getline(page, line)) {
    if (line != kMarker) continue;
    std::getline(page, line);
    std::vector<std::string> layers;
    const std::regex item("`([a-z_/]+)`");
    for (auto it = std::sregex_iterator(line.begin(), line.end(), item); it != std::sregex_iterator(); ++it) {
      layers.push_back((*it)[1]);
    }
    return layers;
  }
  return {};
}

// The index of the layer `path` (relative to the source root) belongs to:
// the longest layer that is a folder prefix of it; -1 when none is.
int layer_of(const std::vector<std::string>& layers, const std::string& path) {
  int best = -1;
  size_t best_len = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string prefix = layers[i] + "/";
    if (path.compare(0, prefix.size(), prefix) == 0 && prefix.size() > best_len) {
      best = static_cast<int>(i);
      best_len = prefix.size();
    }
  }
  return best;
}

std::string top_folder(const std::string& path) { return path.substr(0, path.find('/')); }

bool is_source(const fs::path& p) {
  const std::string e = p.extension().string();
  return e == ".h" || e == ".cc" || e == ".cu" || e == ".cuh";
}

struct Tree {
  std::vector<std::string> layers;
  std::vector<std::string> tops;  // the top-level folders the layers live in
  std::vector<fs::path> sources;  // every source file in them
};

Tree scan() {
  Tree t;
  t.layers = documented_layers();
  for (const std::string& l : t.layers) {
    if (std::find(t.tops.begin(), t.tops.end(), top_folder(l)) == t.tops.end()) t.tops.push_back(top_folder(l));
  }
  for (const std::string& top : t.tops) {
    if (!fs::is_directory(kSource / top)) continue;
    for (const auto& e : fs::recursive_directory_iterator(kSource / top)) {
      if (e.is_regular_file() && is_source(e.path())) t.sources.push_back(e.path());
    }
  }
  std::sort(t.sources.begin(), t.sources.end());
  return t;
}

TEST(LayeringTest, TheDocsNameTheLayers) {
  const std::vector<std::string> layers = documented_layers();
  ASSERT_GE(layers.size(), 5u) << kPage.string() << " has no layers line after " << kMarker;
  for (const std::string& l : layers) EXPECT_TRUE(fs::is_directory(kSource / l)) << l << " is not a folder";
}

TEST(LayeringTest, EveryIncludeRunsDownTheLayers) {
  const Tree t = scan();
  ASSERT_FALSE(t.sources.empty());
  const std::regex include(R"re(^\s*#\s*include\s*"([^"]+)")re");
  std::vector<std::string> against;
  int checked = 0;
  for (const fs::path& file : t.sources) {
    const std::string rel = fs::relative(file, kSource).string();
    const int from = layer_of(t.layers, rel);
    if (from < 0) {
      against.push_back(rel + ": in no layer (add its folder to the layers line of " + kPage.string() + ")");
      continue;
    }
    std::istringstream in(read(file));
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      std::smatch m;
      if (!std::regex_search(line, m, include)) continue;
      const std::string inc = m[1];
      const std::string top = top_folder(inc);
      if (top == "tests" || top == "bench" || top == "examples") {
        against.push_back(rel + ":" + std::to_string(n) + ": includes " + inc + " (above every layer)");
        continue;
      }
      if (std::find(t.tops.begin(), t.tops.end(), top) == t.tops.end()) continue;  // a library's header
      ++checked;
      const int to = layer_of(t.layers, inc);
      if (to < 0) {
        against.push_back(rel + ":" + std::to_string(n) + ": includes " + inc + ", which is in no layer");
      } else if (to > from) {
        against.push_back(rel + ":" + std::to_string(n) + ": " + t.layers[from] + " includes " + inc + " from " +
                          t.layers[to] + ", a later layer");
      }
    }
  }
  EXPECT_GT(checked, 200);
  std::string all;
  for (const std::string& a : against) all += "\n  " + a;
  EXPECT_TRUE(against.empty()) << against.size() << " include(s) against the layer order:" << all;
}

// A target defined in one folder from another folder's sources hides a
// dependency from the layering above; every layer folder's CMakeLists.txt
// names its own sources only.
TEST(LayeringTest, EveryTargetLivesInTheFolderOfItsSources) {
  const Tree t = scan();
  std::vector<std::string> against;
  for (const std::string& top : t.tops) {
    for (const auto& e : fs::recursive_directory_iterator(kSource / top)) {
      if (e.path().filename() != "CMakeLists.txt") continue;
      std::istringstream in(read(e.path()));
      std::string line;
      for (int n = 1; std::getline(in, line); ++n) {
        if (line.find("../") != std::string::npos || line.find("${PROJECT_SOURCE_DIR}/") != std::string::npos) {
          against.push_back(fs::relative(e.path(), kSource).string() + ":" + std::to_string(n) + ": " + line);
        }
      }
    }
  }
  std::string all;
  for (const std::string& a : against) all += "\n  " + a;
  EXPECT_TRUE(against.empty()) << "sources from another folder:" << all;
}

}  // namespace
