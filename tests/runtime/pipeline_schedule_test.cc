// The pipeline schedules as lists (runtime/engine/pipeline_schedule.h),
// without running a model: Megatron's interleaved 1F1B written out by hand
// for P = 2, v = 2, M = 4; and for many (P, v, M) the P stages' instruction
// lists run together by an executor of our own, stricter than the engine
// (every instruction blocks in issue order, a transfer happens only when
// the sender's and the receiver's next instructions are the matching pair),
// which checks that they finish (no deadlock), that every transfer carries
// what its receiver expects (kind, micro-batch, the next / previous virtual
// stage's chunk: with P = 2 both directions join the same two ranks), that
// each forward has its input and precedes its backward, that every
// (chunk, micro-batch) runs once each way, that at most
// min(2 (P - s - 1) + (v - 1) P + 1, v M) pairs are alive on stage s, and
// that with a forward taking 1 and a backward 2, run as soon as their input
// exists, the stages idle exactly (P - 1) / (v M) of their compute time,
// Megatron's bubble (v = 1 too). Refusals name the rule that failed.
// The early-receive program (EarlyReceiveScheduleTest): the plain program's
// computes, each receive posted one compute ahead of its consumer, and the
// P lists run together under MPI's rules (non-blocking posts matched in
// order per direction, rendezvous sends) finish with every message where it
// belongs.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/strings.h"
#include "runtime/engine/pipeline_schedule.h"

namespace zero {
namespace {

constexpr PipelineScheduleKind k1F1B = PipelineScheduleKind::k1F1B;

TEST(InterleavedScheduleTest, MegatronsOrderForTwoStagesTwoChunksFourMicroBatches) {
  // Forwards in groups of P micro-batches per chunk, backwards from the last
  // chunk; stage 0 warms up 2 (P - 1) + (v - 1) P = 4 forwards, stage 1 two.
  EXPECT_EQ(describe(pipeline_compute_order(k1F1B, 2, 0, 4, 2)),
            "F0c0 F1c0 F0c1 F1c1 F2c0 B0c1 F3c0 B1c1 F2c1 B0c0 F3c1 B1c0 B2c1 B3c1 B2c0 B3c0");
  EXPECT_EQ(describe(pipeline_compute_order(k1F1B, 2, 1, 4, 2)),
            "F0c0 F1c0 F0c1 B0c1 F1c1 B1c1 F2c0 B0c0 F3c0 B1c0 F2c1 B2c1 F3c1 B3c1 B2c0 B3c0");
  // M = P: every forward first (Megatron's special case).
  EXPECT_EQ(describe(pipeline_compute_order(k1F1B, 2, 1, 2, 2)), "F0c0 F1c0 F0c1 F1c1 B0c1 B1c1 B0c0 B1c0");
  // One chunk is today's 1F1B, instructions included.
  EXPECT_EQ(pipeline_instructions(k1F1B, 4, 1, 8, 1), pipeline_instructions(k1F1B, 4, 1, 8));
  EXPECT_EQ(describe(pipeline_instructions(k1F1B, 2, 0, 3, 1)),
            "F0 send-act0 F1 send-act1/recv-grad0 B0 F2 send-act2/recv-grad1 B1 recv-grad2 B2");
}

TEST(InterleavedScheduleTest, RefusesWhatItCannotRun) {
  EXPECT_TRUE(check_interleaving(PipelineScheduleKind::kGPipe, 4, 8, 1).ok());
  const absl::Status gpipe = check_interleaving(PipelineScheduleKind::kGPipe, 2, 4, 2);
  EXPECT_EQ(gpipe.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(gpipe.message().find("use schedule \"1f1b\""), std::string::npos) << gpipe;
  const absl::Status odd = check_interleaving(k1F1B, 4, 6, 2);
  EXPECT_NE(odd.message().find("6 micro-batches (gradient_accumulation_steps) for 4 stages"), std::string::npos)
      << odd;
  EXPECT_NE(odd.message().find("use 8"), std::string::npos) << odd;
  EXPECT_FALSE(check_interleaving(k1F1B, 1, 4, 2).ok());
  EXPECT_DOUBLE_EQ(interleaved_bubble_fraction(4, 8, 2), 3.0 / 16.0);
  EXPECT_DOUBLE_EQ(interleaved_bubble_fraction(4, 8, 1), 3.0 / 8.0);
}

struct Outcome {
  std::string error;  // empty: every stage finished
};

// Runs the P lists together as described at the top of the file.
Outcome execute(const std::vector<std::vector<PipeInstruction>>& lists, int p, int v, int m_count) {
  Outcome out;
  std::vector<size_t> pc(p, 0);
  // Per stage: the (op, chunk, micro) received, forwarded and backwarded.
  std::vector<std::set<std::tuple<int, int, int>>> received(p);
  std::vector<std::set<std::pair<int, int>>> forwarded(p), backwarded(p);
  auto is_send = [](PipeOp op) { return op == PipeOp::kSendActivation || op == PipeOp::kSendGrad; };
  auto is_recv = [](PipeOp op) { return op == PipeOp::kRecvActivation || op == PipeOp::kRecvGrad; };
  for (;;) {
    bool moved = false, done = true;
    for (int s = 0; s < p; ++s) {
      if (pc[s] == lists[s].size()) continue;
      done = false;
      const PipeInstruction& in = lists[s][pc[s]];
      const int vs = in.chunk * p + s;
      const std::string where = cat("stage ", s, " instruction ", pc[s], " (", describe({in}), ")");
      if (in.op == PipeOp::kForward || in.op == PipeOp::kBackward) {
        const bool fwd = in.op == PipeOp::kForward;
        const int from_vs = fwd ? vs - 1 : vs + 1;
        const bool needs_input = from_vs >= 0 && from_vs < v * p;
        const PipeOp recv_op = fwd ? PipeOp::kRecvActivation : PipeOp::kRecvGrad;
        if (needs_input && received[s].count({static_cast<int>(recv_op), in.chunk, in.micro}) == 0) {
          out.error = where + ": its input was not received before it";
          return out;
        }
        auto& mine = fwd ? forwarded[s] : backwarded[s];
        if (!mine.insert({in.chunk, in.micro}).second) {
          out.error = where + ": runs twice";
          return out;
        }
        if (!fwd && forwarded[s].count({in.chunk, in.micro}) == 0) {
          out.error = where + ": backward before its forward";
          return out;
        }
        ++pc[s];
        moved = true;
      } else if (is_send(in.op)) {
        const bool act = in.op == PipeOp::kSendActivation;
        const int to_vs = act ? vs + 1 : vs - 1;
        if (to_vs < 0 || to_vs >= v * p) {
          out.error = where + ": sends past the end of the pipeline";
          return out;
        }
        const int peer = to_vs % p;
        if (pc[peer] == lists[peer].size() || !is_recv(lists[peer][pc[peer]].op)) continue;  // not yet posted
        const PipeInstruction& r = lists[peer][pc[peer]];
        // The receiver's next receive: from this stage? (P = 2: the other stage either way.)
        const int r_from = r.op == PipeOp::kRecvActivation ? (peer + p - 1) % p : (peer + 1) % p;
        if (r_from != s) continue;  // it waits for another neighbour first
        const PipeOp want = act ? PipeOp::kRecvActivation : PipeOp::kRecvGrad;
        if (r.op != want || r.micro != in.micro || r.chunk != to_vs / p) {
          out.error = cat(where, " meets stage ", peer, "'s ", describe({r}), ": a transfer matched to another");
          return out;
        }
        received[peer].insert({static_cast<int>(r.op), r.chunk, r.micro});
        ++pc[s];
        ++pc[peer];
        moved = true;
      } else if (!is_recv(in.op)) {
        out.error = where + ": a combined exchange in an interleaved list";
        return out;
      }
    }
    if (done) break;
    if (!moved) {
      out.error = "deadlock; next instructions:";
      for (int s = 0; s < p; ++s)
        out.error += cat(" stage ", s, ": ", pc[s] < lists[s].size() ? describe({lists[s][pc[s]]}) : "done");
      return out;
    }
  }
  for (int s = 0; s < p; ++s) {
    if (forwarded[s].size() != static_cast<size_t>(v * m_count) ||
        backwarded[s].size() != static_cast<size_t>(v * m_count)) {
      out.error = cat("stage ", s, " ran ", forwarded[s].size(), " forwards and ", backwarded[s].size(),
                      " backwards of ", v * m_count);
    }
  }
  return out;
}

// Megatron's bubble of the compute orders: each stage runs its forwards (1
// unit) and backwards (2) in order, each as soon as the stage is free and its
// input exists (transfers take no time, none waits for another: the
// asynchronous ideal). Idle time over compute time, on the stage that ends
// last: (P - 1) (f + b) over v M (f + b).
double timed_bubble(int p, int v, int m) {
  std::vector<std::vector<PipeInstruction>> orders;
  for (int s = 0; s < p; ++s) orders.push_back(pipeline_compute_order(k1F1B, p, s, m, v));
  std::map<std::tuple<int, int, int>, double> produced;  // (op, virtual stage, micro) -> when
  std::vector<size_t> next(p, 0);
  std::vector<double> free_at(p, 0.0);
  for (bool moved = true; moved;) {
    moved = false;
    for (int s = 0; s < p; ++s) {
      while (next[s] < orders[s].size()) {
        const PipeInstruction& c = orders[s][next[s]];
        const int vs = c.chunk * p + s, from = c.op == PipeOp::kForward ? vs - 1 : vs + 1;
        double start = free_at[s];
        if (from >= 0 && from < v * p) {
          auto it = produced.find({static_cast<int>(c.op), from, c.micro});
          if (it == produced.end()) break;
          start = std::max(start, it->second);
        }
        free_at[s] = start + (c.op == PipeOp::kForward ? 1.0 : 2.0);
        produced[{static_cast<int>(c.op), vs, c.micro}] = free_at[s];
        ++next[s];
        moved = true;
      }
    }
  }
  const double compute = 3.0 * v * m;
  return (*std::max_element(free_at.begin(), free_at.end()) - compute) / compute;
}

TEST(InterleavedScheduleTest, StagesTogetherFinishMatchAndKeepMegatronsBubble) {
  for (int p : {2, 3, 4})
    for (int v : {1, 2, 3, 4})
      for (int groups : {1, 2, 3, 4}) {
        const int m = groups * p;
        const std::string what = cat("P=", p, " v=", v, " M=", m);
        std::vector<std::vector<PipeInstruction>> lists;
        for (int s = 0; s < p; ++s) {
          lists.push_back(pipeline_instructions(k1F1B, p, s, m, v));
          std::vector<PipeInstruction> compute;
          for (const PipeInstruction& in : lists.back())
            if (in.op == PipeOp::kForward || in.op == PipeOp::kBackward) compute.push_back(in);
          EXPECT_EQ(compute, pipeline_compute_order(k1F1B, p, s, m, v)) << what << " stage " << s;
          const int bound = std::min(2 * (p - s - 1) + (v - 1) * p + 1, v * m);
          EXPECT_LE(max_micro_batches_in_flight(compute), m == p ? v * m : bound) << what << " stage " << s;
        }
        if (v > 1) {  // (one chunk's lists combine exchanges: the plain pipeline's test runs them)
          const Outcome o = execute(lists, p, v, m);
          ASSERT_EQ(o.error, "") << what;
        }
        EXPECT_NEAR(timed_bubble(p, v, m), interleaved_bubble_fraction(p, m, v), 1e-12) << what;
      }
}

// The executor itself catches what it exists for: a pair of receives posted
// in the other order than their sends, and a stage that never sends.
TEST(InterleavedScheduleTest, TheExecutorCatchesMismatchesAndDeadlocks) {
  std::vector<std::vector<PipeInstruction>> lists;
  for (int s = 0; s < 2; ++s) lists.push_back(pipeline_instructions(k1F1B, 2, s, 4, 2));
  ASSERT_EQ(execute(lists, 2, 2, 4).error, "");
  std::vector<std::vector<PipeInstruction>> swapped = lists;
  auto recv_at = [&](int s, int nth) {
    int seen = 0;
    for (size_t i = 0; i < swapped[s].size(); ++i)
      if (swapped[s][i].op == PipeOp::kRecvActivation && seen++ == nth) return i;
    return size_t{0};
  };
  std::swap(swapped[1][recv_at(1, 0)], swapped[1][recv_at(1, 1)]);
  EXPECT_NE(execute(swapped, 2, 2, 4).error.find("matched to another"), std::string::npos);
  std::vector<std::vector<PipeInstruction>> silent = lists;
  silent[0].erase(std::remove_if(silent[0].begin(), silent[0].end(),
                                 [](const PipeInstruction& in) { return in.op == PipeOp::kSendActivation; }),
                  silent[0].end());
  EXPECT_NE(execute(silent, 2, 2, 4).error.find("deadlock"), std::string::npos);
}

// ---- early receives (pipeline_instructions with early_receives)

bool is_compute(PipeOp op) { return op == PipeOp::kForward || op == PipeOp::kBackward; }

// The stage a transfer instruction of stage s is with: a receive's sender,
// a send's receiver (the previous virtual stage for activations received and
// gradients sent, the next one otherwise), and the chunk it feeds there.
struct Peer {
  int stage, chunk;
};
Peer peer_of(const PipeInstruction& in, int p, int s) {
  const bool towards_prev = in.op == PipeOp::kRecvActivation || in.op == PipeOp::kSendGrad;
  const int vs = in.chunk * p + s + (towards_prev ? -1 : 1);
  return {(vs + p) % p, vs / p};
}

// Runs the P lists together as MPI runs the engine's early-receive program:
// a send or a receive is posted without blocking and matches, between two
// stages in one direction, the other side's in posting order; a send
// completes only when its receive is posted (rendezvous, the strictest
// protocol); the n-th compute of a stage waits for its own input to arrive
// and for the sends issued after its computes 0..n-2 (the engine's
// finish_sends). Checks that every stage finishes (no deadlock), that every
// message lands in the receive meant for it (kind, micro-batch, chunk), and
// that each ordered pair of stages posts as many receives as sends.
std::string run_posted(const std::vector<std::vector<PipeInstruction>>& lists, int p, int v) {
  struct Posted {
    PipeInstruction in;
    int stage;
    bool matched = false;
  };
  // Per (sender, receiver): the sends and receives posted, in order.
  std::map<std::pair<int, int>, std::vector<Posted>> sends, recvs;
  std::vector<size_t> pc(p, 0);
  std::vector<int> computes(p, 0);
  // Per stage: its sends as (computes run before it, index into sends[pair]).
  std::vector<std::vector<std::tuple<int, std::pair<int, int>, size_t>>> issued(p);
  auto match = [&](const std::pair<int, int>& pair) -> std::string {
    std::vector<Posted>& out = sends[pair];
    std::vector<Posted>& in = recvs[pair];
    for (size_t k = 0; k < std::min(out.size(), in.size()); ++k) {
      if (in[k].matched) continue;
      const Peer to = peer_of(out[k].in, p, pair.first);
      const PipeOp want = out[k].in.op == PipeOp::kSendActivation ? PipeOp::kRecvActivation : PipeOp::kRecvGrad;
      if (in[k].in.op != want || in[k].in.micro != out[k].in.micro || in[k].in.chunk != to.chunk) {
        return cat("stage ", pair.first, "'s ", describe({out[k].in}), " lands in stage ", pair.second, "'s ",
                   describe({in[k].in}));
      }
      in[k].matched = out[k].matched = true;
    }
    return "";
  };
  for (bool moved = true; moved;) {
    moved = false;
    for (int s = 0; s < p; ++s) {
      while (pc[s] < lists[s].size()) {
        const PipeInstruction& in = lists[s][pc[s]];
        if (is_compute(in.op)) {
          // Its input: the receive of the same pass, micro-batch and chunk, matched.
          const PipeOp recv_op = in.op == PipeOp::kForward ? PipeOp::kRecvActivation : PipeOp::kRecvGrad;
          const int from = in.chunk * p + s + (in.op == PipeOp::kForward ? -1 : 1);
          bool ready = from < 0 || from >= v * p;  // the ends of the virtual pipeline have no input
          for (auto& [pair, posted] : recvs) {
            for (const Posted& r : posted) {
              if (pair.second == s && r.in.op == recv_op && r.in.micro == in.micro && r.in.chunk == in.chunk)
                ready = r.matched;
            }
          }
          for (const auto& [after, pair, k] : issued[s])
            if (after <= computes[s] - 1 && !sends[pair][k].matched) ready = false;
          if (!ready) break;
          ++computes[s];
        } else {
          const Peer peer = peer_of(in, p, s);
          const bool send = in.op == PipeOp::kSendActivation || in.op == PipeOp::kSendGrad;
          if (!send && in.op != PipeOp::kRecvActivation && in.op != PipeOp::kRecvGrad)
            return cat("stage ", s, ": a combined exchange (", describe({in}), ") in an early-receive list");
          const std::pair<int, int> pair = send ? std::pair{s, peer.stage} : std::pair{peer.stage, s};
          (send ? sends : recvs)[pair].push_back({in, s});
          if (send) issued[s].emplace_back(computes[s], pair, sends[pair].size() - 1);
          if (std::string e = match(pair); !e.empty()) return e;
        }
        ++pc[s];
        moved = true;
      }
    }
  }
  for (int s = 0; s < p; ++s) {
    if (pc[s] < lists[s].size()) {
      std::string e = "deadlock; next instructions:";
      for (int q = 0; q < p; ++q)
        e += cat(" stage ", q, ": ", pc[q] < lists[q].size() ? describe({lists[q][pc[q]]}) : "done");
      return e;
    }
  }
  for (const auto& [pair, posted] : sends) {
    if (posted.size() != recvs[pair].size()) {
      return cat("stage ", pair.first, " sends ", posted.size(), " messages to stage ", pair.second, ", which posts ",
                 recvs[pair].size(), " receives");
    }
  }
  return "";
}

// Receive buffers a list holds at its worst: each from its receive's
// posting to the end of the compute that consumes it.
int max_receive_buffers(const std::vector<PipeInstruction>& list, int p, int v, int s) {
  int held = 0, most = 0;
  for (const PipeInstruction& in : list) {
    if (is_compute(in.op)) {
      const int from = in.chunk * p + s + (in.op == PipeOp::kForward ? -1 : 1);
      if (from >= 0 && from < v * p) --held;
    } else if (in.op != PipeOp::kSendActivation && in.op != PipeOp::kSendGrad) {
      most = std::max(most, ++held);
    }
  }
  return most;
}

// The early program against the plain one, for every (P, M, v) the schedule
// runs: the same computes in the same order; every receive posted before the
// compute that consumes it (compute k) and no earlier than its buffer is
// free, which is once compute k - 2 has run (a stage holds one receive
// buffer ahead of the compute it runs), and then at once (only transfers
// between compute k - 2 and it); sends right after their compute, never
// combined; receive buffers at most one more than the plain program's; and
// the P lists run together under MPI's rules (run_posted) finish with every
// message where it belongs.
TEST(EarlyReceiveScheduleTest, SameComputesReceivesOneComputeAheadAndMatchUnderMpi) {
  for (PipelineScheduleKind kind : {k1F1B, PipelineScheduleKind::kGPipe})
    for (int p : {2, 3, 4})
      for (int m : {1, 2, 4, 8})
        for (int v : {1, 2}) {
          if (!check_interleaving(kind, p, m, v).ok()) continue;
          const std::string what = cat(pipeline_schedule_name(kind), " P=", p, " M=", m, " v=", v);
          std::vector<std::vector<PipeInstruction>> lists;
          for (int s = 0; s < p; ++s) {
            const std::string where = cat(what, " stage ", s);
            lists.push_back(pipeline_instructions(kind, p, s, m, v, /*early_receives=*/true));
            const std::vector<PipeInstruction>& list = lists.back();
            const std::vector<PipeInstruction> plain = pipeline_instructions(kind, p, s, m, v);
            std::vector<PipeInstruction> compute, plain_compute;
            std::vector<size_t> at;  // each compute's index in the list
            for (size_t i = 0; i < list.size(); ++i) {
              if (!is_compute(list[i].op)) continue;
              compute.push_back(list[i]);
              at.push_back(i);
            }
            for (const PipeInstruction& in : plain)
              if (is_compute(in.op)) plain_compute.push_back(in);
            ASSERT_EQ(compute, plain_compute) << where;
            EXPECT_LE(max_receive_buffers(list, p, v, s), max_receive_buffers(plain, p, v, s) + 1) << where;
            for (size_t i = 0; i < list.size(); ++i) {
              const PipeInstruction& in = list[i];
              if (is_compute(in.op)) continue;
              if (in.op == PipeOp::kSendActivation || in.op == PipeOp::kSendGrad) {
                const PipeOp producer = in.op == PipeOp::kSendActivation ? PipeOp::kForward : PipeOp::kBackward;
                ASSERT_GT(i, 0u) << where;
                EXPECT_EQ(list[i - 1], (PipeInstruction{producer, in.micro, -1, in.chunk}))
                    << where << ": " << describe({in}) << " not right after its compute";
                continue;
              }
              ASSERT_TRUE(in.op == PipeOp::kRecvActivation || in.op == PipeOp::kRecvGrad)
                  << where << ": " << describe({in});
              const PipeOp consumer_op = in.op == PipeOp::kRecvActivation ? PipeOp::kForward : PipeOp::kBackward;
              const auto it = std::find(compute.begin(), compute.end(),
                                        PipeInstruction{consumer_op, in.micro, -1, in.chunk});
              ASSERT_NE(it, compute.end()) << where << ": " << describe({in}) << " feeds nothing";
              const size_t k = static_cast<size_t>(it - compute.begin());
              EXPECT_LT(i, at[k]) << where << ": " << describe({in}) << " after its compute";
              // Posted in the gap before compute k - 1 (before compute 0 for the first two).
              const size_t gap_start = k >= 2 ? at[k - 2] : 0, gap_end = k >= 1 ? at[k - 1] : at[0];
              EXPECT_TRUE(i > gap_start || k < 2) << where << ": " << describe({in}) << " before its buffer is free";
              EXPECT_LT(i, gap_end) << where << ": " << describe({in}) << " later than one compute ahead";
            }
          }
          EXPECT_EQ(run_posted(lists, p, v), "") << what;
        }
}

// run_posted catches what it exists for: receives from one peer posted in
// another order than its sends, a send never posted, and (rendezvous) two
// stages that each wait for a send before posting the receive the other
// needs.
TEST(EarlyReceiveScheduleTest, TheMpiRunnerCatchesMismatchesAndDeadlocks) {
  std::vector<std::vector<PipeInstruction>> lists;
  for (int s = 0; s < 3; ++s) lists.push_back(pipeline_instructions(k1F1B, 3, s, 4, 1, true));
  ASSERT_EQ(run_posted(lists, 3, 1), "");
  std::vector<std::vector<PipeInstruction>> swapped = lists;
  auto nth = [&](int s, PipeOp op, int n) {
    return std::find_if(swapped[s].begin(), swapped[s].end(),
                        [&, seen = 0](const PipeInstruction& in) mutable { return in.op == op && seen++ == n; });
  };
  std::iter_swap(nth(1, PipeOp::kRecvActivation, 0), nth(1, PipeOp::kRecvActivation, 1));
  EXPECT_NE(run_posted(swapped, 3, 1).find("lands in"), std::string::npos);
  std::vector<std::vector<PipeInstruction>> silent = lists;
  silent[0].erase(std::remove_if(silent[0].begin(), silent[0].end(),
                                 [](const PipeInstruction& in) { return in.op == PipeOp::kSendActivation; }),
                  silent[0].end());
  EXPECT_NE(run_posted(silent, 3, 1).find("deadlock"), std::string::npos);
}

}  // namespace
}  // namespace zero
