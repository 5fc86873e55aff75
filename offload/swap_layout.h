// How a rank's master weights and optimizer state are laid out when they
// live in a swap file (offload_optimizer.device = "nvme"), and so how many
// bytes of host swap buffers and of disk an NVMe-offloaded run needs. The
// NVMe state store and the memory planner both size from here.
//
// The partition's numel elements are cut into sub-groups of `group` elements
// (zero_optimization.sub_group_size, capped at numel; the last one may be
// shorter). A sub-group's record holds one array per state (master first, then
// the optimizer's states in the optimizer's order; fp32, or bf16 with
// bf16_master_weights_and_grads / bf16_optimizer_states), each array starting
// on a kSwapAlignment boundary, so every read and write is O_DIRECT-aligned:
//
//   file: [header: kSwapHeaderBytes][record 0][record 1]...
//   record g: [master | pad][exp_avg | pad][exp_avg_sq | pad]
//
// A swap step holds buffer_count records in host memory at once.
#pragma once

#include <algorithm>
#include <cstdint>

namespace zero {

inline constexpr int64_t kSwapAlignment = 4096;
inline constexpr int64_t kSwapHeaderBytes = 4096;

inline int64_t align_up(int64_t bytes, int64_t alignment) { return (bytes + alignment - 1) / alignment * alignment; }

struct SwapLayout {
  int64_t numel = 0;        // elements of the partition
  int64_t group = 1;        // elements per sub-group
  int arrays = 1;           // master + optimizer states
  int64_t param_elem = 0;   // bytes per element of the parameter array; 0: none
  int64_t master_elem = 4;  // bytes per element of the master array (4: fp32, 2: bf16)
  int64_t state_elem = 4;   // of each state array

  static SwapLayout make(int64_t numel, int64_t sub_group_size, int arrays, int64_t param_elem = 0,
                         int64_t master_elem = 4, int64_t state_elem = 4) {
    return {numel, std::max<int64_t>(1, std::min(sub_group_size, numel)), arrays, param_elem, master_elem, state_elem};
  }
  int64_t groups() const { return (numel + group - 1) / group; }
  int64_t group_begin(int64_t g) const { return g * group; }
  int64_t group_numel(int64_t g) const { return std::min(group, numel - g * group); }
  int64_t master_stride_bytes() const { return align_up(group * master_elem, kSwapAlignment); }
  int64_t state_stride_bytes() const { return align_up(group * state_elem, kSwapAlignment); }
  int64_t param_stride_bytes() const { return param_elem == 0 ? 0 : align_up(group * param_elem, kSwapAlignment); }
  // Where array i (i == arrays: the parameter array) starts in a record.
  int64_t array_offset(int i) const { return i == 0 ? 0 : master_stride_bytes() + (i - 1) * state_stride_bytes(); }
  int64_t record_bytes() const { return array_offset(arrays) + param_stride_bytes(); }
  // File offset of element e of the parameter array.
  int64_t param_file_offset(int64_t e) const {
    return record_offset(e / group) + array_offset(arrays) + (e % group) * param_elem;
  }
  int64_t record_offset(int64_t g) const { return kSwapHeaderBytes + g * record_bytes(); }
  int64_t file_bytes() const { return kSwapHeaderBytes + groups() * record_bytes(); }
  // Host bytes of the swap buffers for `buffer_count` records in flight.
  int64_t buffer_bytes(int64_t buffer_count) const { return buffer_count * record_bytes(); }
  // Bytes of one buffer that reads up to max_read parameter elements ahead of
  // their all-gather: the elements, plus up to one block of alignment slack
  // at each end of every record's piece.
  int64_t param_read_buffer_bytes(int64_t max_read) const {
    if (param_elem == 0) return 0;
    const int64_t n = std::max<int64_t>(1, max_read);
    const int64_t pieces = (n + group - 1) / group + 1;
    return align_up(n * param_elem, kSwapAlignment) + pieces * 2 * kSwapAlignment;
  }
};

// The parameter shard's own swap file (offload_param "nvme" without
// offload_optimizer "nvme", offload/nvme_param_store.h): no fp32 arrays,
// records of min(offload_param.buffer_size, numel) parameters.
inline SwapLayout param_swap_layout(int64_t numel, int64_t buffer_size, int64_t param_elem) {
  return SwapLayout::make(numel, buffer_size, 0, param_elem);
}
// The step writes that file through this many record buffers: one filled by
// the CPU while the other's write is in flight.
inline constexpr int64_t kParamWriteBuffers = 2;

}  // namespace zero
