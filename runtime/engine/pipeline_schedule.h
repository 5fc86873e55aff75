// The pipeline schedules: what one stage of P does, in order, for the M
// micro-batches of one optimizer step (DeepSpeed's PipeInstructions,
// Megatron's forward_backward_pipelining_without_interleaving).
//
//   1F1B   stage s runs min(P - s - 1, M) warm-up forwards, then alternates
//          one forward and one backward, then drains the remaining
//          backwards: at most min(P - s, M) micro-batches' activations are
//          alive on stage s at once.
//   GPipe  all M forwards, then all M backwards: M micro-batches' activations
//          alive on every stage (for comparison).
//
// Backwards run in micro-batch order under both, so the last backward of a
// stage is micro-batch M - 1 (where ZeRO-0/1 reduce the accumulated
// gradients).
//
// Interleaved 1F1B (Megatron's forward_backward_pipelining_with_interleaving,
// v > 1 model chunks per stage): chunk c of stage s is virtual stage
// c P + s of v P, so an activation leaving chunk c of stage P - 1 enters
// chunk c + 1 of stage 0 (a ring: every stage receives activations from
// s - 1 mod P and gradients from s + 1 mod P). The v M (chunk, micro-batch)
// forwards of a stage run in groups of P micro-batches per chunk (chunk 0's
// micro-batches 0..P-1, chunk 1's 0..P-1, ..., then micro-batches P..2P-1),
// the backwards likewise from chunk v - 1 down; after
// min(2 (P - s - 1) + (v - 1) P, v M) warm-up forwards (all v M when M = P,
// as Megatron) the stage alternates one forward and one backward. M must be
// a multiple of P. The last backward of a stage is chunk 0's micro-batch
// M - 1, after every other chunk's last one. Megatron's bubble shrinks to
// (P - 1) / (v M) of the ideal compute time, for v times the transfers.
//
// Its transfers are placed by simulating all P stages together (a forward
// taking one unit, a backward two, each as soon as its stage is free and its
// input has arrived) and ordering every compute and every transfer by
// simulated time (a transfer at the moment its tensor is produced, before
// the computes starting then); each stage's list is its part of that one
// order. Two stages therefore issue their transfers with each other in the
// same order (so they match, whichever direction they carry), and with
// blocking transfers run in issue order on each stage's communication
// thread the earliest unfinished event can always finish: no deadlock. No
// exchange is combined; a send comes right after the compute producing it,
// a receive where the simulation says its tensor is produced.
//
// Communication follows from the compute order: a forward on a stage after
// the first needs the previous stage's activation, a backward on a stage
// before the last the next stage's gradient; a forward's output goes to the
// next stage, a backward's input gradient to the previous one. Where a
// stage's send and its next receive are with the same neighbour they are
// one exchange (send_recv: Megatron's send_forward_recv_backward and
// send_backward_recv_forward), which is what keeps the neighbours' blocking
// transfers from waiting on each other; otherwise the send is issued first.
//
// Early receives (for a communicator that posts point-to-point at once,
// Communicator::allows_early_receives: MPI's MPI_Irecv), with or without
// interleaving: the same computes, each send right after the compute that
// produces its tensor, never combined, and compute k's receive posted as
// soon as the stage may hold its buffer: right before compute k - 1
// (compute 0's and 1's before compute 0). A stage so holds at most one
// receive buffer beyond the one the compute in progress reads, and the
// transfer overlaps compute k - 1 instead of starting after it. Messages
// between two stages match in issue order, and a stage's receives from a
// peer come in the order of the computes they feed, which is the order the
// peer produces and sends them (each stage runs its forwards, and its
// backwards, chunk group by chunk group in micro-batch order; with P = 2
// and interleaving, where both directions join the same two stages, the
// two kinds still meet in order). Deadlock freedom rests on nothing
// blocking at issue: a compute waits only for its input, sent right after
// its producer ran, and the engine waits for a send two computes after
// issuing it, by when a rendezvous finds the receive posted. The tests run
// all stages together under MPI's matching with rendezvous sends, for every
// (P, M, v) they cover, to check both.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace zero {

enum class PipelineScheduleKind { k1F1B, kGPipe };

std::string_view pipeline_schedule_name(PipelineScheduleKind k);
// "1f1b" or "gpipe".
absl::StatusOr<PipelineScheduleKind> parse_pipeline_schedule(std::string_view name);

enum class PipeOp {
  kForward,               // micro: the forward pass of micro-batch `micro`
  kBackward,              // micro: its backward pass
  kRecvActivation,        // micro: its input from the previous stage
  kRecvGrad,              // micro: its output's gradient from the next stage
  kSendActivation,        // micro: its output to the next stage
  kSendGrad,              // micro: its input's gradient to the previous stage
  kSendActivationRecvGrad,  // micro's output to the next stage, recv_micro's gradient back
  kSendGradRecvActivation,  // micro's input gradient to the previous stage, recv_micro's input back
};

struct PipeInstruction {
  PipeOp op;
  int micro = 0;
  int recv_micro = -1;  // the combined exchanges' receive
  // The model chunk the compute runs, or whose input / output (gradient) the
  // transfer carries: virtual stage chunk P + stage. 0 without interleaving.
  int chunk = 0;
  bool operator==(const PipeInstruction&) const = default;
};

// The forwards and backwards of stage `stage` of `stages` (kForward /
// kBackward only), in order; `chunks` model chunks per stage (> 1: the
// interleaved 1F1B above, which needs k1F1B and micro_batches a multiple of
// stages; a broken one is a failed check: the engine and the config refuse
// them first).
std::vector<PipeInstruction> pipeline_compute_order(PipelineScheduleKind kind, int stages, int stage,
                                                    int micro_batches, int chunks = 1);
// The same with the transfers around them (the rules above); with
// early_receives, the early-receive program (for a communicator whose
// allows_early_receives() is true: a receive posted early must not hold up
// sends issued after it).
std::vector<PipeInstruction> pipeline_instructions(PipelineScheduleKind kind, int stages, int stage,
                                                   int micro_batches, int chunks = 1, bool early_receives = false);
// Whether `chunks` model chunks per stage can run this schedule: OK, or
// INVALID_ARGUMENT naming the rule (interleaving needs 1F1B, at least 2
// stages, and micro_batches a multiple of stages), for the engine and the
// config to say with their key names.
absl::Status check_interleaving(PipelineScheduleKind kind, int stages, int micro_batches, int chunks);
// (Chunk, micro-batch) pairs whose activations are alive at once on the
// stage: forwards done whose backward has not finished, at its worst.
int max_micro_batches_in_flight(const std::vector<PipeInstruction>& order);
// The ideal idle fraction of a stage, (P - 1) / (M + P - 1).
double ideal_bubble_fraction(int stages, int micro_batches);
// Megatron's bubble time fraction: a stage's idle time over its ideal
// compute time (its forwards and backwards), (P - 1) / (v M) with v chunks
// per stage ((P - 1) / M without interleaving). Of the step's time it is
// (P - 1) / (v M + P - 1).
double interleaved_bubble_fraction(int stages, int micro_batches, int chunks);
// "F0 F1 B0 ...", for messages and tests; with chunks, "F0c1" is chunk 1's
// forward of micro-batch 0.
std::string describe(const std::vector<PipeInstruction>& order);

}  // namespace zero
