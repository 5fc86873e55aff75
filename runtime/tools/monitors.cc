// DeepSpeed's csv_monitor and tensorboard; see monitors.h.
#include "runtime/tools/monitors.h"

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/status.h"
#include "core/strings.h"

namespace zero {

namespace {

// DeepSpeed's log_dir: os.path.join(output_path, job_name) ("" joins to job_name).
std::string monitor_dir(const MonitorSection& m) {
  return m.output_path.empty() ? m.job_name : (std::filesystem::path(m.output_path) / m.job_name).string();
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

double monitor_float(float f) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof(buf), f);
  return std::strtod(std::string(buf, r.ptr).c_str(), nullptr);
}

std::string shortest_text(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

absl::StatusOr<std::unique_ptr<Monitors>> Monitors::open(const RunConfig& c, int rank) {
  auto m = std::make_unique<Monitors>();
  if (rank != 0) return m;
  if (c.csv_monitor.enabled) {
    m->csv_dir_ = monitor_dir(c.csv_monitor);
    std::error_code ec;
    std::filesystem::create_directories(m->csv_dir_, ec);
    if (ec) {
      return absl::PermissionDeniedError(cat("csv_monitor: cannot create ", m->csv_dir_, " (output_path/job_name): ",
                                             ec.message()));
    }
    m->csv_enabled_ = true;
  }
  if (c.tensorboard.enabled) {
    absl::StatusOr<std::unique_ptr<TensorBoardWriter>> w = TensorBoardWriter::open(monitor_dir(c.tensorboard));
    if (!w.ok()) return annotate(w.status(), "tensorboard (output_path/job_name)");
    m->tensorboard_ = std::move(*w);
  }
  return m;
}

absl::Status Monitors::write_events(const std::vector<MonitorEvent>& events) {
  if (!enabled()) return absl::OkStatus();
  const double now = unix_seconds();
  for (const MonitorEvent& e : events) {
    if (csv_enabled_) {
      std::string file = e.name;
      for (char& ch : file) {
        if (ch == '/' || ch == ' ') ch = '_';
      }
      const std::string path = cat(csv_dir_, "/", file, ".csv");
      bool& started = csv_started_[path];
      // A resumed run appends below the header the first run wrote (DeepSpeed
      // would write a second one).
      if (!started) {
        std::error_code ec;
        started = std::filesystem::exists(path, ec) && std::filesystem::file_size(path, ec) > 0;
      }
      std::ofstream f(path, std::ios::app | std::ios::binary);
      if (!f) return absl::PermissionDeniedError(cat("csv_monitor: cannot open ", path, ": ", std::strerror(errno)));
      if (!started) {
        const size_t slash = e.name.rfind('/');
        f << "step," << (slash == std::string::npos ? e.name : e.name.substr(slash + 1)) << "\r\n";
        started = true;
      }
      f << e.step << "," << shortest_text(e.value) << "\r\n";
      f.flush();
      // A full disk shows here (the flush is the write): the run ends naming the file.
      if (!f) return absl::DataLossError(cat("csv_monitor: writing ", path, ": ", std::strerror(errno)));
    }
    if (tensorboard_ != nullptr) {
      ZE_RETURN_IF_ERROR(tensorboard_->add_scalar(e.name, static_cast<float>(e.value), e.step, now));
    }
  }
  if (tensorboard_ != nullptr) ZE_RETURN_IF_ERROR(tensorboard_->flush());
  return absl::OkStatus();
}

std::string Monitors::describe() const {
  std::string out;
  if (csv_enabled_) out += cat("csv_monitor: ", csv_dir_, "/<metric>.csv");
  if (tensorboard_ != nullptr) out += cat(out.empty() ? "" : "; ", "tensorboard: ", tensorboard_->path());
  return out;
}

}  // namespace zero
