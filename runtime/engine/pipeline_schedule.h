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
// Communication follows from the compute order: a forward on a stage after
// the first needs the previous stage's activation, a backward on a stage
// before the last the next stage's gradient; a forward's output goes to the
// next stage, a backward's input gradient to the previous one. Where a
// stage's send and its next receive are with the same neighbour they are
// one exchange (send_recv: Megatron's send_forward_recv_backward and
// send_backward_recv_forward), which is what keeps the neighbours' blocking
// transfers from waiting on each other; otherwise the send is issued first.
#pragma once

#include <string>
#include <string_view>
#include <vector>

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
  bool operator==(const PipeInstruction&) const = default;
};

// The forwards and backwards of stage `stage` of `stages` (kForward /
// kBackward only), in order.
std::vector<PipeInstruction> pipeline_compute_order(PipelineScheduleKind kind, int stages, int stage,
                                                    int micro_batches);
// The same with the transfers around them (the rule above).
std::vector<PipeInstruction> pipeline_instructions(PipelineScheduleKind kind, int stages, int stage,
                                                   int micro_batches);
// Micro-batches whose activations are alive at once on the stage: forwards
// done whose backward has not finished, at its worst.
int max_micro_batches_in_flight(const std::vector<PipeInstruction>& order);
// The ideal idle fraction of a stage, (P - 1) / (M + P - 1).
double ideal_bubble_fraction(int stages, int micro_batches);
// "F0 F1 B0 ...", for messages and tests.
std::string describe(const std::vector<PipeInstruction>& order);

}  // namespace zero
