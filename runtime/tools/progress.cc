// Console progress and metrics; see progress.h.
#include "runtime/tools/progress.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>

#include "absl/strings/str_format.h"
#include "core/strings.h"
#include "runtime/tools/durations.h"
#include "runtime/tools/monitors.h"

namespace zero {

namespace {

std::string short_bytes(int64_t b) {
  const double v = static_cast<double>(b);
  if (v >= 1024.0 * 1024 * 1024) return absl::StrFormat("%.2fG", v / (1024.0 * 1024 * 1024));
  if (v >= 1024.0 * 1024) return absl::StrFormat("%.0fM", v / (1024.0 * 1024));
  if (v >= 1024.0) return absl::StrFormat("%.0fK", v / 1024.0);
  return absl::StrFormat("%dB", b);
}


std::string rate(double tokens_per_s) {
  if (tokens_per_s >= 1e6) return absl::StrFormat("%.2fM", tokens_per_s / 1e6);
  if (tokens_per_s >= 1e3) return absl::StrFormat("%.1fk", tokens_per_s / 1e3);
  return absl::StrFormat("%.1f", tokens_per_s);
}

}  // namespace

std::string memory_brief(const MemorySnapshot& mem, Tier tier) {
  std::string out;
  for (int c = 0; c < kNumMemCategories; ++c) {
    const int64_t peak = mem.at(tier, static_cast<MemCategory>(c)).peak;
    if (peak == 0) continue;
    out += cat(out.empty() ? "" : " ", mem_category_short_name(static_cast<MemCategory>(c)), " ", short_bytes(peak));
  }
  return out;
}

void merge_peaks(MemorySnapshot& into, const MemorySnapshot& from) {
  for (int t = 0; t < kNumTiers; ++t) {
    for (int c = 0; c < kNumMemCategories; ++c) {
      MemCounter& a = into.by_category[t][c];
      a.peak = std::max(a.peak, from.by_category[t][c].peak);
      a.current = from.by_category[t][c].current;
    }
    into.allocated[t].peak = std::max(into.allocated[t].peak, from.allocated[t].peak);
    into.allocated[t].current = from.allocated[t].current;
    into.reserved[t].peak = std::max(into.reserved[t].peak, from.reserved[t].peak);
    into.reserved[t].current = from.reserved[t].current;
  }
}

Json step_metrics_json(const StepResult& r, const StepTiming& t, const MemorySnapshot& mem, int64_t rss,
                       int64_t rss_start, const ThroughputModel& model, const StepTotals& totals) {
  Json j;
  j["step"] = r.global_step;
  // Unix seconds at the end of the step ("time" already holds the phases).
  j["wall_time"] =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  j["loss"] = monitor_float(r.loss);
  j["lr"] = monitor_float(r.lr);
  if (totals.val_loss) j["val_loss"] = *totals.val_loss;
  j["grad_norm"] = r.grad_norm;
  j["skipped"] = r.skipped;
  j["skipped_steps"] = r.skipped_steps;
  j["loss_scale"] = r.loss_scale;
  j["comm_bytes"] = r.comm_bytes;
  j["time"] = {{"forward_s", r.forward_s}, {"backward_s", r.backward_s}, {"recompute_s", r.recompute_s},
               {"step_s", r.step_s}, {"comm_wait_s", r.comm_wait_s}};
  if (r.pipeline_s > 0) {
    j["time"]["pipeline_s"] = r.pipeline_s;
    j["time"]["pipeline_wait_s"] = r.pipeline_wait_s;
  }
  if (r.moe) {
    // This rank's routing (graph/moe.h): the unweighted auxiliary losses and
    // each sparse layer's tokens per expert over the step.
    Json tokens = Json::object();
    for (const auto& [layer, counts] : r.moe->expert_tokens) {
      Json row = Json::array();
      for (double c : counts) row.push_back(static_cast<int64_t>(c));
      tokens[std::to_string(layer)] = row;
    }
    j["moe"] = {{"aux_loss", r.moe->aux_loss}, {"z_loss", r.moe->z_loss}, {"dropped", r.moe->dropped},
                {"expert_tokens", tokens}};
  }
  j["step_time_s"] = t.step_seconds;
  j["tokens_per_s"] = t.step_seconds > 0 ? t.tokens / t.step_seconds : 0.0;
  j["samples_per_s"] = t.step_seconds > 0 ? t.samples / t.step_seconds : 0.0;
  j["flops_per_s"] = t.step_seconds > 0 ? model.flops_per_token * t.tokens / t.step_seconds : 0.0;
  j["samples"] = totals.samples;
  j["tokens"] = totals.tokens;
  j["world_size"] = model.world_size;
  Json memory = Json::object();
  for (int ti = 0; ti < kNumTiers; ++ti) {
    const Tier tier = static_cast<Tier>(ti);
    if (mem.reserved[ti].peak == 0 && mem.allocated[ti].peak == 0) continue;
    Json tj;
    for (int c = 0; c < kNumMemCategories; ++c) {
      const MemCounter& mc = mem.at(tier, static_cast<MemCategory>(c));
      tj[std::string(mem_category_name(static_cast<MemCategory>(c)))] = {{"current", mc.current}, {"peak", mc.peak}};
    }
    tj["allocated"] = {{"current", mem.allocated[ti].current}, {"peak", mem.allocated[ti].peak}};
    tj["reserved"] = {{"current", mem.reserved[ti].current}, {"peak", mem.reserved[ti].peak}};
    memory[std::string(tier_name(tier))] = tj;
  }
  j["memory"] = memory;
  j["rss"] = rss;
  j["rss_start"] = rss_start;
  return j;
}

ProgressReporter::ProgressReporter(std::ostream& out, int64_t total_steps, int64_t print_every, Tier tier,
                                   int64_t rss_start)
    : out_(out), total_steps_(total_steps), print_every_(print_every), tier_(tier), rss_start_(rss_start) {}

absl::Status ProgressReporter::open_metrics(const std::string& path, bool append) {
  metrics_.open(path, append ? std::ios::app : std::ios::trunc);
  if (!metrics_) {
    return absl::PermissionDeniedError(cat("metrics file ", path, ": cannot open for writing: ", std::strerror(errno)));
  }
  metrics_path_ = path;
  return absl::OkStatus();
}

absl::Status ProgressReporter::on_step(const StepResult& r, const StepTiming& t, const StepTotals& totals) {
  if (steps_seen_ == 0) first_loss_ = r.loss;
  if (totals.val_loss) {
    if (!first_val_loss_) first_val_loss_ = totals.val_loss;
    last_val_loss_ = totals.val_loss;
  }
  window_.push_back(t);
  if (window_.size() > static_cast<size_t>(kRateWindowSteps)) window_.pop_front();
  ++steps_seen_;
  skipped_ = r.skipped_steps;
  last_loss_ = r.loss;
  tokens_total_ += t.tokens;
  seconds_total_ += t.step_seconds;
  const MemorySnapshot mem = MemoryTracker::global().snapshot();
  merge_peaks(run_peaks_, mem);
  MemoryTracker::global().reset_peaks();  // the next step's peaks are its own
  if (metrics_.is_open()) {
    Json line = step_metrics_json(r, t, mem, process_rss_bytes(), rss_start_, model_, totals);
    line["rss_peak"] = process_peak_rss_bytes();  // VmHWM: the process's peak so far
    metrics_ << line.dump() << '\n';
    metrics_.flush();  // the line is on disk (or refused) before the next step
    if (!metrics_) {
      return absl::DataLossError(cat("metrics file ", metrics_path_, ": writing step ", r.global_step, "'s line: ",
                                     std::strerror(errno), "; free space or give --metrics another file"));
    }
  }
  if (r.skipped) {
    out_ << absl::StrFormat("step %d: OVERFLOW, step skipped (inf/NaN gradients in %s); loss scale %g -> %g\n",
                            r.global_step, r.overflow_in, r.loss_scale, r.next_loss_scale);
  }
  const bool print = r.global_step % print_every_ == 0 || r.global_step == total_steps_;
  if (print) {
    const double per_step = seconds_total_ / static_cast<double>(steps_seen_);
    const double eta = per_step * static_cast<double>(total_steps_ - r.global_step);
    out_ << absl::StrFormat("step %*d/%d | loss %.4f | lr %.3e | %s | %s | ETA %s\n",
                            static_cast<int>(std::to_string(total_steps_).size()), r.global_step, total_steps_,
                            r.loss, r.lr, throughput_brief(), memory_brief(mem, tier_), format_duration(eta));
  }
  if (totals.val_loss) out_ << absl::StrFormat("eval: step %d | val loss %.4f\n", r.global_step, *totals.val_loss);
  if (!print) {
    out_.flush();
    return absl::OkStatus();
  }
  if (wall_clock_) {
    out_ << absl::StrFormat("  time (ms) | forward: %.1f | backward: %.1f (recompute %.1f) | step: %.1f | "
                            "waiting for communication: %.1f%s\n",
                            1e3 * r.forward_s, 1e3 * r.backward_s, 1e3 * r.recompute_s, 1e3 * r.step_s,
                            1e3 * r.comm_wait_s,
                            r.pipeline_s > 0
                                ? absl::StrFormat(" | pipeline: %.1f, of it waiting for neighbours %.1f (%.0f%%, rank 0)",
                                                  1e3 * r.pipeline_s, 1e3 * r.pipeline_wait_s,
                                                  100.0 * r.pipeline_wait_s / r.pipeline_s)
                                : std::string());
  }
  if (memory_) {
    for (int ti = 0; ti < kNumTiers; ++ti) {
      if (mem.reserved[ti].peak == 0) continue;
      out_ << "  memory " << tier_name(static_cast<Tier>(ti)) << ":";
      for (int c = 0; c < kNumMemCategories; ++c) {
        const MemCounter& mc = mem.at(static_cast<Tier>(ti), static_cast<MemCategory>(c));
        out_ << " " << mem_category_name(static_cast<MemCategory>(c)) << " " << format_bytes(mc.current) << " (peak "
             << format_bytes(mc.peak) << ")";
      }
      out_ << " | reserved " << format_bytes(mem.reserved[ti].current) << "\n";
    }
  }
  out_.flush();
  return absl::OkStatus();
}

std::string ProgressReporter::throughput_brief() const {
  double seconds = 0, tokens = 0, samples = 0;
  for (const StepTiming& w : window_) {
    seconds += w.step_seconds;
    tokens += w.tokens;
    samples += w.samples;
  }
  if (seconds <= 0) return "? tok/s";
  std::string out = absl::StrFormat("%s tok/s %s samples/s", rate(tokens / seconds), rate(samples / seconds));
  if (model_.flops_per_token > 0) {
    const double tflops = model_.flops_per_token * tokens / seconds / 1e12;
    out += absl::StrFormat(" | %s TFLOP/s", tflops >= 10 ? absl::StrFormat("%.1f", tflops)
                                           : tflops >= 0.1 ? absl::StrFormat("%.2f", tflops)
                                                           : absl::StrFormat("%.3g", tflops));
    if (model_.peak_tflops > 0) {
      out += absl::StrFormat(" MFU %.1f%%", 100.0 * tflops / (model_.peak_tflops * model_.world_size));
    }
  }
  return out;
}

void ProgressReporter::summary() {
  MemorySnapshot mem = run_peaks_;
  merge_peaks(mem, MemoryTracker::global().snapshot());
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double tokens_per_s = seconds_total_ > 0 ? tokens_total_ / seconds_total_ : 0;
  out_ << absl::StrFormat("done: %d steps in %s, loss %.4f -> %.4f%s, %s tok/s average%s%s\n", steps_seen_,
                          format_duration(wall), first_loss_, last_loss_,
                          last_val_loss_ ? absl::StrFormat(" (val %.4f -> %.4f)", *first_val_loss_, *last_val_loss_)
                                         : std::string(),
                          rate(tokens_per_s),
                          model_.flops_per_token > 0
                              ? absl::StrFormat(", %.3g TFLOP/s%s", model_.flops_per_token * tokens_per_s / 1e12,
                                                model_.peak_tflops > 0
                                                    ? absl::StrFormat(" (MFU %.1f%%)",
                                                                      100.0 * model_.flops_per_token * tokens_per_s /
                                                                          1e12 / (model_.peak_tflops * model_.world_size))
                                                    : std::string())
                              : std::string(),
                          skipped_ > 0 ? absl::StrFormat(", %d steps skipped for overflow", skipped_) : "");
  out_ << "peak memory (" << tier_name(tier_) << "):";
  for (int c = 0; c < kNumMemCategories; ++c) {
    const int64_t peak = mem.at(tier_, static_cast<MemCategory>(c)).peak;
    if (peak > 0) out_ << " " << mem_category_name(static_cast<MemCategory>(c)) << " " << format_bytes(peak) << ",";
  }
  const int ti = static_cast<int>(tier_);
  out_ << " total " << format_bytes(mem.allocated[ti].peak) << " allocated, " << format_bytes(mem.reserved[ti].peak)
       << " reserved\n";
  const MemCounter& nvme = mem.allocated[static_cast<int>(Tier::kNvme)];
  if (nvme.peak > 0) {
    out_ << "peak on NVMe:";
    for (int c = 0; c < kNumMemCategories; ++c) {
      const int64_t peak = mem.at(Tier::kNvme, static_cast<MemCategory>(c)).peak;
      if (peak > 0) out_ << " " << mem_category_name(static_cast<MemCategory>(c)) << " " << format_bytes(peak);
    }
    out_ << " (swap files)\n";
  }
  if (tier_ == Tier::kHost) {
    out_ << "process RSS " << format_bytes(process_rss_bytes()) << ", peak " << format_bytes(process_peak_rss_bytes())
         << " (" << format_bytes(rss_start_)
         << " before the engine started; tracked reserved now " << format_bytes(mem.reserved[ti].current) << ")\n";
  }
  out_.flush();
}

}  // namespace zero
