// ZeRO stages 0-2; see flat_model_state.h.
#include "zero/flat_model_state.h"

#include <algorithm>

#include "core/status.h"
#include "core/strings.h"
#include "zero/state_buffers.h"
#include "zero/window_sizes.h"

namespace zero {

FlatModelState::FlatModelState(Module& model, const ModelStateOptions& options, Backend& backend,
                               Communicator& comm)
    : ModelState(options, backend, comm), model_(model) {}

absl::Status FlatModelState::init() {
  const int world = comm_.world_size();
  std::vector<Parameter*> trainable, frozen;
  for (Parameter* p : held_parameters(model_)) (p->requires_grad() ? trainable : frozen).push_back(p);
  // DeepSpeed pads the flat group to a multiple of 2 x world (stages 1-2);
  // its groups hold the trainable parameters only, the frozen ones stay
  // whole on every rank.
  layout_ = FlatLayout(trainable, stage() == ZeroStage::k0 ? 1 : 2 * world);
  for (size_t i = 0; i < layout_.segments().size(); ++i) segment_of_[layout_.segments()[i].param] = i;
  frozen_layout_ = FlatLayout(frozen);
  num_trainable_parameters_ = layout_.real_numel();
  num_parameters_ = layout_.real_numel() + frozen_layout_.real_numel();
  const int64_t n = layout_.numel();
  part_ = stage() == ZeroStage::k0 ? n : n / world;
  const Tier tier = backend_.compute_tier();
  auto alloc = [&](int64_t elems, DType t, MemCategory c) -> absl::StatusOr<Tensor> {
    ZE_ASSIGN_OR_RETURN(auto storage, backend_.allocate(static_cast<size_t>(elems) * dtype_size(t), tier, c));
    return Tensor(std::move(storage), {elems}, t);
  };

  ZE_ASSIGN_OR_RETURN(params_, alloc(n, options_.param_dtype, MemCategory::kParameters));
  if (frozen_layout_.numel() > 0) {
    ZE_ASSIGN_OR_RETURN(frozen_params_, alloc(frozen_layout_.numel(), options_.param_dtype, MemCategory::kParameters));
    ZE_RETURN_IF_ERROR(init_frozen_weights(backend_, frozen_params_));
  }
  const int64_t grad_elems = stage() == ZeroStage::k2 ? part_ : n;
  ZE_ASSIGN_OR_RETURN(grads_, alloc(grad_elems, options_.grad_dtype, MemCategory::kGradients));
  backend_.ops().fill(grads_, 0.0f);
  master_is_params_ = stage() == ZeroStage::k0 && options_.param_dtype == DType::kF32;
  backend_.ops().fill(params_, 0.0f);  // padding
  ZE_RETURN_IF_ERROR(init_optimizer_state(part_, master_is_params_ ? params_ : Tensor()));

  // Full parameters on every rank; the master partition from the same values.
  const int64_t lo = part_begin(), hi = lo + part_;
  for (const FlatSegment& seg : layout_.segments()) {
    const int64_t numel = seg.param->numel();
    const Tensor weights = layout_.param_view(params_, seg).view({numel});
    ZE_RETURN_IF_ERROR(for_each_initial_piece(
        backend_, *seg.param, options_.init_seed(), 0, numel, numel,
        [&](int64_t o, absl::Span<const float> v) -> absl::Status {
          const int64_t n = static_cast<int64_t>(v.size()), first = seg.offset + o;
          upload_fp32(backend_, v, weights.slice(o, {n}));
          const int64_t a = std::max(lo, first), b = std::min(hi, first + n);
          if (master_is_params_ || a >= b) return absl::OkStatus();
          return store_->write(0, a - lo, v.subspan(a - first, b - a));
        }));
  }
  ZE_RETURN_IF_ERROR(store_->flush());
  for (const FlatSegment& seg : layout_.segments()) {
    seg.param->data = layout_.param_view(params_, seg);
    seg.param->grad = stage() == ZeroStage::k2 ? Tensor() : layout_.param_view(grads_, seg);
  }
  // The frozen weights: the same initial values, cast once, never a gradient.
  for (const FlatSegment& seg : frozen_layout_.segments()) {
    const int64_t numel = seg.param->numel();
    const Tensor weights = frozen_layout_.param_view(frozen_params_, seg).view({numel});
    ZE_RETURN_IF_ERROR(for_each_initial_piece(
        backend_, *seg.param, options_.init_seed(), 0, numel, numel, [&](int64_t o, absl::Span<const float> v) {
          upload_fp32(backend_, v, weights.slice(o, {static_cast<int64_t>(v.size())}));
          return absl::OkStatus();
        }));
    seg.param->data = frozen_layout_.param_view(frozen_params_, seg);
    seg.param->grad = Tensor();
  }

  // Stage 2's buckets, where the config left reduce_bucket_size unset, are
  // sized to the model (window_sizes.h).
  options_.zero = windows_for_model(options_.zero, layout_.numel(), world);
  buckets_ = plan_grad_buckets(layout_, options_.zero.reduce_bucket_size);
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (Parameter* p : buckets_[b].params) bucket_of_[p] = b;
  uses_ = count_parameter_uses(model_);
  bucket_buffers_.resize(buckets_.size());
  return absl::OkStatus();
}

void FlatModelState::begin_backward(bool boundary) {
  boundary_ = boundary;
  uses_left_ = uses_;
  params_pending_.assign(buckets_.size(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b) params_pending_[b] = static_cast<int>(buckets_[b].params.size());
  launched_.assign(buckets_.size(), false);
}

absl::Status FlatModelState::pre_backward(Module& m) {
  if (stage() != ZeroStage::k2) return absl::OkStatus();
  // Stage 2 keeps no full gradient buffer: a bucket's buffer exists from the
  // first use of one of its parameters until its reduce-scatter completes.
  for (Parameter* p : m.direct_parameters()) {
    if (!p->requires_grad() || p->grad.defined() || !holds(*p)) continue;
    const size_t b = bucket_of_.at(p);
    const GradBucket& bucket = buckets_[b];
    Tensor& buf = bucket_buffers_[b];
    if (!buf.defined()) {
      buf = backend_.empty({bucket.end - bucket.begin}, options_.grad_dtype, MemCategory::kCommBuffers);
      backend_.ops().fill(buf, 0.0f);
    }
    for (Parameter* q : bucket.params) {
      q->grad = buf.slice(layout_.segments()[segment_of_.at(q)].offset - bucket.begin, q->shape());
    }
  }
  return absl::OkStatus();
}

absl::Status FlatModelState::post_backward(Module& m) {
  // A reduction's failure surfaces at end_backward, after the reductions in flight.
  for (Parameter* p : m.direct_parameters()) {
    if (!p->requires_grad() || !holds(*p)) continue;  // nothing to reduce here
    if (--uses_left_[p] != 0) continue;  // a tied parameter is complete after its last use
    const size_t b = bucket_of_.at(p);
    if (--params_pending_[b] == 0 && reduces_now()) launch(b);
  }
  return absl::OkStatus();
}

void FlatModelState::launch(size_t b) {
  const GradBucket& bucket = buckets_[b];
  launched_[b] = true;
  InFlight f;
  if (stage() == ZeroStage::k2) {
    Tensor& buf = bucket_buffers_[b];
    if (!buf.defined()) {  // no parameter of this bucket was used: reduce zeros (every rank does)
      buf = backend_.empty({bucket.end - bucket.begin}, options_.grad_dtype, MemCategory::kCommBuffers);
      backend_.ops().fill(buf, 0.0f);
    }
    const std::vector<int64_t> counts = partition_counts(bucket.begin, bucket.end, part_, comm_.world_size());
    const int64_t mine = counts[comm_.rank()];
    f.bucket = buf;
    f.partition_offset = std::max(bucket.begin, part_begin()) - part_begin();
    // Reduced in place: this rank's part of the sum lands in its own part of
    // the bucket (the reduce-scatter's in-place form; reduce_scatter: false,
    // or one rank, all-reduces the whole bucket), and no receive buffer is held.
    f.recv = buf.slice(ranks_before(bucket), {mine});
    if (options_.zero.reduce_scatter && comm_.world_size() > 1) {
      f.handle = comm_.reduce_scatter_async(buf.data(), f.recv.data(), counts, options_.grad_dtype);
    } else {
      f.handle = comm_.all_reduce_async(buf.data(), buf.numel(), options_.grad_dtype, ReduceOp::kSum);
    }
    buf = Tensor();
    for (Parameter* q : bucket.params) q->grad = Tensor();
  } else if (stage() == ZeroStage::k1 && options_.zero.reduce_scatter && comm_.world_size() > 1) {
    // Stage 1 needs only its own partition reduced: a reduce-scatter (half
    // an all-reduce's traffic; with the parameters' all-gather after the
    // step, a step moves what stage 0's all-reduce does, as in DeepSpeed).
    // In place: the sum of this rank's part lands where it was, in the full
    // gradient buffer (the other ranks' parts are left undefined).
    const std::vector<int64_t> counts = partition_counts(bucket.begin, bucket.end, part_, comm_.world_size());
    const Tensor send = grads_.slice(bucket.begin, {bucket.end - bucket.begin});
    f.recv = send.slice(ranks_before(bucket), {counts[comm_.rank()]});
    f.handle = comm_.reduce_scatter_async(send.data(), f.recv.data(), counts, options_.grad_dtype);
  } else {
    f.flat_begin = bucket.begin;
    f.flat_end = bucket.end;
    f.handle = comm_.all_reduce_async(static_cast<char*>(grads_.data()) +
                                          bucket.begin * static_cast<int64_t>(dtype_size(options_.grad_dtype)),
                                      bucket.end - bucket.begin, options_.grad_dtype, ReduceOp::kSum);
  }
  in_flight_.push_back(std::move(f));
  // Without overlap the reduction completes now; with it, at most
  // kBucketsInFlight run behind backward.
  absl::Status s = finish_beyond(options_.zero.overlap_comm ? kBucketsInFlight : 0);
  if (!s.ok() && comm_error_.ok()) comm_error_ = s;
}

absl::Status FlatModelState::finish(InFlight& f) {
  ZE_RETURN_IF_ERROR(f.handle->wait());
  const float post = options_.post_reduce_scale;
  if (stage() == ZeroStage::k2) {
    if (f.recv.numel() > 0) add_reduced(backend_, grads_.slice(f.partition_offset, {f.recv.numel()}), f.recv, post);
  } else if (f.recv.defined()) {  // stage 1's reduce-scatter: the reduced part is in place in grads_
    if (f.recv.numel() > 0 && post != 1.0f) backend_.ops().scale(f.recv, post);
  } else if (post != 1.0f) {
    backend_.ops().scale(grads_.slice(f.flat_begin, {f.flat_end - f.flat_begin}), post);
  }
  return absl::OkStatus();
}

absl::Status FlatModelState::finish_beyond(size_t cap) {
  absl::Status first;
  while (in_flight_.size() > cap) {
    absl::Status s = finish(in_flight_.front());
    if (!s.ok() && first.ok()) first = s;
    in_flight_.pop_front();
  }
  return first;
}

absl::Status FlatModelState::end_backward() {
  // Buckets whose parameters were not all used still reduce (every rank
  // skips the same parameters, so the collectives still match).
  if (reduces_now()) {
    for (size_t b = 0; b < buckets_.size(); ++b)
      if (!launched_[b]) launch(b);
  }
  absl::Status s = finish_all();
  if (!comm_error_.ok()) s = std::exchange(comm_error_, absl::OkStatus());
  return s;
}

std::string FlatModelState::nonfinite_gradient_names() {
  std::string names;
  int shown = 0;
  const int64_t lo = part_begin(), hi = lo + part_;
  for (const FlatSegment& seg : layout_.segments()) {
    const int64_t a = std::max(lo, seg.offset), b = std::min(hi, seg.offset + seg.param->numel());
    if (a >= b) continue;
    const Tensor g = stage() == ZeroStage::k2 ? grads_.slice(a - lo, {b - a}) : grads_.slice(a, {b - a});
    if (backend_.ops().count_nonfinite(g) == 0) continue;
    if (shown++ == 3) return names + ", ...";
    names += cat(names.empty() ? "" : ", ", seg.param->name());
  }
  return names;
}

absl::Status FlatModelState::apply_step(const Optimizer::StepArgs& args) {
  const int64_t lo = part_begin();
  if (stage() == ZeroStage::k0) return step_sub_groups(grads_, master_is_params_ ? Tensor() : params_, args);
  const Tensor grads = stage() == ZeroStage::k1 ? grads_.slice(lo, {part_}) : grads_;
  ZE_RETURN_IF_ERROR(step_sub_groups(grads, params_.slice(lo, {part_}), args));
  return all_gather_parameters();
}

absl::Status FlatModelState::all_gather_parameters() {
  // Every rank's updated partition to every rank, in allgather_bucket_size chunks.
  const int64_t chunk = std::max<int64_t>(1, options_.zero.allgather_bucket_size);
  const size_t elem = dtype_size(options_.param_dtype);
  std::vector<CommHandle> handles;
  for (int64_t o = 0; o < part_; o += chunk) {
    handles.push_back(comm_.all_gather_async(static_cast<char*>(params_.data()) + o * static_cast<int64_t>(elem),
                                             std::min(chunk, part_ - o), part_, options_.param_dtype));
  }
  absl::Status first;
  for (const CommHandle& h : handles) {
    absl::Status s = h->wait();
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

void FlatModelState::zero_grads() { backend_.ops().fill(grads_, 0.0f); }

std::vector<StateRange> FlatModelState::ranges_in(int64_t lo, int64_t hi) const {
  std::vector<StateRange> out;
  for (const FlatSegment& seg : layout_.segments()) {
    const int64_t a = std::max(lo, seg.offset), b = std::min(hi, seg.offset + seg.param->numel());
    if (a < b) out.push_back({seg.param, a - seg.offset, b - seg.offset, a - lo});
  }
  return out;
}

std::vector<StateRange> FlatModelState::held_ranges() const {
  return stage() == ZeroStage::k0 ? ranges_in(0, layout_.numel()) : ranges_in(part_begin(), part_begin() + part_);
}

std::vector<StateRange> FlatModelState::frozen_held_ranges() const {
  std::vector<StateRange> out;
  for (const FlatSegment& seg : frozen_layout_.segments()) {
    out.push_back({seg.param, 0, seg.param->numel(), seg.offset});
  }
  return out;
}

std::vector<StateRange> FlatModelState::frozen_written_ranges(int rank) const {
  // Every rank holds them whole: split the writing evenly, as stage 0 does.
  const int64_t n = frozen_layout_.numel(), world = comm_.world_size();
  const int64_t part = (n + world - 1) / world, lo = std::min(n, rank * part), hi = std::min(n, lo + part);
  std::vector<StateRange> out;
  for (const FlatSegment& seg : frozen_layout_.segments()) {
    const int64_t a = std::max(lo, seg.offset), b = std::min(hi, seg.offset + seg.param->numel());
    if (a < b) out.push_back({seg.param, a - seg.offset, b - seg.offset, a});
  }
  return out;
}

std::vector<StateRange> FlatModelState::written_ranges(int rank) const {
  // Stage 0 holds everything on every rank: split the writing evenly.
  const int64_t n = layout_.numel(), world = comm_.world_size();
  const int64_t part = stage() == ZeroStage::k0 ? (n + world - 1) / world : part_;
  const int64_t lo = std::min(n, rank * part), hi = std::min(n, lo + part);
  std::vector<StateRange> out = ranges_in(lo, hi);
  if (stage() == ZeroStage::k0)
    for (StateRange& r : out) r.offset += lo;  // offsets into the full buffers
  return out;
}

absl::Status FlatModelState::refresh_parameters() {
  if (master_is_params_) return absl::OkStatus();
  if (stage() == ZeroStage::k0) return cast_master_into(params_);
  ZE_RETURN_IF_ERROR(cast_master_into(params_.slice(part_begin(), {part_})));
  return all_gather_parameters();
}

absl::StatusOr<std::vector<float>> FlatModelState::gather_master(const Parameter& p) {
  if (!p.requires_grad()) return download_fp32(backend_, p.data.view({p.numel()}));  // no master: the weights
  const FlatSegment& seg = layout_.segments().at(segment_of_.at(&p));
  if (stage() == ZeroStage::k0) return store_->read(0, seg.offset, p.numel());
  Tensor full = backend_.zeros({layout_.numel()}, DType::kF32, MemCategory::kWorkspace);
  ZE_RETURN_IF_ERROR(copy_master(0, full.slice(part_begin(), {part_})));
  ZE_RETURN_IF_ERROR(comm_.all_gather(full.data(), part_, part_, DType::kF32));
  return download_fp32(backend_, full.slice(seg.offset, {p.numel()}));
}

absl::StatusOr<std::vector<float>> FlatModelState::gather_parameter(const Parameter& p) {
  return download_fp32(backend_, p.data.view({p.numel()}));
}

}  // namespace zero
