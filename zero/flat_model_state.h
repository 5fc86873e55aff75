// Model state for ZeRO stages 0, 1 and 2 over one flat layout (see
// model_state.h for what each stage keeps). Gradient buckets (grad_buckets.h)
// are reduced as backward completes them: stages 0 and 1 reduce the full
// gradient buffer in place on the accumulation boundary's backward (stage 0
// all-reduces, stage 1 reduce-scatters each bucket in place); stage 2 fills a
// bucket buffer per range on every micro-step, reduce-scatters it in place and
// adds this rank's part into its gradient partition. No stage holds a receive
// buffer beside the gradients it reduces. With overlap_comm the
// reductions run on the communication thread while backward goes on;
// without, each is waited for at once. Frozen parameters sit apart, whole on
// every rank in one buffer of the model dtype, outside the flat layout, the
// buckets and the partitions.
#pragma once

#include <algorithm>
#include <deque>
#include <unordered_map>

#include "zero/flat_layout.h"
#include "zero/grad_buckets.h"
#include "zero/model_state.h"

namespace zero {

class FlatModelState final : public ModelState {
 public:
  FlatModelState(Module& model, const ModelStateOptions& options, Backend& backend, Communicator& comm);
  absl::Status init();

  absl::Status pre_backward(Module& m) override;
  absl::Status post_backward(Module& m) override;
  void begin_backward(bool boundary) override;
  absl::Status end_backward() override;

  bool grads_replicated() const override { return stage() == ZeroStage::k0; }
  std::string nonfinite_gradient_names() override;
  absl::Status apply_step(const Optimizer::StepArgs& args) override;
  void zero_grads() override;
  absl::StatusOr<std::vector<float>> gather_master(const Parameter& p) override;
  std::vector<StateRange> held_ranges() const override;
  std::vector<StateRange> written_ranges(int rank) const override;
  std::vector<StateRange> frozen_held_ranges() const override;
  std::vector<StateRange> frozen_written_ranges(int rank) const override;
  absl::Status refresh_parameters() override;
  absl::StatusOr<std::vector<float>> gather_parameter(const Parameter& p) override;

 protected:
  Tensor owned_grads() override {
    return stage() == ZeroStage::k1 ? grads_.slice(part_begin(), {part_}) : grads_;
  }

 private:
  struct InFlight {
    CommHandle handle;
    int64_t flat_begin = 0, flat_end = 0;  // stages 0/1: the reduced range of grads_
    Tensor bucket;                         // stage 2: the bucket buffer being reduced
    Tensor recv;                           // stages 1 (reduce-scatter), 2: this rank's reduced part, in place
    int64_t partition_offset = 0;          // stage 2: where recv adds into grads_
  };

  void launch(size_t bucket);
  // Parameter ranges inside flat elements [lo, hi), with offsets relative to lo.
  std::vector<StateRange> ranges_in(int64_t lo, int64_t hi) const;
  absl::Status all_gather_parameters();
  absl::Status finish(InFlight& f);
  // Finishes the oldest in-flight reductions until at most `cap` remain.
  absl::Status finish_beyond(size_t cap);
  absl::Status finish_all() { return finish_beyond(0); }
  bool reduces_now() const { return stage() == ZeroStage::k2 || boundary_; }
  // This rank's partition of the flat layout (the whole layout at stage 0).
  int64_t part_begin() const { return stage() == ZeroStage::k0 ? 0 : comm_.rank() * part_; }
  // Elements of the bucket in the partitions of the ranks before this one:
  // where this rank's part of it begins (its in-place reduce-scatter's recv).
  int64_t ranks_before(const GradBucket& b) const { return std::clamp(part_begin(), b.begin, b.end) - b.begin; }

  Module& model_;
  FlatLayout layout_;  // the trainable parameters
  std::unordered_map<const Parameter*, size_t> segment_of_;  // index into layout_.segments()
  FlatLayout frozen_layout_;
  int64_t part_ = 0;  // partition size (stages 1, 2)
  Tensor params_;     // full, model dtype
  Tensor frozen_params_;  // full on every rank, model dtype (undefined: nothing frozen)
  Tensor grads_;      // stages 0/1: full; stage 2: this rank's partition
  bool master_is_params_ = false;  // stage 0 in fp32: the parameters are the master weights

  std::vector<GradBucket> buckets_;
  std::vector<Tensor> bucket_buffers_;  // stage 2, live during a backward
  std::unordered_map<const Parameter*, int> uses_, uses_left_;
  std::unordered_map<const Parameter*, size_t> bucket_of_;
  std::vector<int> params_pending_;  // per bucket, this backward
  std::vector<bool> launched_;
  std::deque<InFlight> in_flight_;
  bool boundary_ = false;
  absl::Status comm_error_;
};

}  // namespace zero
