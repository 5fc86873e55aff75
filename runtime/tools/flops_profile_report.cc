// DeepSpeed's flops_profiler output; see flops_profile_report.h.
#include "runtime/tools/flops_profile_report.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "graph/gpt.h"
#include "runtime/tools/model_family.h"

namespace zero {

namespace {

constexpr int kFwd = static_cast<int>(ProfilePhase::kForward);
constexpr int kBwd = static_cast<int>(ProfilePhase::kBackward);
constexpr int kRec = static_cast<int>(ProfilePhase::kRecompute);

// 1234567 -> "1.23 M" (the unit after the number, as DeepSpeed prints).
std::string si(double v, const char* unit = "") {
  static const char* kPrefix[] = {"", "K", "M", "G", "T", "P"};
  int i = 0;
  while (i < 5 && std::abs(v) >= 1000.0) {
    v /= 1000.0;
    ++i;
  }
  return absl::StrFormat("%.2f %s%s", v, kPrefix[i], unit);
}

std::string ms(double seconds) { return absl::StrFormat("%.2f ms", 1e3 * seconds); }

// FLOPs over seconds as "x.xx TFLOPS" ("-" when nothing ran).
std::string rate(double flops, double seconds) {
  return seconds > 0 && flops > 0 ? absl::StrFormat("%.3f TFLOPS", flops / seconds / 1e12) : std::string("-");
}

int64_t subtree_parameters(const Module& m) {
  int64_t n = 0;
  for (const Parameter* p : m.parameters()) n += p->numel();
  return n;
}

struct Node {
  Module* module;
  int depth;
  std::string name;  // "(model)" for the root
  int64_t params;
  ModuleProfile profile;
};

void walk(Module& m, int depth, const ModuleProfiler& profiler, std::vector<Node>& out) {
  out.push_back({&m, depth, m.name().empty() ? std::string("(model)") : m.name(), subtree_parameters(m),
                 profiler.of(m)});
  for (Module* child : m.children()) walk(*child, depth + 1, profiler, out);
}

// What the aggregated figures sum, from the model's own module names: "h.* is
// every h.N" for GPT-2's blocks, "layers.* is every layers.N" for Llama's.
std::string repeated_layers_note(const std::vector<Node>& nodes) {
  for (const Node& n : nodes) {
    if (n.depth != 1) continue;
    const std::string pattern = module_pattern(n.name);
    const size_t star = pattern.find('*');
    if (star == std::string::npos) continue;
    std::string each = pattern;
    each[star] = 'N';
    return absl::StrCat(pattern, " is every ", each);
  }
  return "a numbered module's number counts as *";
}

}  // namespace

std::string module_pattern(const std::string& name) {
  std::string out;
  size_t i = 0;
  while (i <= name.size()) {
    const size_t dot = std::min(name.find('.', i), name.size());
    const std::string part = name.substr(i, dot - i);
    const bool number = !part.empty() && std::all_of(part.begin(), part.end(), [](char ch) {
      return std::isdigit(static_cast<unsigned char>(ch)) != 0;
    });
    if (!out.empty()) out += '.';
    out += number ? "*" : part;
    i = dot + 1;
  }
  return out;
}

std::string flops_profile_report(Module& root, const ModuleProfiler& profiler, const FlopsProfileStep& step,
                                 const FlopsProfileOptions& options) {
  std::vector<Node> nodes;
  walk(root, 0, profiler, nodes);
  const ModuleProfile& total = nodes.front().profile;
  const double fwd = static_cast<double>(total.flops[kFwd]), bwd = static_cast<double>(total.flops[kBwd]),
               rec = static_cast<double>(total.flops[kRec]);
  std::ostringstream o;
  o << "-------------------------- ZeroEngine flops profiler (DeepSpeed's flops_profiler) --------------------------\n";
  o << absl::StrFormat("Profile summary at step %d (DeepSpeed's global_steps %d: the run's step %d/%d on the "
                       "progress line)\n",
                       step.profile_step, step.profile_step, step.profile_step + 1, step.run_steps);
  o << "Notation: FLOPs are the GEMM floating-point operations (2 M N K per matmul, counted as issued; elementwise ops "
       "are timed, not counted); fwd, bwd and recompute (activation checkpointing's second forward, inside the "
       "backward) are each measured, not estimated; module latencies include the engine's hooks (ZeRO-3 gathers, "
       "gradient reduction) and the compute stream is synchronised around every module, so this step ran slower "
       "than the others.\n\n";
  const MeshShape& m = step.mesh;
  auto line = [&o](const std::string& what, const std::string& value) {
    o << absl::StrFormat("%-62s%s\n", what + ":", value);
  };
  if (const auto* gpt = dynamic_cast<const Gpt*>(&root)) line("model", model_family_description(gpt->config()));
  line("backend", step.backend);
  line("world size", absl::StrCat(m.world()));
  line("data / tensor / pipeline parallel size", absl::StrFormat("%d / %d / %d", m.data, m.tensor, m.pipeline));
  if (m.pipeline > 1) line("pipeline stage of this rank", absl::StrFormat("%d of %d", step.stage, m.pipeline));
  line("micro-batches per step x sequences x tokens",
       absl::StrFormat("%d x %d x %d", step.accumulation, step.micro_batch, step.seq_len));
  line("params of the model", si(static_cast<double>(step.model_parameters)));
  line("params per rank (its tensor slice / stage)", si(static_cast<double>(step.rank_parameters)));
  line("fwd FLOPs per rank", si(fwd));
  line("bwd FLOPs per rank", absl::StrFormat("%s (%.2f x fwd)", si(bwd), fwd > 0 ? bwd / fwd : 0.0));
  if (rec > 0) line("recompute FLOPs per rank", absl::StrFormat("%s (%.2f x fwd)", si(rec), rec / fwd));
  line("fwd latency (with the loss)", ms(step.forward_s));
  line("bwd latency (with recompute and gradient reduction)", ms(step.backward_s));
  if (total.seconds[kRec] > 0) line("of which recompute", ms(total.seconds[kRec]));
  line("step latency (optimizer, clipping, parameter all-gather)", ms(step.step_s));
  line("iter latency", ms(step.iter_s));
  line("fwd FLOPS per rank = fwd FLOPs / fwd latency", rate(fwd, step.forward_s));
  line("bwd FLOPS per rank = (bwd + recompute FLOPs) / bwd latency", rate(bwd + rec, step.backward_s));
  line("fwd+bwd FLOPS per rank = all FLOPs / (fwd + bwd latency)", rate(fwd + bwd + rec, step.forward_s + step.backward_s));
  line("iter FLOPS per rank = all FLOPs / iter latency", rate(fwd + bwd + rec, step.iter_s));
  line("samples/second (this rank's data-parallel group)",
       step.iter_s > 0 ? absl::StrFormat("%.2f", static_cast<double>(step.micro_batch * step.accumulation * m.data) /
                                                    step.iter_s)
                       : std::string("-"));

  int max_depth = 0;
  for (const Node& n : nodes) max_depth = std::max(max_depth, n.depth);
  if (options.module_depth >= 0) max_depth = std::min<int>(max_depth, static_cast<int>(options.module_depth));

  o << absl::StrFormat("\n----------------------------- Aggregated profile per rank -----------------------------\n"
                       "Top %d module%s in terms of params, fwd FLOPs, fwd and bwd latency at each depth (repeated "
                       "layers summed: %s):\n",
                       options.top_modules, options.top_modules == 1 ? "" : "s", repeated_layers_note(nodes));
  for (int d = 0; d <= max_depth; ++d) {
    // pattern -> summed figures, in first-seen order for ties.
    std::map<std::string, std::pair<int64_t, ModuleProfile>> groups;
    std::vector<std::string> order;
    for (const Node& n : nodes) {
      if (n.depth != d) continue;
      const std::string key = d == 0 ? n.name : module_pattern(n.name);
      auto [it, fresh] = groups.try_emplace(key);
      if (fresh) order.push_back(key);
      it->second.first += n.params;
      for (int p = 0; p < kProfilePhases; ++p) {
        it->second.second.calls[p] += n.profile.calls[p];
        it->second.second.seconds[p] += n.profile.seconds[p];
        it->second.second.flops[p] += n.profile.flops[p];
      }
    }
    o << absl::StrFormat("depth %d:\n", d);
    auto top = [&](const char* what, auto value, auto show) {
      std::vector<std::string> keys = order;
      std::stable_sort(keys.begin(), keys.end(),
                       [&](const std::string& a, const std::string& b) { return value(groups[a]) > value(groups[b]); });
      keys.resize(std::min<size_t>(keys.size(), static_cast<size_t>(options.top_modules)));
      std::string list;
      for (const std::string& k : keys) {
        if (!list.empty()) list += ", ";
        list += absl::StrFormat("%s: %s", k, show(value(groups[k])));
      }
      o << absl::StrFormat("    %-12s - %s\n", what, list);
    };
    using G = std::pair<int64_t, ModuleProfile>;
    top("params", [](const G& g) { return static_cast<double>(g.first); }, [](double v) { return si(v); });
    top("fwd FLOPs", [](const G& g) { return static_cast<double>(g.second.flops[kFwd]); },
        [](double v) { return si(v); });
    top("fwd latency", [](const G& g) { return g.second.seconds[kFwd]; }, [](double v) { return ms(v); });
    top("bwd latency", [](const G& g) { return g.second.seconds[kBwd]; }, [](double v) { return ms(v); });
  }

  if (options.detailed) {
    o << "\n------------------------------ Detailed profile per rank ------------------------------\n"
         "Each module's figures include its children's; calls: forward calls in the step (one per micro-batch); "
         "% iter: (fwd + bwd + recompute latency) / iter latency.\n";
    o << absl::StrFormat("%-40s %10s %5s %11s %10s %12s %11s %10s %12s %10s %7s\n", "module", "params", "calls",
                         "fwd FLOPs", "fwd ms", "fwd TFLOPS", "bwd FLOPs", "bwd ms", "bwd TFLOPS", "recomp ms",
                         "% iter");
    for (const Node& n : nodes) {
      if (n.depth > max_depth) continue;
      const ModuleProfile& p = n.profile;
      const double tf = p.seconds[kFwd] > 0 ? static_cast<double>(p.flops[kFwd]) / p.seconds[kFwd] / 1e12 : 0;
      const double tb = p.seconds[kBwd] > 0 ? static_cast<double>(p.flops[kBwd]) / p.seconds[kBwd] / 1e12 : 0;
      const double share =
          step.iter_s > 0 ? 100.0 * (p.seconds[kFwd] + p.seconds[kBwd] + p.seconds[kRec]) / step.iter_s : 0;
      o << absl::StrFormat("%-40s %10s %5d %11s %10.2f %12.3f %11s %10.2f %12.3f %10.2f %6.1f%%\n",
                           std::string(2 * n.depth, ' ') + n.name, si(static_cast<double>(n.params)), p.calls[kFwd],
                           si(static_cast<double>(p.flops[kFwd])), 1e3 * p.seconds[kFwd], tf,
                           si(static_cast<double>(p.flops[kBwd])), 1e3 * p.seconds[kBwd], tb, 1e3 * p.seconds[kRec],
                           share);
    }
  }
  o << "------------------------------------------------------------------------------------------------------\n";
  return o.str();
}

absl::Status write_flops_profile(const std::string& report, const std::string& output_file, int stage,
                                 std::ostream& console) {
  if (output_file.empty()) {
    console << report;
    console.flush();
    return absl::OkStatus();
  }
  const std::string path = stage > 0 ? absl::StrCat(output_file, ".stage", stage) : output_file;
  std::ofstream f(path, std::ios::trunc);
  f << report;
  f.close();
  if (!f) return absl::InternalError(absl::StrCat("flops_profiler.output_file: cannot write ", path));
  console << "flops profiler: profile written to " << path << "\n";
  return absl::OkStatus();
}

}  // namespace zero
