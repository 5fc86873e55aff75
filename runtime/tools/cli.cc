// The shared command line; see cli.h.
#include "runtime/tools/cli.h"

#include <cstdio>
#include <iostream>
#include <map>
#include <memory>

#include "ze_build_info.h"

namespace zero::cli {

namespace {

// CLI11's help with our usage lines in place of its generated one, first.
class UsageFormatter : public CLI::Formatter {
 public:
  explicit UsageFormatter(std::string usage) : usage_(std::move(usage)) {
    column_width(28);
    label("Usage", "usage");
    label("OPTIONS", "options");
    label("Positionals", "Arguments");
    label("REQUIRED", "(required)");
  }
  std::string make_help(const CLI::App* app, std::string name, CLI::AppFormatMode mode) const override {
    if (mode == CLI::AppFormatMode::Sub) return make_expanded(app);
    std::string out = usage_;
    if (!out.empty() && out.back() != '\n') out += "\n";
    out += make_positionals(app);
    out += make_groups(app, mode);
    out += make_subcommands(app, mode);
    out += make_footer(app);
    return out;
  }

 private:
  std::string usage_;
};

std::string compiler() {
#if defined(__clang__)
  return "Clang " __clang_version__;
#elif defined(__GNUC__)
  return "GCC " __VERSION__;
#else
  return "unknown compiler";
#endif
}

const CLI::App* innermost_selected(const CLI::App& app) {
  const CLI::App* at = &app;
  for (;;) {
    const std::vector<const CLI::App*> subs = at->get_subcommands([](const CLI::App*) { return true; });
    const CLI::App* next = nullptr;
    for (const CLI::App* s : subs) {
      if (s->parsed()) next = s;
    }
    if (next == nullptr) return at;
    at = next;
  }
}

std::string program_name(const CLI::App& app) {
  const CLI::App* root = &app;
  std::string name = app.get_name();
  while (root->get_parent() != nullptr) {
    root = root->get_parent();
    name = root->get_name() + " " + name;
  }
  return name;
}

// "unknown argument X" for what no option or subcommand took; "" when none.
std::string unknown_arguments(const CLI::App& app) {
  const std::vector<std::string> extra = app.remaining(/*recurse=*/true);
  std::string list;
  for (const std::string& a : extra) list += (list.empty() ? "" : " ") + a;
  return extra.empty() ? "" : (extra.size() == 1 ? "unknown argument " : "unknown arguments ") + list;
}

}  // namespace

std::string build_features() {
  return std::string("cuda ") + (ZE_BUILD_CUDA ? "on" : "off") + ", nccl " + (ZE_BUILD_NCCL ? "on" : "off") +
         ", nvme-offload (io_uring) " + (ZE_BUILD_NVME_OFFLOAD ? "on" : "off") + ", simd " + ZE_BUILD_SIMD_ISAS;
}

std::string version_text(std::string_view program) {
  return std::string(program) + " (ZeroEngine) " + ZE_VERSION + "\nrevision: " + ZE_GIT_REVISION + "\nbuild: " +
         ZE_BUILD_TYPE + ", " + compiler() + "\nfeatures: " + build_features() + "\n";
}

void set_usage(CLI::App& app, std::string usage) { app.formatter(std::make_shared<UsageFormatter>(std::move(usage))); }

void init_app(CLI::App& app, std::string_view program, std::string usage) {
  app.name(std::string(program));
  set_usage(app, std::move(usage));
  app.set_help_flag("-h,--help", "print this help and exit");
  const std::string version = version_text(program);
  app.set_version_flag("--version", [version] { return version; }, "print the version, revision and build features");
  // Unknown arguments are collected and reported by parse() in our words.
  app.allow_extras();
}

int usage_error(const CLI::App& app, std::string_view message) {
  std::cerr << program_name(app) << ": " << message << "\n\n" << app.help() << std::flush;
  return 2;
}

std::optional<int> parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help() << std::flush;  // the selected subcommand's, if any
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    std::cout << app.help("", CLI::AppFormatMode::All) << std::flush;
    return 0;
  } catch (const CLI::CallForVersion& e) {
    std::cout << e.what() << std::flush;
    return 0;
  } catch (const CLI::ParseError& e) {
    // "A subcommand is required" after `zero-ckpt frobnicate`: name the word too.
    const std::string unknown = unknown_arguments(app);
    return usage_error(*innermost_selected(app), unknown.empty() ? e.what() : unknown + "; " + e.what());
  }
  if (const std::string unknown = unknown_arguments(app); !unknown.empty()) {
    return usage_error(*innermost_selected(app), unknown);
  }
  return std::nullopt;
}

std::vector<Occurrence> options_in_order(const CLI::App& app) {
  std::vector<Occurrence> out;
  std::map<const CLI::Option*, size_t> next;
  for (const CLI::Option* opt : app.parse_order()) {
    const CLI::results_t& results = opt->results();
    size_t& i = next[opt];
    out.push_back({opt, i < results.size() ? results[i] : std::string()});
    ++i;
  }
  return out;
}

}  // namespace zero::cli
