// The NVMe optimizer-state store (offload_optimizer.device = "nvme"; ZeRO-
// Infinity's optimizer swapping): a rank's fp32 master weights and optimizer
// state live in one O_DIRECT swap file under nvme_path, laid out in sub-group
// records (offload/swap_layout.h), and only buffer_count records are in host
// memory at once.
//
// The step streams the file through the buffers: while sub-group i is being
// updated, i+1 (and further, as buffers allow) is being read and i-1 written,
// all in flight together on one io_uring; the update of a sub-group runs in
// pieces with the ring polled between them, so the kernel's queue stays full
// during compute. read()/write() reach any range through one cached record
// (checkpoints, initial values).
//
// Preflight, at create(), and the file's header and lifetime:
// offload/swap_file.h (nvme_path exists and is a directory, the disk has room
// for the whole preallocated file, host memory has room for the buffers; each
// error names the key, the path and what to do). The file has no name on disk,
// so nothing is left in nvme_path however the run ends. A record is read back
// only after this run wrote it (never-written sub-groups are zeros).
//
// The store lives on a host backend: the CPU backend a CPU run computes on,
// or, for a GPU rank, the host backend of zero/host_step.h, whose step runs
// over this store's for_each while gradients and weights cross the bus.
//
// Memory accounting: the buffers are tracked swap buffers (host tier); the
// file's bytes are tracked as optimizer state on the NVMe tier.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "offload/aio_config.h"
#include "offload/aligned_buffer_pool.h"
#include "offload/io_engine.h"
#include "offload/optimizer_state_store.h"
#include "offload/param_reads.h"
#include "offload/swap_file.h"
#include "offload/swap_layout.h"

namespace zero {

struct NvmeStateStoreOptions {
  std::string nvme_path;
  int64_t buffer_count = 4;
  int64_t sub_group_size = 1000000000;
  AioConfig aio;
  int rank = 0;
  OptimizerPrecision precision;  // the arrays' dtypes
  // Elements updated between two polls of the ring during a step.
  int64_t poll_every = 1 << 20;
  // offload_param "nvme": the parameter shard (param_dtype) rides in the
  // records; reads ahead of the all-gather use param_read_buffers buffers,
  // each holding up to max_param_read elements.
  bool hold_parameters = false;
  DType param_dtype = DType::kF32;
  int64_t param_read_buffers = 5;
  int64_t max_param_read = 0;
};

class NvmeStateStore final : public OptimizerStateStore {
 public:
  // `names`: "master", then the optimizer's states.
  static absl::StatusOr<std::unique_ptr<NvmeStateStore>> create(Backend& backend, int64_t numel,
                                                                std::vector<std::string> names,
                                                                const NvmeStateStoreOptions& options);
  ~NvmeStateStore() override;

  absl::Status for_each(RangeFn fn, bool write_back) override;
  absl::StatusOr<std::vector<float>> read(int index, int64_t offset, int64_t count) override;
  absl::Status write(int index, int64_t offset, absl::Span<const float> values) override;
  absl::Status flush() override;
  std::string describe() const override;
  absl::StatusOr<std::optional<int64_t>> start_parameter_read(int64_t offset, int64_t count) override;
  absl::Status finish_parameter_read(int64_t ticket, const Tensor& dst) override;

  const std::string& path() const { return file_->path(); }
  const std::string& run_id() const { return run_id_; }
  const SwapLayout& layout() const { return layout_; }
  const IoEngineStats& io_stats() const { return engine_->stats(); }
  // Swap files of other runs found in nvme_path at create().
  const std::vector<std::string>& leftovers() const { return leftovers_; }

 private:
  bool dry_run() const { return engine_->options().dry_run; }
  NvmeStateStore(std::vector<std::string> names, int64_t numel, const NvmeStateStoreOptions& options);
  absl::Status open_file(Backend& backend);
  // Array `index` of a record held in `buffer`, as an fp32 tensor of n elements.
  Tensor array_in(const IoBuffer& buffer, int index, int64_t n) const;
  // Makes `g` the cached record (writing back a dirty one first).
  absl::Status load_cached(int64_t g);

  NvmeStateStoreOptions options_;
  SwapLayout layout_;
  std::string run_id_;
  std::vector<std::string> leftovers_;
  std::unique_ptr<IoEngine> engine_;
  std::unique_ptr<AlignedBufferPool> pool_;
  std::unique_ptr<AlignedBufferPool> read_pool_;  // offload_param "nvme": parameter reads
  std::unique_ptr<SwapFile> file_;
  std::vector<bool> on_disk_;  // record g was written by this run
  std::unique_ptr<ParamReads> param_reads_;  // offload_param "nvme": the shard is in the records
  struct Cached {
    IoBuffer buffer;
    int64_t group = -1;
    bool dirty = false;
  } cache_;
};

}  // namespace zero
