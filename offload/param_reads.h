// Reads of stage-3 parameter chunks out of a swap file, ahead of their
// all-gather (offload_param.device "nvme"). Both NVMe stores own one: the
// optimizer-state store when the shard rides in its records, the parameter
// store when the shard has a file of its own.
//
// A read covers elements [offset, offset + count) of the file's parameter
// array (offload/swap_layout.h): one aligned request per record the range
// touches, packed into one of `buffers` read buffers; finish() copies the
// pieces out, in order, into the caller's tensor. A record this run never
// wrote reads as zeros, whatever the disk holds. start() returns nullopt when
// every buffer is taken: the caller finishes an older read first (the
// coordinator skips a prefetch, or waits for its oldest read).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "offload/aligned_buffer_pool.h"
#include "offload/io_engine.h"
#include "offload/swap_layout.h"

namespace zero {

class ParamReads {
 public:
  // `pool`: the read buffers, registered with `engine` by the owner, which
  // destroys this object first, then the engine, then the pool. The file,
  // layout and on_disk flags outlive this object too.
  ParamReads(IoEngine& engine, const IoFile& file, const SwapLayout& layout, const std::vector<bool>& on_disk,
             DType dtype, int64_t max_read, AlignedBufferPool& pool);
  ~ParamReads();  // waits for reads still in flight

  // A ticket for finish(), or nullopt when every read buffer is taken.
  absl::StatusOr<std::optional<int64_t>> start(int64_t offset, int64_t count);
  // Waits for the read and copies it into dst (host memory, the parameter dtype).
  absl::Status finish(int64_t ticket, const Tensor& dst);

  size_t buffer_count() const { return pool_.buffer_count(); }
  int64_t buffer_size_bytes() const { return static_cast<int64_t>(pool_.buffer_bytes()); }

 private:
  struct Read {
    IoBuffer buffer;
    IoTransfer io;
    int64_t count = 0;
    std::vector<std::pair<int64_t, int64_t>> pieces;  // (byte offset in the buffer, elements), in order
  };
  IoEngine& engine_;
  const IoFile& file_;
  const SwapLayout& layout_;
  const std::vector<bool>& on_disk_;
  DType dtype_;
  int64_t max_read_;
  AlignedBufferPool& pool_;
  std::unordered_map<int64_t, Read> reads_;
  int64_t next_ticket_ = 0;
};

}  // namespace zero
