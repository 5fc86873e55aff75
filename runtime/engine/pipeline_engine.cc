// The engine with P > 1 pipeline stages: Engine::train_batch's schedule and Engine::evaluate (see
// engine.h and runtime/engine/pipeline_schedule.h).
//
// Each micro-batch in flight has a Context of its own (its saved
// activations), taken from a free list at its forward and given back after
// its backward: under 1F1B at most min(P - s, M) are alive on stage s (the
// list then hands them out round-robin), under GPipe all M, and the engine
// built that many. Interleaved (v > 1 model chunks per stage, Model::
// pipeline_chunk): the same per (chunk, micro-batch) pair, each chunk run
// through its own module; receives and sends wrap around the ring of stages
// (the last stage's chunk c feeds the first stage's chunk c + 1), and all of
// them are separate transfers, in the order the schedule's simulation gave
// every stage (pipeline_schedule.h), so neighbours issue theirs in the same
// order. Where the pipeline group's communicator allows early receives
// (Communicator::allows_early_receives: MPI) the stage runs the
// early-receive program instead: each receive posted one compute ahead of
// the compute that needs it, so it overlaps the compute before. A stage
// draws a micro-batch at its first receive, so where that comes before the
// previous micro-batch's loss (interleaved, or early receives), the last
// stage keeps a copy of each micro-batch's targets from its draw to its
// last chunk's loss. A send is issued as soon as its tensor exists and
// overlaps the next forward or backward; it is waited for, and its tensor
// dropped, before the one after (so the memory held never depends on
// timing, and the planner's dry run holds what a run holds). The compute
// thread waits for a receive only right before the forward or backward
// that needs it; that wait is part of the stage's bubble
// (StepResult::pipeline_wait_s).
//
// Engine::evaluate with P > 1 is one forward down the stages (interleaved:
// v times round them, chunk by chunk), nothing saved, in ctx_: receive,
// forward, send; then an all-reduce over the pipeline
// group gives every stage the last stage's loss and says which stages
// failed. A stage whose receive or forward failed still runs and sends
// (zeros), so no neighbour, in the pipeline or the tensor group, waits for
// a message that never comes.
#include <chrono>
#include <deque>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_join.h"
#include "core/status.h"
#include "core/strings.h"
#include "graph/moe.h"
#include "runtime/engine/engine.h"

namespace zero {

namespace {

double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// A micro-batch as this stage drew it: at its first instruction here (a
// forward, or a receive: early receives post one before the forward). The
// batch's views are valid until the next draw, so later only its shape is
// read, and the copies: the first stage's ids (the embedding's backward
// reads them after later draws), and interleaved or with early receives, the
// last stage's targets (its last chunk's forward comes after later draws).
struct Drawn {
  Batch batch;
  Tensor targets;
  int64_t valid_targets = -1;  // of the copy, counted on the drawn batch
};

// What one (chunk, micro-batch) holds on this stage between its instructions.
struct Slot {
  Tensor input;        // the previous virtual stage's activation (the ids' copy on virtual stage 0)
  CommHandle input_ready;
  Tensor output;       // this chunk's activation for the next virtual stage
  Tensor output_grad;  // its gradient: from the next virtual stage, or the loss's (the last one's logits)
  CommHandle output_grad_ready;
  Tensor input_grad;   // the gradient sent back (all but virtual stage 0)
  Context* ctx = nullptr;
};

// A send in flight, the tensor it reads, and how many forwards and
// backwards had run when it was issued.
struct Sending {
  CommHandle handle;
  Tensor buffer;
  int after_computes = 0;
};

}  // namespace

absl::StatusOr<StepResult> Engine::run_pipeline(const MicroBatchSource& next) {
  const auto t_start = std::chrono::steady_clock::now();
  ZE_CHECK(micro_step_ % config_.gradient_accumulation_steps == 0) << "train_batch() in the middle of an accumulation";
  const int stages = mesh_->shape().pipeline, stage = mesh_->coordinates().pipeline;
  const int m_count = static_cast<int>(config_.gradient_accumulation_steps);
  const int chunks = pipeline_chunks();
  // Neighbours: activations come from the previous stage and go to the
  // next, gradients the other way; interleaved, the ends wrap around
  // (chunk c of stage P - 1 feeds chunk c + 1 of stage 0).
  const int prev = (stage + stages - 1) % stages, next_stage = (stage + 1) % stages;
  auto first_virtual = [&](int c) { return stage == 0 && c == 0; };
  auto last_virtual = [&](int c) { return stage == stages - 1 && c == chunks - 1; };
  Communicator& pipe = mesh_->pipeline();
  const std::vector<Context*> pool = contexts();
  std::deque<Context*> free_contexts(pool.begin(), pool.end());
  const bool early_receives = pipe.allows_early_receives();
  // The last stage's draw of micro-batch m + 1 comes before micro-batch m's loss.
  const bool copy_targets = stage == stages - 1 && (chunks > 1 || early_receives);
  const int64_t base_micro_step = micro_step_;
  comm_bytes_at_step_start_ = comm_bytes();
  comm_wait_at_step_start_ = comm_wait_seconds();
  executed_.clear();

  std::vector<Drawn> drawn(static_cast<size_t>(m_count));
  std::vector<Slot> slots(static_cast<size_t>(m_count) * chunks);
  auto slot = [&](int c, int m) -> Slot& { return slots[static_cast<size_t>(c) * m_count + m]; };
  std::deque<Sending> sending;
  absl::Status status;  // the first failure; the schedule stops there
  double wait_s = 0;

  // Waits for a receive; the time it took is bubble.
  auto wait_for = [&](CommHandle& h, bool activation, int c, int m) -> absl::Status {
    if (h == nullptr) return absl::OkStatus();
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status s = h->wait();
    wait_s += seconds_between(t0, std::chrono::steady_clock::now());
    h = nullptr;
    return annotate(s, cat("pipeline stage ", stage, ": receiving micro-batch ", m, "'s ",
                           activation ? "activation" : "gradient", chunks > 1 ? cat(" (chunk ", c, ")") : "",
                           " from stage ", activation ? prev : next_stage));
  };
  int computes = 0;  // forwards and backwards run so far
  // Waits for the sends issued when fewer than `computes_done` computes had run.
  auto finish_sends = [&](int computes_done) -> absl::Status {
    absl::Status first_error;
    while (!sending.empty() && sending.front().after_computes < computes_done) {
      first_error.Update(sending.front().handle->wait());
      sending.pop_front();
    }
    return first_error;
  };
  // Draws micro-batch m at its first instruction on this stage.
  auto draw = [&](int m) -> absl::Status {
    Drawn& d = drawn[m];
    if (d.batch.inputs.defined()) return absl::OkStatus();
    ZE_ASSIGN_OR_RETURN(d.batch, next(m));
    if (copy_targets) {
      d.targets = backend_.empty(d.batch.targets.shape(), d.batch.targets.dtype(), MemCategory::kActivations,
                                 Tier::kHost);
      backend_.copy(d.targets, d.batch.targets);
      d.valid_targets = count_valid_targets(d.batch.targets);
    }
    return absl::OkStatus();
  };
  auto activation_like = [&](int m) {
    return backend_.empty(model_of(*model_).stage_output_shape(drawn[m].batch.inputs.shape()), DType::kF32,
                          MemCategory::kActivations);
  };
  // The buffers receives land in.
  auto input_buffer = [&](int c, int m) -> absl::StatusOr<Tensor*> {
    ZE_RETURN_IF_ERROR(draw(m));
    slot(c, m).input = activation_like(m);
    return &slot(c, m).input;
  };
  auto output_grad_buffer = [&](int c, int m) -> absl::StatusOr<Tensor*> {
    ZE_RETURN_IF_ERROR(draw(m));
    slot(c, m).output_grad = activation_like(m);
    return &slot(c, m).output_grad;
  };
  // The last compute of the schedule, a backward: where ZeRO-0/1 reduce the
  // accumulated gradients (interleaved: chunk 0's last micro-batch, after
  // every other chunk's).
  const std::vector<PipeInstruction> program =
      pipeline_instructions(config_.pipeline.schedule, stages, stage, m_count, chunks, early_receives);
  PipeInstruction final_backward{PipeOp::kBackward};
  for (const PipeInstruction& in : program)
    if (in.op == PipeOp::kBackward) final_backward = in;

  auto forward = [&](int c, int m) -> absl::Status {
    Slot& sl = slot(c, m);
    ZE_RETURN_IF_ERROR(finish_sends(computes++));  // the sends issued before the last compute
    ZE_RETURN_IF_ERROR(draw(m));
    const Batch& batch = drawn[m].batch;
    if (!first_virtual(c)) ZE_RETURN_IF_ERROR(wait_for(sl.input_ready, true, c, m));
    const auto t0 = std::chrono::steady_clock::now();
    ZE_CHECK(!free_contexts.empty()) << "more (chunk, micro-batch) pairs in flight than the schedule said";
    sl.ctx = free_contexts.front();
    free_contexts.pop_front();
    Context& ctx = *sl.ctx;
    ctx.clear();
    ctx.set_grad_enabled(true);
    for (ModelState* st : states()) st->begin_forward();
    const int64_t rows = batch.inputs.dim(0);
    ctx.set_dropout_key(config_.seed,
                        first_global_sample(base_micro_step + m, comm().world_size(), comm().rank(), rows));
    // The first stage's ids: a copy of its own, as the embedding's backward
    // reads them after later micro-batches were drawn.
    if (first_virtual(c)) {
      sl.input = backend_.empty(batch.inputs.shape(), batch.inputs.dtype(), MemCategory::kActivations);
      backend_.copy(sl.input, batch.inputs);
    }
    if (MoeLosses* moe = model_of(*model_).moe_losses()) moe->discard_pending();
    Tensor out = ctx.forward(chunk_module(c), sl.input);
    sl.input = Tensor();  // the context holds what backward needs of it
    ZE_RETURN_IF_ERROR(annotate(ctx.take_status(), cat("forward of micro-batch ", m,
                                                       chunks > 1 ? cat(" (chunk ", c, ")") : "",
                                                       " on pipeline stage ", stage)));
    // This chunk's sparse layers' auxiliary losses (per layer: pipeline
    // stages refuse the global scope), into the loss the stages sum.
    loss_sum_ += finish_moe_losses(c == 0);
    if (last_virtual(c)) {
      const Tensor& targets = copy_targets ? drawn[m].targets : batch.targets;
      ZE_ASSIGN_OR_RETURN(const float loss, loss_and_gradient(out, targets, drawn[m].valid_targets));
      loss_sum_ += loss;
      sl.output_grad = out;  // the logits, now their gradient
      drawn[m].targets = Tensor();
    } else {
      sl.output = out;
    }
    timing_.forward_s += seconds_between(t0, std::chrono::steady_clock::now());
    executed_.push_back({PipeOp::kForward, m, -1, c});
    return absl::OkStatus();
  };

  auto backward = [&](int c, int m) -> absl::Status {
    Slot& sl = slot(c, m);
    ZE_RETURN_IF_ERROR(finish_sends(computes++));
    if (!last_virtual(c)) ZE_RETURN_IF_ERROR(wait_for(sl.output_grad_ready, false, c, m));
    const auto t0 = std::chrono::steady_clock::now();
    Context& ctx = *sl.ctx;
    for (ModelState* st : states()) st->begin_backward(c == final_backward.chunk && m == final_backward.micro);
    Tensor dx = ctx.backward(chunk_module(c), sl.output_grad);
    sl.output_grad = Tensor();
    ZE_CHECK_EQ(ctx.live_frames(), 0u);
    free_contexts.push_back(std::exchange(sl.ctx, nullptr));
    timing_.recompute_s += ctx.take_recompute_seconds();
    absl::Status s = ctx.take_status();
    for (ModelState* st : states()) s.Update(st->end_backward());
    ZE_RETURN_IF_ERROR(annotate(s, cat("backward of micro-batch ", m, chunks > 1 ? cat(" (chunk ", c, ")") : "",
                                       " on pipeline stage ", stage)));
    if (!first_virtual(c)) sl.input_grad = dx;
    timing_.backward_s += seconds_between(t0, std::chrono::steady_clock::now());
    executed_.push_back({PipeOp::kBackward, m, -1, c});
    return absl::OkStatus();
  };

  auto send = [&](Tensor& t, int peer) {
    sending.push_back({pipe.send_async(t.data(), t.numel(), DType::kF32, peer), std::exchange(t, Tensor()), computes});
  };

  for (const PipeInstruction& in : program) {
    const int c = in.chunk;
    switch (in.op) {
      case PipeOp::kForward: status = forward(c, in.micro); break;
      case PipeOp::kBackward: status = backward(c, in.micro); break;
      case PipeOp::kRecvActivation: {
        absl::StatusOr<Tensor*> in_buf = input_buffer(c, in.micro);
        status = in_buf.status();
        if (in_buf.ok()) {
          slot(c, in.micro).input_ready = pipe.recv_async((*in_buf)->data(), (*in_buf)->numel(), DType::kF32, prev);
        }
        break;
      }
      case PipeOp::kRecvGrad: {
        absl::StatusOr<Tensor*> g = output_grad_buffer(c, in.micro);
        status = g.status();
        if (g.ok()) {
          slot(c, in.micro).output_grad_ready = pipe.recv_async((*g)->data(), (*g)->numel(), DType::kF32, next_stage);
        }
        break;
      }
      case PipeOp::kSendActivation: send(slot(c, in.micro).output, next_stage); break;
      case PipeOp::kSendGrad: send(slot(c, in.micro).input_grad, prev); break;
      // The combined exchanges (one chunk only).
      case PipeOp::kSendActivationRecvGrad: {
        Tensor& out = slot(c, in.micro).output;
        absl::StatusOr<Tensor*> g = output_grad_buffer(c, in.recv_micro);
        status = g.status();
        if (!g.ok()) break;
        CommHandle h =
            pipe.send_recv_async(out.data(), out.numel(), (*g)->data(), (*g)->numel(), DType::kF32, next_stage);
        slot(c, in.recv_micro).output_grad_ready = h;
        sending.push_back({h, std::exchange(out, Tensor()), computes});
        break;
      }
      case PipeOp::kSendGradRecvActivation: {
        Tensor& out = slot(c, in.micro).input_grad;
        absl::StatusOr<Tensor*> in_buf = input_buffer(c, in.recv_micro);
        status = in_buf.status();
        if (!in_buf.ok()) break;
        CommHandle h = pipe.send_recv_async(out.data(), out.numel(), (*in_buf)->data(), (*in_buf)->numel(),
                                            DType::kF32, prev);
        slot(c, in.recv_micro).input_ready = h;
        sending.push_back({h, std::exchange(out, Tensor()), computes});
        break;
      }
    }
    if (!status.ok()) break;
  }
  // Every transfer finishes before its buffers go, failed or not.
  for (Slot& sl : slots) {
    for (CommHandle* h : {&sl.input_ready, &sl.output_grad_ready}) {
      if (*h != nullptr) status.Update((*h)->wait());
    }
  }
  status.Update(finish_sends(std::numeric_limits<int>::max()));
  if (!status.ok()) {
    for (Context* c : pool) c->clear();
    return annotate(status, cat("pipeline stage ", stage, " of ", stages, " (step ", global_step_ + 1, ")"));
  }

  // The tied token table: its copies on the first and the last stage sum
  // their (data-reduced) gradients over the embedding group.
  if (Communicator* group = mesh_->embedding()) {
    for (Parameter* p : model_of(*model_).parameters_tied_across_stages()) {
      // A frozen table has no gradient (its copies freeze alike: checked at init).
      if (p->requires_grad()) ZE_RETURN_IF_ERROR(state_->sum_gradient_over(*p, *group));
    }
  }
  timing_.pipeline_wait_s += wait_s;
  timing_.pipeline_s += seconds_between(t_start, std::chrono::steady_clock::now());
  micro_step_ += m_count - 1;
  return finish_micro_step();
}

absl::StatusOr<float> Engine::evaluate_pipeline(const Batch& batch) {
  const int stages = mesh_->shape().pipeline, stage = mesh_->coordinates().pipeline;
  const int chunks = pipeline_chunks();
  const int prev = (stage + stages - 1) % stages, next_stage = (stage + 1) % stages;
  const bool last = stage == stages - 1;
  Communicator& pipe = mesh_->pipeline();
  const std::string where = cat("evaluation on pipeline stage ", stage, " of ", stages);
  const Shape activation_shape = model_of(*model_).stage_output_shape(batch.inputs.shape());
  absl::Status status;  // this stage's first failure
  float loss = 0.0f;
  // Chunk by chunk (interleaved: the activation goes round the stages v times).
  for (int c = 0; c < chunks; ++c) {
    const std::string chunk = chunks > 1 ? cat(" (chunk ", c, ")") : "";
    const bool first_virtual = stage == 0 && c == 0, last_virtual = last && c == chunks - 1;
    ctx_.clear();
    Tensor input;
    if (first_virtual) {
      input = to_compute(batch.inputs);
    } else {
      input = backend_.empty(activation_shape, DType::kF32, MemCategory::kActivations);
      const absl::Status received =
          annotate(pipe.recv_async(input.data(), input.numel(), DType::kF32, prev)->wait(),
                   cat(where, chunk, ": receiving the activation from stage ", prev));
      if (!received.ok()) backend_.ops().fill(input, 0.0f);
      status.Update(received);
    }
    // The forward and the loss run even after a failure (on zeros, or on a
    // failed pass's undefined values), so that the collectives inside them
    // (tensor-parallel all-reduces, the vocabulary-parallel loss) still match
    // the other tensor ranks'; the result is then not used.
    ctx_.set_grad_enabled(false);
    for (ModelState* st : states()) st->set_evaluating(true);
    Tensor out = ctx_.forward(chunk_module(c), input);
    for (ModelState* st : states()) st->set_evaluating(false);
    ctx_.set_grad_enabled(true);
    status.Update(annotate(ctx_.take_status(), cat(where, chunk, ": forward")));
    input = Tensor();
    if (!last_virtual) {
      if (!status.ok() || !out.defined() || out.shape() != activation_shape) {
        out = backend_.empty(activation_shape, DType::kF32, MemCategory::kActivations);
        backend_.ops().fill(out, 0.0f);
      }
      absl::Status sent = pipe.send_async(out.data(), out.numel(), DType::kF32, next_stage)->wait();
      status.Update(annotate(sent, cat(where, chunk, ": sending the activation to stage ", next_stage)));
    } else if (out.defined()) {
      absl::StatusOr<float> l = evaluation_loss(out, batch.targets);
      if (l.ok()) loss = *l;
      status.Update(annotate(l.status(), where));
    }
    out = Tensor();
    ctx_.clear();
  }
  // The last stage's loss to every stage (the others add zeros), and a flag
  // per stage that failed, in one all-reduce.
  std::vector<double> agreed(1 + static_cast<size_t>(stages), 0.0);
  if (last) agreed[0] = loss;
  if (!status.ok()) agreed[1 + stage] = 1.0;
  absl::Status reduced = pipe.all_reduce_doubles(agreed.data(), static_cast<int64_t>(agreed.size()), ReduceOp::kSum);
  if (!status.ok()) return status;
  ZE_RETURN_IF_ERROR(annotate(reduced, cat(where, ": agreeing on the loss over the pipeline group")));
  std::vector<int> failed;
  for (int s = 0; s < stages; ++s) {
    if (agreed[1 + s] != 0.0) failed.push_back(s);
  }
  if (!failed.empty()) {
    return absl::AbortedError(cat(where, ": pipeline stage(s) ", absl::StrJoin(failed, ", "),
                                  " failed (their ranks report why); no loss"));
  }
  return static_cast<float>(agreed[0]);
}

}  // namespace zero
