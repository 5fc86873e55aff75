// A generated part of a documentation page: the text between a begin marker
// line and an end marker, which a test computes (a key table, a table of
// outcomes). expect_generated_section fails the test when the page's text
// differs from what the test made, and with ZE_UPDATE_DOCS=1 in the
// environment writes the new text into the page instead (and skips).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace zero::testing {

// `page` is a path; the section starts on the line after `begin` and ends
// where `end` starts.
inline void expect_generated_section(const std::string& page, const std::string& begin, const std::string& end,
                                     const std::string& want) {
  std::stringstream buf;
  buf << std::ifstream(page).rdbuf();
  std::string text = buf.str();
  const size_t b = text.find(begin), e = text.find(end);
  ASSERT_NE(b, std::string::npos) << page << " lacks the marker " << begin;
  ASSERT_NE(e, std::string::npos) << page << " lacks the marker " << end;
  const size_t from = b + begin.size() + 1;
  const std::string have = text.substr(from, e - from);
  if (have == want) return;
  const char* update = std::getenv("ZE_UPDATE_DOCS");
  if (update != nullptr && std::string(update) == "1") {
    text.replace(from, e - from, want);
    std::ofstream(page) << text;
    GTEST_SKIP() << page << ": its generated section rewritten";
  }
  EXPECT_EQ(have, want) << page << ": the generated section between " << begin << " and " << end
                        << " is out of date (ZE_UPDATE_DOCS=1 rewrites it)";
}

}  // namespace zero::testing
