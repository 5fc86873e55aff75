// ZeRO-Offload's optimizer step (offload_optimizer.device "cpu" on a backend
// that computes outside host memory): this rank's fp32 master weights and
// optimizer state live in host memory, in a resident store built on a second,
// host backend (a CpuBackend the model state owns), and the optimizer runs
// there (CPU Adam). What crosses the bus per step is this rank's gradient
// partition, device -> host, and the new model-dtype weights, host -> device.
//
// The partition is cut into chunks of chunk_elems (host_step_chunk_elems) and
// streamed through two pinned staging sets, so the bus and the CPU work at the
// same time:
//
//   down stream:  grad k+1 -> set (k+1)%2
//   CPU:          update chunk k: master, states, grad (set k%2) -> weights (set k%2)
//   up stream:    weights k-1 (set (k-1)%2) -> parameters
//
// A set's gradient buffer is refilled once the CPU has moved past it; its
// weight buffer is rewritten only after its previous upload's event. Both
// streams start after an event recorded on the compute stream (gradients are
// final, nobody reads the parameters), and step() returns with every copy
// landed, so the staging is idle between steps and the parameters are ready
// for whatever the compute stream or a collective does next.
//
// Staging: 2 sets of chunk_elems gradients (gradient dtype) and, unless the
// parameters themselves live in host memory (offload_param "cpu" at stage 3,
// where the CPU writes the new weights straight into the shard), chunk_elems
// weights (model dtype). Allocated from the compute backend's host tier (the
// CUDA backend pins it, so the copies are truly asynchronous), tracked as
// communication buffers: like the gradient buckets, they exist only to move
// bytes between places. The memory planner sizes them from the functions below.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/backend.h"
#include "kernels/optimizer.h"
#include "offload/optimizer_state_store.h"
#include "zero/zero_config.h"

namespace zero {

// Which parts of a run take the host path.
struct HostOffload {
  bool optimizer = false;          // master + optimizer state on the host backend, the step on the CPU
  bool optimizer_on_nvme = false;  // ... in the NVMe store built there (offload_optimizer "nvme")
  bool parameters = false;         // stage 3: the parameter shard in (pinned) host memory
  bool parameters_on_nvme = false; // stage 3: the shard in the NVMe store's records (offload_param "nvme")
};

// offload_optimizer "cpu" or "nvme" / offload_param "cpu" or "nvme" on a
// backend whose compute tier is not host memory; or on any backend with
// `forced` (EngineConfig::force_offload_path, for tests: the CPU backend then
// plays the device, and the same code runs as on a GPU). On the CPU backend
// without it, "cpu" moves nothing (the state is in host memory already) and
// "nvme" runs the NVMe store on the compute backend itself.
//
// "nvme" is ZeRO-Infinity's optimizer part on the same path: the store the
// host step runs over is the NVMe store (offload/nvme_state_store.h) built on
// the host backend, whose for_each streams the swap records (read i+1 /
// update i / write i-1) while the host step streams gradients down and
// weights up. With offload_param "nvme" too the parameter shard rides in the
// records and the step writes it there (no weight staging, like "cpu"); with
// offload_param "nvme" beside offload_optimizer "cpu" the shard has a swap
// file of its own (offload/nvme_param_store.h), written the same way.
HostOffload host_offload_for(const ZeroConfig& zero, Tier compute_tier, bool forced);
// The offload combinations no path runs, named by their keys; the one check
// the config parser (for run.backend), the engine, the planner and
// zero-train's backend check share. On any backend: offload_param below stage
// 3 (only stage 3 partitions parameters), NVMe optimizer state at stage 0
// (nothing partitioned to offload, as DeepSpeed). Where the host path applies (`offload`): "cpu" at stage 0,
// offload_param "cpu" or "nvme" without offload_optimizer on the host (the
// step, on the CPU, writes the host shard or the parameter swap file).
absl::Status check_offload(const ZeroConfig& zero, const HostOffload& offload);

// The chunk the step streams in: at most sub_group_size (the unit the store
// hands out) and kHostStepMaxChunkElems (so the pinned staging stays small,
// and the pipeline has stages, even at DeepSpeed's default sub_group_size of
// 1e9), and at least 1.
inline constexpr int64_t kHostStepMaxChunkElems = int64_t{1} << 24;
int64_t host_step_chunk_elems(int64_t numel, int64_t sub_group_size);
// Bytes of pinned staging for that chunk (both sets).
int64_t host_step_staging_bytes(int64_t chunk_elems, DType grad_dtype, DType param_dtype, bool params_on_host);
inline constexpr MemCategory kHostStepStagingCategory = MemCategory::kCommBuffers;

class HostStep {
 public:
  // device: the compute backend (staging from its host tier, copies on two
  // streams of its own); host: the backend the store and the optimizer run
  // on. numel: the partition; params_on_host: the parameters step() writes
  // are host memory (no weight staging, no upload); state_on_nvme: the
  // store is the NVMe one (for describe()).
  static absl::StatusOr<std::unique_ptr<HostStep>> create(Backend& device, Backend& host, int64_t numel,
                                                          int64_t chunk_elems, DType grad_dtype, DType param_dtype,
                                                          bool params_on_host, bool state_on_nvme = false);

  // One optimizer update of `store` (host arrays; resident or NVMe, whose
  // ranges may be smaller than a chunk, in order) from `grads` (the
  // partition's gradients, compute tier), writing the new weights into
  // `param_out` (the partition's parameters), or, when the store holds the
  // parameters (param_out undefined, params_on_host), into the store.
  // Returns when every copy has landed.
  absl::Status step(OptimizerStateStore& store, Optimizer& optimizer, const Tensor& grads, const Tensor& param_out,
                    const Optimizer::StepArgs& args);
  // param_out (the store's parameters when it holds them) := cast(master),
  // over the whole store (initial values, a checkpoint load).
  absl::Status cast_master_into(OptimizerStateStore& store, const Tensor& param_out);

  int64_t chunk_elems() const { return chunk_; }
  int64_t staging_bytes() const { return host_step_staging_bytes(chunk_, grad_dtype_, param_dtype_, params_on_host_); }
  // For the log: where the state is and how the step moves it.
  std::string describe() const;

 private:
  HostStep(Backend& device, Backend& host, int64_t numel, int64_t chunk_elems, DType grad_dtype, DType param_dtype,
           bool params_on_host, bool state_on_nvme);

  struct Staging {
    Tensor grad, param;          // chunk_ elements each (param: undefined with params_on_host_)
    EventPtr grad_landed;        // the download into grad, while in flight
    EventPtr param_sent;         // the upload from param, while in flight
  };
  // fn(arrays, grad, param) for consecutive pieces covering the store, each
  // inside one chunk: arrays = the store's arrays, grad = the staged
  // gradients (undefined without grads), param = where the new weights go.
  using PieceFn = absl::FunctionRef<void(absl::Span<const Tensor> arrays, const Tensor& grad, const Tensor& param)>;
  absl::Status run(OptimizerStateStore& store, const Tensor& grads, const Tensor& param_out, bool write_back,
                   PieceFn fn);

  Backend& device_;
  Backend& host_;
  int64_t numel_, chunk_;
  DType grad_dtype_, param_dtype_;
  bool params_on_host_, state_on_nvme_;
  StreamId down_ = kComputeStream, up_ = kComputeStream;
  std::array<Staging, 2> sets_;
};

}  // namespace zero
