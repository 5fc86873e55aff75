// The resident optimizer-state store and the choice between stores; see
// optimizer_state_store.h (the NVMe store is offload/nvme_state_store.h).
#include "offload/optimizer_state_store.h"

#include <algorithm>

#include "core/status.h"
#include "core/strings.h"
#ifdef ZE_HAVE_NVME_OFFLOAD
#include "offload/nvme_param_store.h"
#include "offload/nvme_state_store.h"
#endif

namespace zero {

namespace {

std::vector<std::string> with_master(const std::vector<std::string>& state_names) {
  std::vector<std::string> names = {"master"};
  names.insert(names.end(), state_names.begin(), state_names.end());
  return names;
}

class ResidentStateStore final : public OptimizerStateStore {
 public:
  ResidentStateStore(Backend& backend, int64_t numel, const std::vector<std::string>& state_names,
                     int64_t sub_group_size, const OptimizerPrecision& precision)
      : OptimizerStateStore(with_master(state_names), numel, precision),
        backend_(backend),
        group_(std::max<int64_t>(1, std::min(sub_group_size, numel))) {}

  absl::Status init(Tensor master) {
    for (size_t i = 0; i < names().size(); ++i) {
      const DType t = dtype(static_cast<int>(i));
      if (i == 0 && master.defined()) {
        ZE_CHECK(master.dtype() == t && master.numel() == numel()) << master.debug_string();
        arrays_.push_back(master.view({numel()}));
        continue;
      }
      ZE_ASSIGN_OR_RETURN(auto storage, backend_.allocate(static_cast<size_t>(numel()) * dtype_size(t),
                                                          backend_.compute_tier(), MemCategory::kOptimizerState));
      arrays_.emplace_back(std::move(storage), Shape{numel()}, t);
      backend_.ops().fill(arrays_.back(), 0.0f);
    }
    return absl::OkStatus();
  }

  absl::Status for_each(RangeFn fn, bool /*write_back*/) override {
    std::vector<Tensor> slices(arrays_.size());
    for (int64_t o = 0; o < numel(); o += group_) {
      const Shape s{std::min(group_, numel() - o)};
      for (size_t i = 0; i < arrays_.size(); ++i) slices[i] = arrays_[i].slice(o, s);
      fn(o, slices);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<float>> read(int index, int64_t offset, int64_t count) override {
    ZE_CHECK(offset >= 0 && count >= 0 && offset + count <= numel()) << offset << " + " << count << " > " << numel();
    return download_fp32(backend_, arrays_.at(static_cast<size_t>(index)).slice(offset, {count}));
  }

  absl::Status write(int index, int64_t offset, absl::Span<const float> values) override {
    const int64_t count = static_cast<int64_t>(values.size());
    ZE_CHECK(offset >= 0 && offset + count <= numel()) << offset << " + " << count << " > " << numel();
    upload_fp32(backend_, values, arrays_.at(static_cast<size_t>(index)).slice(offset, {count}));
    return absl::OkStatus();
  }

  std::string describe() const override {
    return cat(backend_.compute_tier() == Tier::kHost ? "host" : "device", " memory");
  }

 private:
  Backend& backend_;
  int64_t group_;
  std::vector<Tensor> arrays_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<OptimizerStateStore>> make_resident_state_store(
    Backend& backend, int64_t numel, const std::vector<std::string>& state_names, int64_t sub_group_size,
    const OptimizerPrecision& precision, Tensor master) {
  auto store = std::make_unique<ResidentStateStore>(backend, numel, state_names, sub_group_size, precision);
  ZE_RETURN_IF_ERROR(store->init(std::move(master)));
  return std::unique_ptr<OptimizerStateStore>(std::move(store));
}

absl::StatusOr<std::unique_ptr<OptimizerStateStore>> make_state_store(Backend& backend, int64_t numel,
                                                                      const std::vector<std::string>& state_names,
                                                                      const StateStoreOptions& options,
                                                                      Tensor master) {
  // (Combinations no store runs were refused by check_offload, zero/host_step.h.)
  const OffloadConfig& offload = options.offload_optimizer;
  const OffloadConfig& param = options.offload_param;
  ZE_CHECK(!options.hold_parameters || param.device == OffloadDevice::kNvme);
  if (offload.device != OffloadDevice::kNvme && !options.hold_parameters) {
    return make_resident_state_store(backend, numel, state_names, options.sub_group_size, options.precision,
                                     std::move(master));
  }
#ifdef ZE_HAVE_NVME_OFFLOAD
  ZE_CHECK(options.stage >= 1);
  // A gather reads a whole chunk into one read buffer (offload_param.buffer_size elements).
  if (options.hold_parameters && options.max_param_read > param.buffer_size) {
    return absl::InvalidArgumentError(cat(
        "zero_optimization.offload_param.buffer_size: ", param.buffer_size,
        " elements is smaller than this rank's largest parameter chunk (", options.max_param_read,
        " elements); raise it (DeepSpeed needs it at least as large as the largest parameter too)"));
  }
  if (offload.device != OffloadDevice::kNvme) {
    // offload_param "nvme" alone: the states resident, the shard in a file of its own.
    ZE_ASSIGN_OR_RETURN(std::unique_ptr<OptimizerStateStore> states,
                        make_resident_state_store(backend, numel, state_names, options.sub_group_size,
                                                  options.precision));
    NvmeParamStoreOptions o;
    o.nvme_path = param.nvme_path;
    o.read_buffers = param.buffer_count;
    o.record_elems = param.buffer_size;
    o.max_param_read = options.max_param_read;
    o.param_dtype = options.param_dtype;
    o.aio = options.aio;
    o.rank = options.rank;
    return NvmeParamStore::create(backend, std::move(states), o);
  }
  NvmeStateStoreOptions o;
  o.nvme_path = offload.nvme_path;
  o.buffer_count = offload.buffer_count;
  o.sub_group_size = options.sub_group_size;
  o.aio = options.aio;
  o.rank = options.rank;
  o.precision = options.precision;
  if (options.hold_parameters) {
    o.hold_parameters = true;
    o.param_dtype = options.param_dtype;
    o.param_read_buffers = param.buffer_count;
    o.max_param_read = options.max_param_read;
  }
  return NvmeStateStore::create(backend, numel, with_master(state_names), o);
#else
  return absl::UnimplementedError(cat("zero_optimization.", offload.device == OffloadDevice::kNvme ? "offload_optimizer"
                                                                                                  : "offload_param",
                                      ".device \"nvme\": this build has no io_uring (liburing 2.3 or later was not "
                                      "found when it was configured)"));
#endif
}

}  // namespace zero
