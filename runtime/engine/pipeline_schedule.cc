// Pipeline schedules; see pipeline_schedule.h.
#include "runtime/engine/pipeline_schedule.h"

#include <algorithm>

#include "core/check.h"
#include "core/strings.h"

namespace zero {

std::string_view pipeline_schedule_name(PipelineScheduleKind k) {
  return k == PipelineScheduleKind::k1F1B ? "1f1b" : "gpipe";
}

absl::StatusOr<PipelineScheduleKind> parse_pipeline_schedule(std::string_view name) {
  if (name == "1f1b") return PipelineScheduleKind::k1F1B;
  if (name == "gpipe") return PipelineScheduleKind::kGPipe;
  return absl::InvalidArgumentError(cat("unknown pipeline schedule \"", name, "\" (expected \"1f1b\" or \"gpipe\")"));
}

std::vector<PipeInstruction> pipeline_compute_order(PipelineScheduleKind kind, int stages, int stage,
                                                    int micro_batches) {
  ZE_CHECK(stages >= 1 && stage >= 0 && stage < stages && micro_batches >= 1)
      << "stage " << stage << " of " << stages << ", " << micro_batches << " micro-batches";
  std::vector<PipeInstruction> out;
  const int m = micro_batches;
  if (kind == PipelineScheduleKind::kGPipe) {
    for (int i = 0; i < m; ++i) out.push_back({PipeOp::kForward, i});
    for (int i = 0; i < m; ++i) out.push_back({PipeOp::kBackward, i});
    return out;
  }
  const int warmup = std::min(stages - stage - 1, m);
  int f = 0, b = 0;
  for (; f < warmup; ++f) out.push_back({PipeOp::kForward, f});
  while (f < m) {  // steady state: one forward, one backward
    out.push_back({PipeOp::kForward, f++});
    out.push_back({PipeOp::kBackward, b++});
  }
  while (b < m) out.push_back({PipeOp::kBackward, b++});  // cool-down
  return out;
}

std::vector<PipeInstruction> pipeline_instructions(PipelineScheduleKind kind, int stages, int stage,
                                                   int micro_batches) {
  const std::vector<PipeInstruction> compute = pipeline_compute_order(kind, stages, stage, micro_batches);
  const bool first = stage == 0, last = stage == stages - 1;
  // What a compute step needs received first, and what it sends after
  // (-1: the previous stage, +1: the next, 0: nothing).
  auto recv_peer = [&](const PipeInstruction& c) {
    if (c.op == PipeOp::kForward) return first ? 0 : -1;
    return last ? 0 : 1;
  };
  auto send_peer = [&](const PipeInstruction& c) {
    if (c.op == PipeOp::kForward) return last ? 0 : 1;
    return first ? 0 : -1;
  };
  auto recv = [](const PipeInstruction& c) {
    return PipeInstruction{c.op == PipeOp::kForward ? PipeOp::kRecvActivation : PipeOp::kRecvGrad, c.micro};
  };
  std::vector<PipeInstruction> out;
  if (!compute.empty() && recv_peer(compute[0]) != 0) out.push_back(recv(compute[0]));
  for (size_t i = 0; i < compute.size(); ++i) {
    const PipeInstruction& c = compute[i];
    out.push_back(c);
    const int to = send_peer(c);
    const int from = i + 1 < compute.size() ? recv_peer(compute[i + 1]) : 0;
    if (to != 0 && to == from) {
      out.push_back({c.op == PipeOp::kForward ? PipeOp::kSendActivationRecvGrad : PipeOp::kSendGradRecvActivation,
                     c.micro, compute[i + 1].micro});
      continue;
    }
    if (to != 0) out.push_back({c.op == PipeOp::kForward ? PipeOp::kSendActivation : PipeOp::kSendGrad, c.micro});
    if (from != 0) out.push_back(recv(compute[i + 1]));
  }
  return out;
}

int max_micro_batches_in_flight(const std::vector<PipeInstruction>& order) {
  int alive = 0, most = 0;
  for (const PipeInstruction& c : order) {
    if (c.op == PipeOp::kForward) most = std::max(most, ++alive);
    if (c.op == PipeOp::kBackward) --alive;
  }
  return most;
}

double ideal_bubble_fraction(int stages, int micro_batches) {
  return static_cast<double>(stages - 1) / static_cast<double>(micro_batches + stages - 1);
}

std::string describe(const std::vector<PipeInstruction>& order) {
  std::string out;
  for (const PipeInstruction& c : order) {
    if (!out.empty()) out += ' ';
    switch (c.op) {
      case PipeOp::kForward: out += cat("F", c.micro); break;
      case PipeOp::kBackward: out += cat("B", c.micro); break;
      case PipeOp::kRecvActivation: out += cat("recv-act", c.micro); break;
      case PipeOp::kRecvGrad: out += cat("recv-grad", c.micro); break;
      case PipeOp::kSendActivation: out += cat("send-act", c.micro); break;
      case PipeOp::kSendGrad: out += cat("send-grad", c.micro); break;
      case PipeOp::kSendActivationRecvGrad: out += cat("send-act", c.micro, "/recv-grad", c.recv_micro); break;
      case PipeOp::kSendGradRecvActivation: out += cat("send-grad", c.micro, "/recv-act", c.recv_micro); break;
    }
  }
  return out;
}

}  // namespace zero
