// Model state for ZeRO stage 3: parameters, gradients, fp32 master weights
// and optimizer state all partitioned per parameter (see model_state.h and
// param_coordinator.h). Around each module call the coordinator gathers its
// parameters; in backward each parameter gets a full-size gradient buffer at
// its first use, and after its last use the buffer is reduce-scattered in
// place and this rank's chunk added into its gradient shard (in flight at most reduce_bucket_size elements
// when overlap_comm; at once otherwise). A frozen parameter is partitioned
// and gathered the same way, from a shard of its own (frozen_shard_), and
// gets no gradient buffer, reduction, master or optimizer state.
#pragma once

#include <deque>
#include <memory>
#include <unordered_map>

#include "zero/model_state.h"
#include "zero/param_coordinator.h"

namespace zero {

class Stage3ModelState final : public ModelState {
 public:
  Stage3ModelState(Module& model, const ModelStateOptions& options, Backend& backend, Communicator& comm);
  absl::Status init();

  absl::Status pre_forward(Module& m) override;
  absl::Status post_forward(Module& m) override;
  absl::Status pre_backward(Module& m) override;
  absl::Status post_backward(Module& m) override;
  void begin_forward() override { coordinator_->begin_iteration(); }
  void set_evaluating(bool evaluating) override { coordinator_->set_evaluating(evaluating); }
  void begin_backward(bool boundary) override;
  absl::Status end_backward() override;

  std::string nonfinite_gradient_names() override;
  absl::Status apply_step(const Optimizer::StepArgs& args) override;
  void zero_grads() override { backend_.ops().fill(grad_shard_, 0.0f); }
  absl::StatusOr<std::vector<float>> gather_master(const Parameter& p) override;
  std::vector<StateRange> held_ranges() const override { return written_ranges(comm_.rank()); }
  std::vector<StateRange> written_ranges(int rank) const override { return ranges_of(rank, false); }
  std::vector<StateRange> frozen_held_ranges() const override { return frozen_written_ranges(comm_.rank()); }
  std::vector<StateRange> frozen_written_ranges(int rank) const override { return ranges_of(rank, true); }
  absl::Status refresh_parameters() override;
  absl::StatusOr<std::vector<float>> gather_parameter(const Parameter& p) override;

  const ParamCoordinator& coordinator() const { return *coordinator_; }

  // This rank's chunk of one parameter in each partitioned buffer (views; the
  // last rank's chunk ends in padding).
  // shard_offset: where the chunk starts in the master weights (state_store()),
  // or for a frozen parameter in frozen_weights() (then grad is undefined).
  struct Chunks {
    Tensor param, grad;
    int64_t shard_offset;
  };
  Chunks chunks_of(const Parameter& p) const {
    const ParamPartition& part = parts_.at(&p);
    const Shape s{part.chunk};
    if (part.frozen) return {frozen_shard_.slice(part.shard_offset, s), Tensor(), part.shard_offset};
    return {param_shard_.slice(part.shard_offset, s), grad_shard_.slice(part.shard_offset, s), part.shard_offset};
  }

 protected:
  Tensor owned_grads() override { return grad_shard_; }

 private:
  struct InFlight {
    CommHandle handle;
    Tensor full_grad;  // kept alive until the reduce-scatter completes
    Tensor recv;       // this rank's chunk
    int64_t shard_offset;
  };
  // Rank `rank`'s chunks of the trainable (or the frozen) parameters.
  std::vector<StateRange> ranges_of(int rank, bool frozen) const;
  void reduce(Parameter& p);
  absl::Status finish_one();
  void note(const absl::Status& s) {
    if (!s.ok() && error_.ok()) error_ = s;
  }

  Module& model_;
  std::vector<Parameter*> params_;
  std::vector<Parameter*> trainable_;  // of params_, those that train
  std::unordered_map<const Parameter*, ParamPartition> parts_;
  int64_t shard_elems_ = 0;  // the trainable chunks'
  Tensor param_shard_, grad_shard_;
  Tensor frozen_shard_;  // the frozen chunks (model dtype); undefined when nothing is frozen
  std::unique_ptr<ParamCoordinator> coordinator_;
  std::unordered_map<const Parameter*, int> uses_, uses_left_;
  std::unordered_map<const Parameter*, Tensor> full_grads_;  // during backward
  std::deque<InFlight> in_flight_;
  int64_t in_flight_elems_ = 0;
  absl::Status error_;
};

}  // namespace zero
