// Parameters on NVMe with the optimizer state in memory: offload_param.device
// "nvme" at stage 3 without offload_optimizer.device "nvme" (DeepSpeed allows
// it: ZeRO-Infinity's parameter swapper beside a CPU or device optimizer).
//
// The fp32 master weights and optimizer state stay in a resident store (host
// memory: the CPU backend's, or a GPU rank's host step's); this store wraps
// it and keeps the rank's stage-3 parameter shard, in the model dtype, in a
// swap file of its own under offload_param.nvme_path:
//
//   file: [header: 4 KiB][record 0][record 1]...   record g: [parameters | pad]
//
// records of min(offload_param.buffer_size, shard) elements
// (param_swap_layout in offload/swap_layout.h), each on a 4 KiB boundary.
//
// The step (for_each with write_back) runs over the resident arrays and
// writes each record's new weights into one of two host write buffers;
// when a record is full its write starts, and the CPU fills the other
// buffer meanwhile. The parameters are output only: the step overwrites all
// of them, so no record is read back for it. A gather reads its chunk ahead
// through offload_param.buffer_count read buffers (offload/param_reads.h).
//
// Memory accounting: the file's bytes are parameters on the NVMe tier; the
// write and read buffers are swap buffers (host tier).
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

struct NvmeParamStoreOptions {
  std::string nvme_path;           // offload_param.nvme_path
  int64_t read_buffers = 5;        // offload_param.buffer_count
  int64_t record_elems = 100000000;  // offload_param.buffer_size
  int64_t max_param_read = 1;      // the largest chunk a gather reads
  DType param_dtype = DType::kF32;
  AioConfig aio;
  int rank = 0;
};

class NvmeParamStore final : public OptimizerStateStore {
 public:
  // `states`: the resident store of the master weights and optimizer state
  // (on `backend`, whose compute tier is host memory).
  static absl::StatusOr<std::unique_ptr<NvmeParamStore>> create(Backend& backend,
                                                                std::unique_ptr<OptimizerStateStore> states,
                                                                const NvmeParamStoreOptions& options);
  ~NvmeParamStore() override;

  absl::Status for_each(RangeFn fn, bool write_back) override;
  absl::StatusOr<std::vector<float>> read(int index, int64_t offset, int64_t count) override {
    return states_->read(index, offset, count);
  }
  absl::Status write(int index, int64_t offset, absl::Span<const float> values) override {
    return states_->write(index, offset, values);
  }
  absl::Status flush() override { return states_->flush(); }
  std::string describe() const override;
  absl::StatusOr<std::optional<int64_t>> start_parameter_read(int64_t offset, int64_t count) override {
    return reads_->start(offset, count);
  }
  absl::Status finish_parameter_read(int64_t ticket, const Tensor& dst) override {
    return reads_->finish(ticket, dst);
  }

  const std::string& path() const { return file_->path(); }
  const SwapLayout& layout() const { return layout_; }
  const IoEngineStats& io_stats() const { return engine_->stats(); }

 private:
  NvmeParamStore(std::unique_ptr<OptimizerStateStore> states, const NvmeParamStoreOptions& options);
  absl::Status open_file(Backend& backend);

  std::unique_ptr<OptimizerStateStore> states_;
  NvmeParamStoreOptions options_;
  SwapLayout layout_;
  std::string run_id_;
  std::vector<std::string> leftovers_;
  std::unique_ptr<IoEngine> engine_;
  std::unique_ptr<AlignedBufferPool> write_pool_;
  std::unique_ptr<AlignedBufferPool> read_pool_;
  std::unique_ptr<SwapFile> file_;
  std::vector<bool> on_disk_;  // record g was written by this run
  std::unique_ptr<ParamReads> reads_;
};

}  // namespace zero
