// Per-module time and GEMM FLOPs; see module_profiler.h.
#include "graph/module_profiler.h"

#include <chrono>

#include "core/status.h"

namespace zero {

const char* profile_phase_name(ProfilePhase p) {
  switch (p) {
    case ProfilePhase::kForward:
      return "forward";
    case ProfilePhase::kBackward:
      return "backward";
    case ProfilePhase::kRecompute:
      return "recompute";
  }
  return "?";
}

double ModuleProfiler::now() {
  backend_.synchronize_stream(kComputeStream);
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void ModuleProfiler::enter(const Module& m, ProfilePhase phase) {
  const double t = now();
  open_.push_back({&m, phase, t, backend_.ops().gemm_flops(), 0.0, 0});
}

void ModuleProfiler::exit(const Module& m, ProfilePhase phase) {
  const double t = now();
  ZE_CHECK(!open_.empty() && open_.back().module == &m && open_.back().phase == phase)
      << "profiler: " << profile_phase_name(phase) << " of " << m.name() << " ends out of order";
  const Open o = open_.back();
  open_.pop_back();
  double seconds = t - o.start_s;
  int64_t flops = static_cast<int64_t>(backend_.ops().gemm_flops() - o.start_flops);
  ModuleProfile& p = totals_[&m];
  constexpr int kRec = static_cast<int>(ProfilePhase::kRecompute);
  if (phase == ProfilePhase::kRecompute) {
    // A segment's forward run again inside an enclosing backward: the
    // enclosing calls count it as their recompute, not as their backward.
    if (open_.empty() || open_.back().phase != ProfilePhase::kRecompute) {
      for (Open& outer : open_) {
        outer.recompute_s += seconds;
        outer.recompute_flops += flops;
      }
    }
  } else {
    seconds -= o.recompute_s;
    flops -= o.recompute_flops;
    p.seconds[kRec] += o.recompute_s;
    p.flops[kRec] += o.recompute_flops;
  }
  const int i = static_cast<int>(phase);
  p.calls[i] += 1;
  p.seconds[i] += seconds;
  p.flops[i] += flops;
}

ModuleProfile ModuleProfiler::of(const Module& m) const {
  auto it = totals_.find(&m);
  return it == totals_.end() ? ModuleProfile{} : it->second;
}

void ModuleProfiler::reset() {
  ZE_CHECK(open_.empty()) << "profiler reset inside a module call";
  totals_.clear();
}

}  // namespace zero
