// The communication log; see comm_log.h.
#include "comm/comm_log.h"

#include "absl/strings/str_format.h"
#include "core/check.h"
#include "core/memory_tracker.h"
#include "core/strings.h"

namespace zero {

namespace {

constexpr std::string_view kNames[kCommOpCount] = {
    "all_reduce", "reduce_scatter", "all_gather", "all_to_all", "all_to_all_v", "broadcast", "send", "recv",
    "send_recv", "barrier", "all_reduce_scalars",
};

struct Alias {
  std::string_view name;
  CommOp op;
};
// DeepSpeed's names of the same operations.
constexpr Alias kAliases[] = {
    {"all_gather_into_tensor", CommOp::kAllGather},
    {"reduce_scatter_tensor", CommOp::kReduceScatter},
    {"all_to_all_single", CommOp::kAllToAll},
    {"isend", CommOp::kSend},
    {"irecv", CommOp::kRecv},
};

std::string valid_names() {
  std::string s;
  for (const std::string& n : comm_op_names()) s += cat(s.empty() ? "" : ", ", n);
  return s;
}

std::string_view or_dash(std::string_view s) { return s.empty() ? std::string_view("-") : s; }

}  // namespace

std::vector<std::string> comm_op_names() {
  std::vector<std::string> out(std::begin(kNames), std::end(kNames));
  for (const Alias& a : kAliases) out.emplace_back(a.name);
  return out;
}

std::string_view comm_op_name(CommOp op) {
  const int i = static_cast<int>(op);
  ZE_CHECK(i >= 0 && i < kCommOpCount) << "CommOp " << i;
  return kNames[i];
}

absl::StatusOr<CommOp> parse_comm_op(std::string_view name) {
  for (int i = 0; i < kCommOpCount; ++i) {
    if (kNames[i] == name) return static_cast<CommOp>(i);
  }
  for (const Alias& a : kAliases) {
    if (a.name == name) return a.op;
  }
  return absl::InvalidArgumentError(
      cat("comms_logger: unknown op \"", name, "\" in prof_ops; the ops that can be profiled are ", valid_names()));
}

absl::StatusOr<std::vector<CommOp>> parse_comm_ops(const std::vector<std::string>& names) {
  std::vector<CommOp> ops;
  for (const std::string& n : names) {
    absl::StatusOr<CommOp> op = parse_comm_op(n);
    if (!op.ok()) return op.status();
    ops.push_back(*op);
  }
  return ops;
}

double comm_bus_factor(CommOp op, int world_size) {
  const double n = static_cast<double>(world_size < 1 ? 1 : world_size);
  switch (op) {
    case CommOp::kAllReduce:
    case CommOp::kAllReduceScalars: return 2.0 * (n - 1.0) / n;
    case CommOp::kReduceScatter:
    case CommOp::kAllGather:
    case CommOp::kAllToAll:
    case CommOp::kAllToAllV: return (n - 1.0) / n;
    case CommOp::kBroadcast:
    case CommOp::kSend:
    case CommOp::kRecv:
    case CommOp::kSendRecv: return 1.0;
    case CommOp::kBarrier: return 0.0;
  }
  return 0.0;
}

double CommLogRow::algbw_gbps() const {
  const double avg_s = avg_ms() / 1e3;
  return avg_s > 0 ? static_cast<double>(message_bytes) / avg_s / 1e9 : 0.0;
}

CommLog::CommLog(std::vector<CommOp> ops, VerboseSink verbose) : verbose_(std::move(verbose)) {
  for (bool& e : enabled_) e = ops.empty();
  for (CommOp op : ops) enabled_[static_cast<int>(op)] = true;
}

absl::StatusOr<std::unique_ptr<CommLog>> CommLog::create(const std::vector<std::string>& prof_ops,
                                                          VerboseSink verbose) {
  absl::StatusOr<std::vector<CommOp>> ops = parse_comm_ops(prof_ops);
  if (!ops.ok()) return ops.status();
  return std::make_unique<CommLog>(std::move(ops).value(), std::move(verbose));
}

void CommLog::record(CommOp op, int64_t message_bytes, int world_size, double seconds, std::string_view group) {
  if (!records(op)) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Totals& t = rows_[Key(static_cast<int>(op), message_bytes, std::string(group), world_size)];
    t.count += 1;
    t.total_ms += seconds * 1e3;
  }
  // Outside the lock: a sink that reads the log does not deadlock.
  if (verbose_) verbose_(format_op(op, message_bytes, world_size, seconds, group));
}

std::string CommLog::format_op(CommOp op, int64_t message_bytes, int world_size, double seconds,
                               std::string_view group) {
  CommLogRow one{op, std::string(group), world_size, message_bytes, 1, seconds * 1e3};
  return absl::StrFormat("comm op: %s | group: %s (%d ranks) | msg size: %s | latency: %.3f ms | "
                         "algbw: %.2f GB/s | busbw: %.2f GB/s",
                         std::string(comm_op_name(op)), std::string(or_dash(group)), world_size,
                         format_bytes(message_bytes), one.total_ms, one.algbw_gbps(), one.busbw_gbps());
}

std::vector<CommLogRow> CommLog::rows() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<CommLogRow> out;
  out.reserve(rows_.size());
  for (const auto& [key, t] : rows_) {
    const auto& [op, bytes, group, world] = key;
    out.push_back(CommLogRow{static_cast<CommOp>(op), group, world, bytes, t.count, t.total_ms});
  }
  return out;
}

std::string CommLog::summary() const {
  const std::vector<CommLogRow> rows = this->rows();
  if (rows.empty()) return "comms_logger: no collectives recorded\n";
  constexpr const char* kRow = "%-20s %-10s %6s %14s %9s %16s %14s %13s %13s\n";
  std::string out = absl::StrFormat(kRow, "Comm. Op", "Group", "Ranks", "Message Size", "Count", "Total Lat (ms)",
                                    "Avg Lat (ms)", "algbw (GB/s)", "busbw (GB/s)");
  for (const CommLogRow& r : rows) {
    out += absl::StrFormat(kRow, std::string(comm_op_name(r.op)), std::string(or_dash(r.group)),
                           cat(r.world_size), format_bytes(r.message_bytes), cat(r.count),
                           absl::StrFormat("%.3f", r.total_ms), absl::StrFormat("%.3f", r.avg_ms()),
                           absl::StrFormat("%.2f", r.algbw_gbps()), absl::StrFormat("%.2f", r.busbw_gbps()));
  }
  return out;
}

void CommLog::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  rows_.clear();
}

}  // namespace zero
