// Per-module time and GEMM FLOPs of the passes a Context runs (DeepSpeed's
// flops_profiler, measured rather than estimated for the backward too).
//
// While a profiler is attached (Context::set_profiler), the Context reports
// every module call to it: forward calls, backward calls and the forwards a
// checkpoint segment runs again inside backward (recompute), each as its own
// phase. A call's figures are inclusive: they cover the module's children and
// the engine's hooks around the call (a ZeRO-3 gather waited for in
// pre-forward, a gradient bucket reduced in post-backward), but not the
// recompute a segment's backward starts with: that is its own phase, on the
// recomputed modules and on every module whose backward call it ran inside
// (the root's recompute is the step's). FLOPs
// are the GEMM FLOPs issued through the backend's Ops::matmul during the
// call (2·M·N·K: the elementwise ops are timed, not counted). Times are wall
// seconds between a synchronisation of the compute stream at entry and one
// at exit, so on an asynchronous backend they are the kernels' time too (and
// the profiled step runs slower than the others).
#pragma once

#include <array>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "graph/module.h"
#include "kernels/backend.h"

namespace zero {

enum class ProfilePhase { kForward = 0, kBackward = 1, kRecompute = 2 };
inline constexpr int kProfilePhases = 3;
const char* profile_phase_name(ProfilePhase p);

// One module's totals over the profiled passes (every call, summed).
struct ModuleProfile {
  std::array<int64_t, kProfilePhases> calls{};
  std::array<double, kProfilePhases> seconds{};
  std::array<int64_t, kProfilePhases> flops{};

  int64_t calls_of(ProfilePhase p) const { return calls[static_cast<int>(p)]; }
  double seconds_of(ProfilePhase p) const { return seconds[static_cast<int>(p)]; }
  int64_t flops_of(ProfilePhase p) const { return flops[static_cast<int>(p)]; }
};

class ModuleProfiler {
 public:
  // Times and counts on `backend` (its compute stream, its Ops' GEMM FLOPs).
  explicit ModuleProfiler(Backend& backend) : backend_(backend) {}

  // Called by the Context around each module call, properly nested.
  void enter(const Module& m, ProfilePhase phase);
  void exit(const Module& m, ProfilePhase phase);

  // The totals of a module (zeros when it never ran while attached).
  ModuleProfile of(const Module& m) const;
  bool empty() const { return totals_.empty(); }
  // Forgets every figure (not allowed inside a call).
  void reset();

 private:
  struct Open {
    const Module* module;
    ProfilePhase phase;
    double start_s;
    uint64_t start_flops;  // Ops::gemm_flops() at entry
    // Recompute calls run inside this one (recorded as this module's recompute).
    double recompute_s;
    int64_t recompute_flops;
  };
  // Waits for the compute stream, then reads the clock.
  double now();

  Backend& backend_;
  std::vector<Open> open_;
  std::unordered_map<const Module*, ModuleProfile> totals_;
};

}  // namespace zero
