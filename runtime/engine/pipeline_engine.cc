// The engine with P > 1 pipeline stages: Engine::train_batch's schedule and Engine::evaluate (see
// engine.h and runtime/engine/pipeline_schedule.h).
//
// Each micro-batch in flight has a Context of its own (its saved
// activations), chosen round-robin: under 1F1B the micro-batches alive on
// stage s are consecutive and at most min(P - s, M), under GPipe all M, and
// the engine built that many. Transfers go through the pipeline group's
// communicator, whose operations run in issue order on its progress thread:
// a send is issued as soon as its tensor exists and overlaps the next
// forward or backward; it is waited for, and its tensor dropped, before the
// one after (so the memory held never depends on timing, and the planner's
// dry run holds what a run holds). The compute thread waits for a receive
// only right before the forward or backward that needs it; that wait is
// part of the stage's bubble (StepResult::pipeline_wait_s).
//
// Engine::evaluate with P > 1 is one forward down the stages, nothing saved,
// in ctx_: receive, forward, send; then an all-reduce over the pipeline
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
#include "runtime/engine/engine.h"

namespace zero {

namespace {

double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// What one micro-batch holds on this stage between its instructions.
struct MicroBatch {
  Batch batch;         // drawn right before its forward (with its input's receive on later stages); its
                       // views are valid until the next draw, and only its shape is read after the forward
  Tensor input;        // the previous stage's activation (stages after the first)
  CommHandle input_ready;
  Tensor output;       // this stage's activation for the next stage (stages before the last)
  Tensor output_grad;  // its gradient: from the next stage, or the loss's (the last stage's logits)
  CommHandle output_grad_ready;
  Tensor input_grad;   // the gradient this stage sends back (stages after the first)
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
  const bool first = stage == 0, last = stage == stages - 1;
  Communicator& pipe = mesh_->pipeline();
  const std::vector<Context*> pool = contexts();
  const int64_t base_micro_step = micro_step_;
  comm_bytes_at_step_start_ = comm_bytes();
  comm_wait_at_step_start_ = comm_wait_seconds();
  executed_.clear();

  std::vector<MicroBatch> micro(static_cast<size_t>(m_count));
  std::deque<Sending> sending;
  absl::Status status;  // the first failure; the schedule stops there
  double wait_s = 0;

  // Waits for a receive; the time it took is bubble.
  auto wait_for = [&](CommHandle& h, std::string_view what, int m) -> absl::Status {
    if (h == nullptr) return absl::OkStatus();
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status s = h->wait();
    wait_s += seconds_between(t0, std::chrono::steady_clock::now());
    h = nullptr;
    return annotate(s, cat("pipeline stage ", stage, ": receiving micro-batch ", m, "'s ", what, " from stage ",
                           what == "activation" ? stage - 1 : stage + 1));
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
  auto activation_like = [&](const MicroBatch& mb) {
    return backend_.empty(model_of(*model_).stage_output_shape(mb.batch.inputs.shape()), DType::kF32,
                          MemCategory::kActivations);
  };
  // The buffers receives land in. An activation's micro-batch is drawn
  // here, right before its forward (the last stage reads its targets there).
  auto input_buffer = [&](int m) -> absl::StatusOr<Tensor*> {
    MicroBatch& mb = micro[m];
    ZE_ASSIGN_OR_RETURN(mb.batch, next(m));
    mb.input = activation_like(mb);
    return &mb.input;
  };
  auto output_grad_buffer = [&](int m) {
    micro[m].output_grad = activation_like(micro[m]);
    return &micro[m].output_grad;
  };

  auto forward = [&](int m) -> absl::Status {
    MicroBatch& mb = micro[m];
    ZE_RETURN_IF_ERROR(finish_sends(computes++));  // the sends issued before the last compute
    if (!mb.batch.inputs.defined()) {
      ZE_ASSIGN_OR_RETURN(mb.batch, next(m));
    }
    if (!first) ZE_RETURN_IF_ERROR(wait_for(mb.input_ready, "activation", m));
    const auto t0 = std::chrono::steady_clock::now();
    mb.ctx = pool[static_cast<size_t>(m) % pool.size()];
    Context& ctx = *mb.ctx;
    ctx.clear();
    ctx.set_grad_enabled(true);
    state_->begin_forward();
    const int64_t rows = mb.batch.inputs.dim(0);
    ctx.set_dropout_key(config_.seed,
                        first_global_sample(base_micro_step + m, comm().world_size(), comm().rank(), rows));
    // The first stage's ids: a copy of its own, as the embedding's backward
    // reads them after later micro-batches were drawn.
    if (first) {
      mb.input = backend_.empty(mb.batch.inputs.shape(), mb.batch.inputs.dtype(), MemCategory::kActivations);
      backend_.copy(mb.input, mb.batch.inputs);
    }
    Tensor out = ctx.forward(*model_, mb.input);
    mb.input = Tensor();  // the context holds what backward needs of it
    ZE_RETURN_IF_ERROR(annotate(ctx.take_status(), cat("forward of micro-batch ", m, " on pipeline stage ", stage)));
    if (last) {
      ZE_ASSIGN_OR_RETURN(const float loss, loss_and_gradient(out, mb.batch.targets));
      loss_sum_ += loss;
      mb.output_grad = out;  // the logits, now their gradient
    } else {
      mb.output = out;
    }
    timing_.forward_s += seconds_between(t0, std::chrono::steady_clock::now());
    executed_.push_back({PipeOp::kForward, m});
    return absl::OkStatus();
  };

  auto backward = [&](int m) -> absl::Status {
    MicroBatch& mb = micro[m];
    ZE_RETURN_IF_ERROR(finish_sends(computes++));
    if (!last) ZE_RETURN_IF_ERROR(wait_for(mb.output_grad_ready, "gradient", m));
    const auto t0 = std::chrono::steady_clock::now();
    Context& ctx = *mb.ctx;
    // Micro-batches go backward in order: m_count - 1 is this stage's last,
    // where ZeRO-0/1 reduce the accumulated gradients.
    state_->begin_backward(m == m_count - 1);
    Tensor dx = ctx.backward(*model_, mb.output_grad);
    mb.output_grad = Tensor();
    ZE_CHECK_EQ(ctx.live_frames(), 0u);
    timing_.recompute_s += ctx.take_recompute_seconds();
    absl::Status s = ctx.take_status();
    s.Update(state_->end_backward());
    ZE_RETURN_IF_ERROR(annotate(s, cat("backward of micro-batch ", m, " on pipeline stage ", stage)));
    if (!first) mb.input_grad = dx;
    timing_.backward_s += seconds_between(t0, std::chrono::steady_clock::now());
    executed_.push_back({PipeOp::kBackward, m});
    return absl::OkStatus();
  };

  auto send = [&](Tensor& t, int peer) {
    sending.push_back({pipe.send_async(t.data(), t.numel(), DType::kF32, peer), std::exchange(t, Tensor()), computes});
  };

  const std::vector<PipeInstruction> program =
      pipeline_instructions(config_.pipeline.schedule, stages, stage, m_count);
  for (const PipeInstruction& in : program) {
    switch (in.op) {
      case PipeOp::kForward: status = forward(in.micro); break;
      case PipeOp::kBackward: status = backward(in.micro); break;
      case PipeOp::kRecvActivation: {
        absl::StatusOr<Tensor*> in_buf = input_buffer(in.micro);
        status = in_buf.status();
        if (in_buf.ok()) {
          micro[in.micro].input_ready = pipe.recv_async((*in_buf)->data(), (*in_buf)->numel(), DType::kF32, stage - 1);
        }
        break;
      }
      case PipeOp::kRecvGrad: {
        Tensor* g = output_grad_buffer(in.micro);
        micro[in.micro].output_grad_ready = pipe.recv_async(g->data(), g->numel(), DType::kF32, stage + 1);
        break;
      }
      case PipeOp::kSendActivation: send(micro[in.micro].output, stage + 1); break;
      case PipeOp::kSendGrad: send(micro[in.micro].input_grad, stage - 1); break;
      case PipeOp::kSendActivationRecvGrad: {
        Tensor& out = micro[in.micro].output;
        Tensor* g = output_grad_buffer(in.recv_micro);
        CommHandle h = pipe.send_recv_async(out.data(), out.numel(), g->data(), g->numel(), DType::kF32, stage + 1);
        micro[in.recv_micro].output_grad_ready = h;
        sending.push_back({h, std::exchange(out, Tensor()), computes});
        break;
      }
      case PipeOp::kSendGradRecvActivation: {
        Tensor& out = micro[in.micro].input_grad;
        absl::StatusOr<Tensor*> in_buf = input_buffer(in.recv_micro);
        status = in_buf.status();
        if (!in_buf.ok()) break;
        CommHandle h = pipe.send_recv_async(out.data(), out.numel(), (*in_buf)->data(), (*in_buf)->numel(),
                                            DType::kF32, stage - 1);
        micro[in.recv_micro].input_ready = h;
        sending.push_back({h, std::exchange(out, Tensor()), computes});
        break;
      }
    }
    if (!status.ok()) break;
  }
  // Every transfer finishes before its buffers go, failed or not.
  for (MicroBatch& mb : micro) {
    for (CommHandle* h : {&mb.input_ready, &mb.output_grad_ready}) {
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
  const bool first = stage == 0, last = stage == stages - 1;
  Communicator& pipe = mesh_->pipeline();
  const std::string where = cat("evaluation on pipeline stage ", stage, " of ", stages);
  const Shape activation_shape = model_of(*model_).stage_output_shape(batch.inputs.shape());
  absl::Status status;  // this stage's first failure
  ctx_.clear();
  Tensor input;
  if (first) {
    input = to_compute(batch.inputs);
  } else {
    input = backend_.empty(activation_shape, DType::kF32, MemCategory::kActivations);
    status = annotate(pipe.recv_async(input.data(), input.numel(), DType::kF32, stage - 1)->wait(),
                      cat(where, ": receiving the activation from stage ", stage - 1));
    if (!status.ok()) backend_.ops().fill(input, 0.0f);
  }
  // The forward and the loss run even after a failure (on zeros, or on a
  // failed pass's undefined values), so that the collectives inside them
  // (tensor-parallel all-reduces, the vocabulary-parallel loss) still match
  // the other tensor ranks'; the result is then not used.
  ctx_.set_grad_enabled(false);
  state_->set_evaluating(true);
  Tensor out = ctx_.forward(*model_, input);
  state_->set_evaluating(false);
  ctx_.set_grad_enabled(true);
  status.Update(annotate(ctx_.take_status(), cat(where, ": forward")));
  input = Tensor();
  float loss = 0.0f;
  if (!last) {
    if (!status.ok() || !out.defined() || out.shape() != activation_shape) {
      out = backend_.empty(activation_shape, DType::kF32, MemCategory::kActivations);
      backend_.ops().fill(out, 0.0f);
    }
    absl::Status sent = pipe.send_async(out.data(), out.numel(), DType::kF32, stage + 1)->wait();
    status.Update(annotate(sent, cat(where, ": sending the activation to stage ", stage + 1)));
  } else if (out.defined()) {
    absl::StatusOr<float> l = evaluation_loss(out, batch.targets);
    if (l.ok()) loss = *l;
    status.Update(annotate(l.status(), where));
  }
  out = Tensor();
  ctx_.clear();
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
