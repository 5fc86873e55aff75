// Pipeline schedules; see pipeline_schedule.h.
#include "runtime/engine/pipeline_schedule.h"

#include <algorithm>
#include <tuple>

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

absl::Status check_interleaving(PipelineScheduleKind kind, int stages, int micro_batches, int chunks) {
  if (chunks < 1) return absl::InvalidArgumentError(cat(chunks, " model chunks per stage: must be at least 1"));
  if (chunks == 1) return absl::OkStatus();
  if (kind != PipelineScheduleKind::k1F1B) {
    return absl::InvalidArgumentError(cat(chunks, " model chunks per stage under schedule \"",
                                          pipeline_schedule_name(kind),
                                          "\": interleaving is a 1F1B schedule (Megatron's); use schedule \"1f1b\""));
  }
  if (stages < 2) {
    return absl::InvalidArgumentError(
        cat(chunks, " model chunks on ", stages, " pipeline stage: interleaving needs at least 2 stages"));
  }
  if (micro_batches % stages != 0) {
    return absl::InvalidArgumentError(cat(
        micro_batches, " micro-batches (gradient_accumulation_steps) for ", stages, " stages with ", chunks,
        " model chunks each: the interleaved schedule runs micro-batches in groups of P per chunk (Megatron's rule), "
        "so the count must be a multiple of the stages; use ", (micro_batches / stages + 1) * stages));
  }
  return absl::OkStatus();
}

namespace {

// Megatron's interleaved 1F1B for stage `stage` (see the header).
std::vector<PipeInstruction> interleaved_compute_order(int stages, int stage, int micro_batches, int chunks) {
  const int p = stages, v = chunks, total = micro_batches * chunks;
  const int warmup = micro_batches == p ? total : std::min(2 * (p - stage - 1) + (v - 1) * p, total);
  // The k-th forward (backward) of the stage: its chunk and micro-batch.
  auto at = [&](PipeOp op, int k) {
    const int in_group = k % (p * v);
    const int chunk = op == PipeOp::kForward ? in_group / p : v - 1 - in_group / p;
    return PipeInstruction{op, (k / (p * v)) * p + k % p, -1, chunk};
  };
  std::vector<PipeInstruction> out;
  int f = 0, b = 0;
  for (; f < warmup; ++f) out.push_back(at(PipeOp::kForward, f));
  while (f < total) {
    out.push_back(at(PipeOp::kForward, f++));
    out.push_back(at(PipeOp::kBackward, b++));
  }
  while (b < total) out.push_back(at(PipeOp::kBackward, b++));
  return out;
}

// The interleaved schedule's transfers, placed by simulating the stages
// together (see the header).
std::vector<PipeInstruction> interleaved_instructions(int stages, int stage, int micro_batches, int chunks) {
  const int p = stages, v = chunks, m_count = micro_batches, last_virtual = v * p - 1;
  std::vector<std::vector<PipeInstruction>> order(p);
  for (int s = 0; s < p; ++s) order[s] = interleaved_compute_order(p, s, m_count, v);
  // When each (forward or backward, virtual stage, micro-batch)'s output exists; -1: not yet.
  auto key = [&](PipeOp op, int virtual_stage, int micro) {
    return (static_cast<size_t>(op == PipeOp::kBackward) * (last_virtual + 1) + virtual_stage) * m_count + micro;
  };
  std::vector<double> produced(2 * static_cast<size_t>(last_virtual + 1) * m_count, -1.0);
  struct Event {
    double time;
    int kind;  // 0: a transfer, 1: a compute (a transfer at time t comes before the computes starting at t)
    int rank;  // the compute's stage, or the transfer's sender
    size_t seq;
    int from, to;  // transfer: sender, receiver
    PipeInstruction sent, received, compute;
  };
  std::vector<Event> events;
  std::vector<size_t> next(p, 0);
  std::vector<double> free_at(p, 0.0);
  for (size_t done = 0, all = static_cast<size_t>(2 * v * m_count) * p; done < all; ++done) {
    // The stage whose next compute can start first (its input produced), the lowest on a tie.
    int best = -1;
    double best_start = 0;
    for (int s = 0; s < p; ++s) {
      if (next[s] == order[s].size()) continue;
      const PipeInstruction& c = order[s][next[s]];
      const int vs = c.chunk * p + s;
      // Its input: the previous virtual stage's activation, the next one's gradient (none at the ends).
      const int from_vs = c.op == PipeOp::kForward ? vs - 1 : vs + 1;
      const double input = from_vs < 0 || from_vs > last_virtual ? 0.0 : produced[key(c.op, from_vs, c.micro)];
      if (input < 0) continue;
      const double ready = std::max(free_at[s], input);
      if (best < 0 || ready < best_start) {
        best = s;
        best_start = ready;
      }
    }
    ZE_CHECK(best >= 0) << "the interleaved schedule deadlocks: " << p << " stages, " << m_count
                        << " micro-batches, " << v << " chunks";
    const PipeInstruction c = order[best][next[best]++];
    const bool forward = c.op == PipeOp::kForward;
    const double end = best_start + (forward ? 1.0 : 2.0);
    free_at[best] = end;
    const int vs = c.chunk * p + best;
    produced[key(c.op, vs, c.micro)] = end;
    events.push_back({best_start, 1, best, events.size(), -1, -1, {}, {}, c});
    // Its output to the next virtual stage (a forward) or the previous one (a backward).
    const int to_vs = forward ? vs + 1 : vs - 1;
    if (to_vs < 0 || to_vs > last_virtual) continue;
    const int to = to_vs % p, to_chunk = to_vs / p;
    const PipeInstruction sent{forward ? PipeOp::kSendActivation : PipeOp::kSendGrad, c.micro, -1, c.chunk};
    const PipeInstruction received{forward ? PipeOp::kRecvActivation : PipeOp::kRecvGrad, c.micro, -1, to_chunk};
    events.push_back({end, 0, best, events.size(), best, to, sent, received, {}});
  }
  std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    return std::tie(a.time, a.kind, a.rank, a.seq) < std::tie(b.time, b.kind, b.rank, b.seq);
  });
  std::vector<PipeInstruction> out;
  for (const Event& e : events) {
    if (e.kind == 1 && e.rank == stage) out.push_back(e.compute);
    if (e.kind == 0 && e.from == stage) out.push_back(e.sent);
    if (e.kind == 0 && e.to == stage) out.push_back(e.received);
  }
  return out;
}

// A compute's transfers on stage `stage`: the receive of its input and the
// send of its output, each with its peer stage (-1: none, at the ends of the
// virtual pipeline; the receive's chunk is the consumer's, the send's the
// producer's, as the engine's slots are kept).
struct Transfers {
  PipeInstruction recv, send;
  int recv_from = -1, send_to = -1;
};

Transfers transfers_of(const PipeInstruction& c, int stages, int stage, int chunks) {
  const bool forward = c.op == PipeOp::kForward;
  const int vs = c.chunk * stages + stage, last_vs = chunks * stages - 1;
  const int from_vs = forward ? vs - 1 : vs + 1, to_vs = forward ? vs + 1 : vs - 1;
  Transfers t;
  if (from_vs >= 0 && from_vs <= last_vs) {
    t.recv = {forward ? PipeOp::kRecvActivation : PipeOp::kRecvGrad, c.micro, -1, c.chunk};
    t.recv_from = from_vs % stages;
  }
  if (to_vs >= 0 && to_vs <= last_vs) {
    t.send = {forward ? PipeOp::kSendActivation : PipeOp::kSendGrad, c.micro, -1, c.chunk};
    t.send_to = to_vs % stages;
  }
  return t;
}

// The early-receive program (see the header).
std::vector<PipeInstruction> early_receive_instructions(PipelineScheduleKind kind, int stages, int stage,
                                                        int micro_batches, int chunks) {
  const std::vector<PipeInstruction> compute = pipeline_compute_order(kind, stages, stage, micro_batches, chunks);
  auto post_receive = [&](std::vector<PipeInstruction>& out, size_t i) {
    if (i >= compute.size()) return;
    if (const Transfers t = transfers_of(compute[i], stages, stage, chunks); t.recv_from >= 0) out.push_back(t.recv);
  };
  std::vector<PipeInstruction> out;
  post_receive(out, 0);
  for (size_t i = 0; i < compute.size(); ++i) {
    post_receive(out, i + 1);
    out.push_back(compute[i]);
    if (const Transfers t = transfers_of(compute[i], stages, stage, chunks); t.send_to >= 0) out.push_back(t.send);
  }
  return out;
}

}  // namespace

std::vector<PipeInstruction> pipeline_compute_order(PipelineScheduleKind kind, int stages, int stage,
                                                    int micro_batches, int chunks) {
  ZE_CHECK(stages >= 1 && stage >= 0 && stage < stages && micro_batches >= 1)
      << "stage " << stage << " of " << stages << ", " << micro_batches << " micro-batches";
  if (chunks != 1) {
    const absl::Status ok = check_interleaving(kind, stages, micro_batches, chunks);
    ZE_CHECK(ok.ok()) << ok.message();
    return interleaved_compute_order(stages, stage, micro_batches, chunks);
  }
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
                                                   int micro_batches, int chunks, bool early_receives) {
  if (early_receives) return early_receive_instructions(kind, stages, stage, micro_batches, chunks);
  if (chunks != 1) {
    const absl::Status ok = check_interleaving(kind, stages, micro_batches, chunks);
    ZE_CHECK(ok.ok()) << ok.message();
    ZE_CHECK(stage >= 0 && stage < stages) << "stage " << stage << " of " << stages;
    return interleaved_instructions(stages, stage, micro_batches, chunks);
  }
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

double interleaved_bubble_fraction(int stages, int micro_batches, int chunks) {
  return static_cast<double>(stages - 1) / (static_cast<double>(chunks) * micro_batches);
}

std::string describe(const std::vector<PipeInstruction>& order) {
  const bool chunked =
      std::any_of(order.begin(), order.end(), [](const PipeInstruction& c) { return c.chunk != 0; });
  std::string out;
  for (const PipeInstruction& c : order) {
    if (!out.empty()) out += ' ';
    const std::string m = chunked ? cat(c.micro, "c", c.chunk) : cat(c.micro);
    switch (c.op) {
      case PipeOp::kForward: out += cat("F", m); break;
      case PipeOp::kBackward: out += cat("B", m); break;
      case PipeOp::kRecvActivation: out += cat("recv-act", m); break;
      case PipeOp::kRecvGrad: out += cat("recv-grad", m); break;
      case PipeOp::kSendActivation: out += cat("send-act", m); break;
      case PipeOp::kSendGrad: out += cat("send-grad", m); break;
      case PipeOp::kSendActivationRecvGrad: out += cat("send-act", c.micro, "/recv-grad", c.recv_micro); break;
      case PipeOp::kSendGradRecvActivation: out += cat("send-grad", c.micro, "/recv-act", c.recv_micro); break;
    }
  }
  return out;
}

}  // namespace zero
