// Where a rank's fp32 master weights and optimizer state live, and how the
// step reaches them: resident in memory (the default; offload_optimizer cpu
// on the CPU backend is the same thing, and on a device backend it is the
// resident store built on a host backend, reached through zero/host_step.h),
// or in a swap file under offload_optimizer.nvme_path, streamed through a few
// host buffers in sub-groups (offload/nvme_state_store.h; on a device backend
// built on the same host backend, behind the same host step).
//
// The store holds arrays as long as the partition: index 0 is the master
// weights, then the optimizer's states in Optimizer::state_names() order, in
// the run's OptimizerPrecision (fp32, or bf16 with DeepSpeed's
// bf16_master_weights_and_grads / bf16_optimizer_states). The model state
// reaches them only through this interface:
//   - for_each() runs the optimizer (or a cast) over the whole partition,
//     sub-group by sub-group;
//   - read()/write() move any range in and out as host fp32, whatever the
//     array's dtype (checkpoints, initial values, gathering the master
//     weights); a write to a bf16 array rounds to nearest even.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/backend.h"
#include "kernels/optimizer.h"
#include "offload/aio_config.h"
#include "offload/offload_config.h"

namespace zero {

class OptimizerStateStore {
 public:
  virtual ~OptimizerStateStore() = default;

  // "master", then the optimizer's state names: the arrays (what
  // checkpoints hold, as fp32).
  const std::vector<std::string>& names() const { return names_; }
  int64_t numel() const { return numel_; }
  // The dtype of array i.
  DType dtype(int i) const { return i == 0 ? precision_.master : precision_.states; }
  const OptimizerPrecision& precision() const { return precision_; }

  // fn(offset, arrays): arrays[i] is elements [offset, offset + n) of array i
  // (a tensor on the compute tier). Called for consecutive ranges that cover
  // the partition in order; a range never crosses a sub-group, but a store may
  // cut a sub-group into several ranges, so fn must act elementwise (every
  // optimizer here does). With write_back, what fn changed is kept.
  using RangeFn = absl::FunctionRef<void(int64_t offset, absl::Span<const Tensor> arrays)>;
  virtual absl::Status for_each(RangeFn fn, bool write_back) = 0;

  // Elements [offset, offset + count) of array `index`, as host fp32.
  virtual absl::StatusOr<std::vector<float>> read(int index, int64_t offset, int64_t count) = 0;
  // Overwrites elements [offset, offset + values.size()) of array `index`.
  virtual absl::Status write(int index, int64_t offset, absl::Span<const float> values) = 0;
  // Makes every write() so far part of what the next for_each() or read() sees
  // from storage (the NVMe store writes back its cached sub-group).
  virtual absl::Status flush() { return absl::OkStatus(); }

  // Where the state is, for the log ("host memory", "NVMe: <file>, ...").
  virtual std::string describe() const = 0;

  // ---- parameters in the store (offload_param "nvme" at stage 3): the
  // store then also holds this rank's parameter shard in the model dtype, and
  // for_each() passes it as one more array after the states, for the step to
  // write the new weights into. That array is output only: with write_back,
  // fn writes every element of it; what it holds on entry is unspecified
  // (the parameter store, offload/nvme_param_store.h, never reads it back).
  bool holds_parameters() const { return holds_parameters_; }
  // Starts reading parameter elements [offset, offset + count) ahead of their
  // use: a ticket for finish_parameter_read, or nullopt when every read
  // buffer is taken (finish an earlier read first).
  virtual absl::StatusOr<std::optional<int64_t>> start_parameter_read(int64_t offset, int64_t count) {
    return absl::UnimplementedError("this store holds no parameters");
  }
  // Waits for the read and copies it into dst (host memory, the model dtype).
  virtual absl::Status finish_parameter_read(int64_t ticket, const Tensor& dst) {
    return absl::UnimplementedError("this store holds no parameters");
  }

 protected:
  OptimizerStateStore(std::vector<std::string> names, int64_t numel, const OptimizerPrecision& precision,
                      bool holds_parameters = false)
      : names_(std::move(names)), numel_(numel), precision_(precision), holds_parameters_(holds_parameters) {}

 private:
  std::vector<std::string> names_;
  int64_t numel_;
  OptimizerPrecision precision_;
  bool holds_parameters_;
};

// Every array resident on the backend's compute tier (tracked as optimizer
// state); sub-groups of sub_group_size elements. `master`, when defined, is
// adopted as array 0 instead of allocating one (stage 0 in fp32, where the
// parameters are the master weights).
absl::StatusOr<std::unique_ptr<OptimizerStateStore>> make_resident_state_store(
    Backend& backend, int64_t numel, const std::vector<std::string>& state_names, int64_t sub_group_size,
    const OptimizerPrecision& precision = {}, Tensor master = Tensor());

// What ModelState needs to pick and build the store for this run.
struct StateStoreOptions {
  int stage = 0;                     // the ZeRO stage (NVMe needs 1-3)
  int64_t sub_group_size = 1000000000;  // zero_optimization.sub_group_size
  OffloadConfig offload_optimizer;   // zero_optimization.offload_optimizer
  OffloadConfig offload_param = param_offload_defaults();  // zero_optimization.offload_param
  AioConfig aio;                     // the I/O engine of the NVMe store
  int rank = 0;
  OptimizerPrecision precision;      // the arrays' dtypes
  // Stage 3 with offload_param "nvme": the store also holds the parameter
  // shard (in param_dtype), read in pieces of at most max_param_read elements.
  bool hold_parameters = false;
  DType param_dtype = DType::kF32;
  int64_t max_param_read = 0;
};

// The store offload_optimizer and offload_param ask for, on `backend` (whose
// compute tier must be host memory for NVMe): NVMe when offload_optimizer's
// device is "nvme" (with hold_parameters the shard rides in its records);
// resident states beside a parameter swap file with hold_parameters alone;
// else resident. NVMe is an error if this build has no io_uring.
absl::StatusOr<std::unique_ptr<OptimizerStateStore>> make_state_store(Backend& backend, int64_t numel,
                                                                      const std::vector<std::string>& state_names,
                                                                      const StateStoreOptions& options,
                                                                      Tensor master = Tensor());

}  // namespace zero
