// ZeRO-Offload's optimizer step on the CPU; see host_step.h.
#include "zero/host_step.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/strings.h"

namespace zero {

namespace {

// Elements [offset, ...) of t, as a byte pointer (t may be device memory).
char* element_ptr(const Tensor& t, int64_t offset) {
  return static_cast<char*>(t.data()) + offset * static_cast<int64_t>(dtype_size(t.dtype()));
}

}  // namespace

HostOffload host_offload_for(const ZeroConfig& zero, Tier compute_tier, bool forced) {
  const bool applies = compute_tier != Tier::kHost || forced;
  HostOffload o;
  const OffloadDevice od = zero.offload_optimizer.device;
  o.optimizer = applies && (od == OffloadDevice::kCpu || od == OffloadDevice::kNvme);
  o.optimizer_on_nvme = o.optimizer && od == OffloadDevice::kNvme;
  o.parameters = applies && zero.stage == ZeroStage::k3 && zero.offload_param.device == OffloadDevice::kCpu;
  o.parameters_on_nvme = applies && zero.stage == ZeroStage::k3 && zero.offload_param.device == OffloadDevice::kNvme;
  return o;
}

absl::Status check_offload(const ZeroConfig& zero, const HostOffload& offload) {
  if (zero.offload_param.device != OffloadDevice::kNone && zero.stage != ZeroStage::k3) {
    return absl::InvalidArgumentError(
        "zero_optimization.offload_param: requires stage 3 (parameters are only partitioned at stage 3)");
  }
  const bool optimizer_on_nvme = zero.offload_optimizer.device == OffloadDevice::kNvme;
  if ((optimizer_on_nvme || offload.optimizer) && zero.stage == ZeroStage::k0) {
    return absl::InvalidArgumentError(cat(
        "zero_optimization.offload_optimizer.device \"", optimizer_on_nvme ? "nvme" : "cpu",
        "\" needs ZeRO stage 1, 2 or 3", optimizer_on_nvme ? "" : " on a device backend",
        " (at stage 0 there is no partitioned optimizer state to offload; DeepSpeed offloads only at stages 1-3); set "
        "zero_optimization.stage"));
  }
  if (offload.parameters_on_nvme && !offload.optimizer) {
    return absl::InvalidArgumentError(
        "zero_optimization.offload_param.device \"nvme\" needs offload_optimizer.device \"cpu\" or \"nvme\" on a "
        "device backend: the optimizer step then runs on the CPU and writes the new weights into the parameter swap "
        "file");
  }
  if (offload.parameters && !offload.optimizer) {
    return absl::InvalidArgumentError(
        "zero_optimization.offload_param.device \"cpu\" needs offload_optimizer.device \"cpu\" too (or \"nvme\") "
        "on a device backend: the optimizer step then runs on the CPU and writes the new weights straight into the "
        "parameter shard in host memory");
  }
  return absl::OkStatus();
}

int64_t host_step_chunk_elems(int64_t numel, int64_t sub_group_size) {
  return std::max<int64_t>(1, std::min({numel, sub_group_size, kHostStepMaxChunkElems}));
}

int64_t host_step_staging_bytes(int64_t chunk_elems, DType grad_dtype, DType param_dtype, bool params_on_host) {
  const int64_t per_elem = static_cast<int64_t>(dtype_size(grad_dtype)) +
                           (params_on_host ? 0 : static_cast<int64_t>(dtype_size(param_dtype)));
  return 2 * chunk_elems * per_elem;
}

HostStep::HostStep(Backend& device, Backend& host, int64_t numel, int64_t chunk_elems, DType grad_dtype,
                   DType param_dtype, bool params_on_host, bool state_on_nvme)
    : device_(device),
      host_(host),
      numel_(numel),
      chunk_(chunk_elems),
      grad_dtype_(grad_dtype),
      param_dtype_(param_dtype),
      params_on_host_(params_on_host),
      state_on_nvme_(state_on_nvme) {}

absl::StatusOr<std::unique_ptr<HostStep>> HostStep::create(Backend& device, Backend& host, int64_t numel,
                                                           int64_t chunk_elems, DType grad_dtype, DType param_dtype,
                                                           bool params_on_host, bool state_on_nvme) {
  ZE_CHECK(numel >= 0 && chunk_elems >= 1) << numel << ", chunk " << chunk_elems;
  ZE_CHECK(host.compute_tier() == Tier::kHost) << host.name();
  std::unique_ptr<HostStep> s(new HostStep(device, host, numel, chunk_elems, grad_dtype, param_dtype, params_on_host,
                                            state_on_nvme));
  auto staging = [&](DType t) -> absl::StatusOr<Tensor> {
    ZE_ASSIGN_OR_RETURN(auto storage, device.allocate(static_cast<size_t>(chunk_elems) * dtype_size(t), Tier::kHost,
                                                      kHostStepStagingCategory));
    return Tensor(std::move(storage), {chunk_elems}, t);
  };
  for (Staging& set : s->sets_) {
    ZE_ASSIGN_OR_RETURN(set.grad, staging(grad_dtype));
    if (!params_on_host) {
      ZE_ASSIGN_OR_RETURN(set.param, staging(param_dtype));
    }
  }
  s->down_ = device.create_stream();
  s->up_ = device.create_stream();
  return s;
}

absl::Status HostStep::run(OptimizerStateStore& store, const Tensor& grads, const Tensor& param_out, bool write_back,
                           PieceFn fn) {
  ZE_CHECK_EQ(store.numel(), numel_);
  // offload_param "nvme": the parameters are the store's last array (host
  // memory, in the swap records), written like a host shard.
  const bool into_store = store.holds_parameters();
  ZE_CHECK(!into_store || (params_on_host_ && !param_out.defined())) << param_out.debug_string();
  ZE_CHECK(into_store || (param_out.defined() && param_out.numel() == numel_ && param_out.dtype() == param_dtype_))
      << param_out.debug_string();
  ZE_CHECK(!grads.defined() || (grads.numel() == numel_ && grads.dtype() == grad_dtype_)) << grads.debug_string();
  const int64_t chunks = (numel_ + chunk_ - 1) / chunk_;
  const size_t gsize = dtype_size(grad_dtype_), psize = dtype_size(param_dtype_);
  auto chunk_len = [&](int64_t k) { return std::min(chunk_, numel_ - k * chunk_); };

  // Both streams start behind the compute stream: the gradients are final
  // there, and nothing still reads the parameters the uploads overwrite.
  const EventPtr ready = device_.record_event(kComputeStream);
  device_.wait_event(down_, ready);
  device_.wait_event(up_, ready);
  // With the parameters in host memory the CPU writes them directly, so the
  // host waits until no device copy of the shard can still be reading it.
  if (params_on_host_) device_.synchronize(ready);

  auto start_download = [&](int64_t k) {
    if (!grads.defined() || k >= chunks) return;
    Staging& s = sets_[static_cast<size_t>(k % 2)];
    device_.copy_async(s.grad.data(), element_ptr(grads, k * chunk_), static_cast<size_t>(chunk_len(k)) * gsize, down_);
    s.grad_landed = device_.record_event(down_);
  };
  auto start_upload = [&](int64_t k) {
    if (params_on_host_) return;
    Staging& s = sets_[static_cast<size_t>(k % 2)];
    device_.copy_async(element_ptr(param_out, k * chunk_), s.param.data(), static_cast<size_t>(chunk_len(k)) * psize,
                       up_);
    s.param_sent = device_.record_event(up_);
  };
  int64_t current = -1;  // the chunk the CPU works on
  // Moving on to chunk k: the previous one's weights go up, the next one's
  // gradients come down into the set the previous one has just freed, and
  // the host waits for k's gradients and for its set's last upload.
  auto enter = [&](int64_t k) {
    ZE_CHECK_EQ(k, current + 1) << "the store's ranges must come in order";
    if (current >= 0) start_upload(current);
    start_download(k + 1);
    Staging& s = sets_[static_cast<size_t>(k % 2)];
    if (s.grad_landed) device_.synchronize(std::exchange(s.grad_landed, nullptr));
    if (s.param_sent) device_.synchronize(std::exchange(s.param_sent, nullptr));
    current = k;
  };

  start_download(0);
  std::vector<Tensor> pieces;
  absl::Status status = store.for_each(
      [&](int64_t offset, absl::Span<const Tensor> arrays) {
        const int64_t n = arrays[0].numel();
        pieces.resize(arrays.size());
        // A range may cross chunk boundaries (a sub-group larger than the
        // chunk): cut it there; every optimizer is elementwise.
        for (int64_t e = offset; e < offset + n;) {
          const int64_t k = e / chunk_;
          if (k != current) enter(k);
          const int64_t end = std::min(offset + n, (k + 1) * chunk_);
          const Shape s{end - e};
          for (size_t i = 0; i < arrays.size(); ++i) pieces[i] = arrays[i].slice(e - offset, s);
          const Staging& set = sets_[static_cast<size_t>(k % 2)];
          const Tensor grad = grads.defined() ? set.grad.slice(e - k * chunk_, s) : Tensor();
          const Tensor param = into_store        ? pieces.back()
                               : params_on_host_ ? param_out.slice(e, s)
                                                 : set.param.slice(e - k * chunk_, s);
          fn(pieces, grad, param);
          e = end;
        }
      },
      write_back);
  if (status.ok() && current >= 0) start_upload(current);
  // Everything lands before the staging or the parameters are touched again.
  for (Staging& s : sets_) {
    if (s.grad_landed) device_.synchronize(std::exchange(s.grad_landed, nullptr));
    if (s.param_sent) device_.synchronize(std::exchange(s.param_sent, nullptr));
  }
  ZE_RETURN_IF_ERROR(status);
  ZE_CHECK_EQ(current, chunks - 1) << "the store's ranges must cover the partition";
  return absl::OkStatus();
}

absl::Status HostStep::step(OptimizerStateStore& store, Optimizer& optimizer, const Tensor& grads,
                            const Tensor& param_out, const Optimizer::StepArgs& args) {
  ZE_CHECK(grads.defined());
  const size_t states = store.names().size() - 1;
  return run(store, grads, param_out, /*write_back=*/true,
             [&](absl::Span<const Tensor> arrays, const Tensor& grad, const Tensor& param) {
               optimizer.step(arrays[0], grad, arrays.subspan(1, states), param, args);
             });
}

absl::Status HostStep::cast_master_into(OptimizerStateStore& store, const Tensor& param_out) {
  return run(store, Tensor(), param_out, /*write_back=*/store.holds_parameters(),
             [&](absl::Span<const Tensor> arrays, const Tensor&, const Tensor& param) {
               host_.ops().cast(arrays[0], param);
             });
}

std::string HostStep::describe() const {
  std::string s = cat(state_on_nvme_ ? "NVMe, swapped through host memory (ZeRO-Infinity)"
                                     : "host memory (ZeRO-Offload)",
                      ": the optimizer step runs on the CPU in chunks of ", chunk_,
                      " elements; gradients (", dtype_name(grad_dtype_), ") go ", device_.name(), " -> host");
  if (params_on_host_) {
    s += cat(", and the new weights are written into the parameter shard in host memory");
  } else {
    s += cat(" and the new weights (", dtype_name(param_dtype_), ") host -> ", device_.name());
  }
  return cat(s, ", overlapped through 2 pinned staging sets (", format_bytes(staging_bytes()), ")");
}

}  // namespace zero
