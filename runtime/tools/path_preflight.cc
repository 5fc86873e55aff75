// The run's paths, checked at start; see path_preflight.h.
#include "runtime/tools/path_preflight.h"

#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "core/status.h"
#include "core/strings.h"
#include "runtime/checkpoint/checkpoint.h"

namespace zero {

namespace {

namespace fs = std::filesystem;

bool writable(const fs::path& p) { return ::access(p.c_str(), W_OK) == 0; }

// Whether a directory can be made inside `parent`, by making one and removing
// it: access() says yes to root everywhere, /proc included.
bool can_create_in(const fs::path& parent) {
  const fs::path probe = parent / cat(".zero-train-probe-", ::getpid());
  if (::mkdir(probe.c_str(), 0700) != 0) return false;
  ::rmdir(probe.c_str());
  return true;
}

// The nearest existing directory at or above `p` (what creating p needs).
fs::path existing_parent(fs::path p) {
  std::error_code ec;
  p = fs::absolute(p, ec);
  while (!p.empty() && !fs::exists(p, ec)) p = p.parent_path();
  return p;
}

absl::Status check_writable_dir(std::string_view key, const std::string& dir, bool may_create) {
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (fs::exists(st)) {
    if (!fs::is_directory(st)) return absl::InvalidArgumentError(cat(key, ": ", dir, " exists and is not a directory"));
    if (!writable(dir)) return absl::InvalidArgumentError(cat(key, ": ", dir, " is not writable by this user"));
    return absl::OkStatus();
  }
  if (!may_create) {
    return absl::InvalidArgumentError(cat(key, ": ", dir, " does not exist; create it or point ", key, " elsewhere"));
  }
  const fs::path parent = existing_parent(dir);
  if (parent.empty() || !fs::is_directory(parent, ec) || !writable(parent) || !can_create_in(parent)) {
    return absl::InvalidArgumentError(cat(key, ": ", dir, " does not exist and cannot be created (",
                                          parent.empty() ? std::string("no existing parent") : parent.string(),
                                          " is not a writable directory)"));
  }
  return absl::OkStatus();
}

// A file that exists and can be written, or can be created.
absl::Status check_writable_file(std::string_view key, const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (fs::exists(st) && (fs::is_directory(st) || !writable(path))) {
    return absl::InvalidArgumentError(cat(key, ": ", path, fs::is_directory(st) ? " is a directory" : " is not writable"));
  }
  const fs::path dir = fs::absolute(path, ec).parent_path();
  if (!fs::exists(st) && (!fs::is_directory(dir, ec) || !writable(dir) || !can_create_in(dir))) {
    return absl::InvalidArgumentError(cat(key, ": cannot create ", path, " (", dir.string(),
                                          fs::is_directory(dir, ec) ? " is not writable" : " does not exist", ")"));
  }
  return absl::OkStatus();
}

// A data path: a file or a directory that exists, or a glob pattern that
// matches something (what the loader reads; a FIFO would block it).
absl::Status check_data_path(std::string_view key, const std::string& path) {
  if (path.find_first_of("*?[") != std::string::npos) {
    glob_t g{};
    const int rc = ::glob(path.c_str(), 0, nullptr, &g);
    const size_t found = rc == 0 ? g.gl_pathc : 0;
    globfree(&g);
    if (found == 0) return absl::InvalidArgumentError(cat(key, ": the pattern ", path, " matches no file"));
    return absl::OkStatus();
  }
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) return absl::InvalidArgumentError(cat(key, ": ", path, " does not exist"));
  if (!fs::is_directory(st) && !fs::is_regular_file(st)) {
    return absl::InvalidArgumentError(cat(key, ": ", path, " is neither a file nor a directory"));
  }
  if (::access(path.c_str(), R_OK) != 0) return absl::InvalidArgumentError(cat(key, ": ", path, " is not readable"));
  return absl::OkStatus();
}

}  // namespace

absl::Status check_run_paths(const RunConfig& config, int rank) {
  const RunSection& run = config.run;
  std::error_code ec;
  if (!config.data.path.empty()) ZE_RETURN_IF_ERROR(check_data_path("data.path", config.data.path));
  if (!config.data.val_path.empty()) ZE_RETURN_IF_ERROR(check_data_path("data.val_path", config.data.val_path));
  if (!config.data.tokenizer.empty()) ZE_RETURN_IF_ERROR(check_data_path("data.tokenizer", config.data.tokenizer));
  // Rank 0 writes the monitors, under output_path (made if missing).
  for (const auto& [key, m] : {std::pair<std::string_view, const MonitorSection*>{"tensorboard.output_path",
                                                                                  &config.tensorboard},
                               {"csv_monitor.output_path", &config.csv_monitor}}) {
    if (!m->enabled || rank != 0) continue;
    ZE_RETURN_IF_ERROR(check_writable_dir(key, m->output_path.empty() ? "." : m->output_path, /*may_create=*/true));
  }
  // With node-local storage only rank 0's host must hold the checkpoint: a
  // host without it receives it when the run loads (node_local.h).
  const bool resume_here = rank == 0 || !config.switches.use_node_local_storage;
  if (!run.resume.empty() && run.resume != "auto" && resume_here && !fs::is_directory(run.resume, ec)) {
    return absl::InvalidArgumentError(cat("run.resume (--resume): ", run.resume,
                                          fs::exists(run.resume, ec) ? " is not a directory" : " does not exist",
                                          "; give a checkpoint directory, or \"auto\" with --save-dir"));
  }
  // init_from is not read when a checkpoint is resumed: one launch command
  // restarts its job after the source directory is gone.
  const absl::StatusOr<std::optional<ResumeTarget>> resumed = find_resume_target(run.resume, run.save_dir);
  const bool init_from_unused = resumed.ok() && resumed->has_value() && !fs::exists(run.init_from, ec);
  if (!run.init_from.empty() && !init_from_unused) {
    // A Hugging Face model directory, or one safetensors file.
    std::string weights = run.init_from;
    if (fs::is_directory(run.init_from, ec)) {
      for (const char* f : {"model.safetensors.index.json", "model.safetensors"}) {
        if (fs::exists(fs::path(run.init_from) / f, ec)) {
          weights = (fs::path(run.init_from) / f).string();
          break;
        }
      }
      if (weights == run.init_from) {
        return absl::InvalidArgumentError(cat("run.init_from (--init-from): ", run.init_from,
                                              " has neither model.safetensors nor model.safetensors.index.json"));
      }
    } else if (!fs::is_regular_file(run.init_from, ec)) {
      return absl::InvalidArgumentError(cat("run.init_from (--init-from): ", run.init_from,
                                            fs::exists(run.init_from, ec) ? " is not a file" : " does not exist",
                                            "; give a Hugging Face model directory or a safetensors file"));
    }
    if (::access(weights.c_str(), R_OK) != 0) {
      return absl::InvalidArgumentError(cat("run.init_from (--init-from): ", run.init_from, " is not readable"));
    }
  }
  if (!run.metrics.empty()) {
    std::string path = run.metrics;
    if (const size_t at = path.find("{rank}"); at != std::string::npos) path.replace(at, 6, cat(rank));
    ZE_RETURN_IF_ERROR(check_writable_file("run.metrics (--metrics)", path));
  }
  if (config.flops_profiler.enabled && !config.flops_profiler.output_file.empty()) {
    ZE_RETURN_IF_ERROR(check_writable_file("flops_profiler.output_file", config.flops_profiler.output_file));
  }
  if (!run.save_dir.empty()) {
    if (absl::Status s = check_writable_dir("run.save_dir (--save-dir)", run.save_dir, /*may_create=*/true); !s.ok()) {
      return s;
    }
  }
  const ZeroConfig& z = config.engine.zero;
  for (const auto& [key, offload] : {std::pair<std::string_view, const OffloadConfig*>{
                                         "zero_optimization.offload_optimizer.nvme_path", &z.offload_optimizer},
                                     {"zero_optimization.offload_param.nvme_path", &z.offload_param}}) {
    if (offload->device != OffloadDevice::kNvme) continue;
    if (offload->nvme_path.empty()) {
      return absl::InvalidArgumentError(cat(key, " is not set: with device \"nvme\" it names the directory (on an NVMe "
                                            "drive) that holds the swap files"));
    }
    if (absl::Status s = check_writable_dir(key, offload->nvme_path, /*may_create=*/false); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace zero
