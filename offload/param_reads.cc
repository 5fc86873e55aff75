// Parameter chunks read ahead out of a swap file; see param_reads.h.
#include "offload/param_reads.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "core/status.h"

namespace zero {

ParamReads::ParamReads(IoEngine& engine, const IoFile& file, const SwapLayout& layout, const std::vector<bool>& on_disk,
                       DType dtype, int64_t max_read, AlignedBufferPool& pool)
    : engine_(engine),
      file_(file),
      layout_(layout),
      on_disk_(on_disk),
      dtype_(dtype),
      max_read_(std::max<int64_t>(1, max_read)),
      pool_(pool) {
  ZE_CHECK(layout_.param_elem == static_cast<int64_t>(dtype_size(dtype_))) << layout_.param_elem;
}

ParamReads::~ParamReads() {
  for (auto& [ticket, r] : reads_) {
    r.io = IoTransfer();  // waits
    pool_.release(r.buffer);
  }
}

absl::StatusOr<std::optional<int64_t>> ParamReads::start(int64_t offset, int64_t count) {
  ZE_CHECK(offset >= 0 && count > 0 && offset + count <= layout_.numel && count <= max_read_)
      << offset << " + " << count << " of " << layout_.numel << ", largest read " << max_read_;
  if (pool_.free_count() == 0) return std::optional<int64_t>();
  ZE_ASSIGN_OR_RETURN(IoBuffer b, pool_.acquire());
  Read r;
  r.buffer = b;
  r.count = count;
  // One aligned request per record the range touches, packed into the buffer.
  std::vector<IoRequest> requests;
  int64_t at = 0;
  const int64_t elem = layout_.param_elem;
  for (int64_t e = offset; e < offset + count;) {
    const int64_t g = e / layout_.group;
    const int64_t end = std::min(offset + count, layout_.group_begin(g) + layout_.group_numel(g));
    const int64_t first = layout_.param_file_offset(e), last = layout_.param_file_offset(end - 1) + elem;
    const int64_t lo = first / kSwapAlignment * kSwapAlignment, hi = align_up(last, kSwapAlignment);
    ZE_CHECK_LE(at + (hi - lo), static_cast<int64_t>(b.bytes));
    r.pieces.emplace_back(at + (first - lo), end - e);
    if (on_disk_[static_cast<size_t>(g)]) {
      requests.push_back({IoOp::kRead, &file_, b.data + at, static_cast<size_t>(hi - lo), lo});
    } else if (!engine_.options().dry_run) {
      std::memset(b.data + at, 0, static_cast<size_t>(hi - lo));  // never written by this run: zeros
    }
    at += hi - lo;
    e = end;
  }
  if (!requests.empty()) r.io = engine_.submit(requests);
  const int64_t ticket = next_ticket_++;
  reads_.emplace(ticket, std::move(r));
  return std::optional<int64_t>(ticket);
}

absl::Status ParamReads::finish(int64_t ticket, const Tensor& dst) {
  auto it = reads_.find(ticket);
  ZE_CHECK(it != reads_.end()) << "unknown parameter read " << ticket;
  Read r = std::move(it->second);
  reads_.erase(it);
  absl::Status s = r.io.wait();
  if (s.ok() && !engine_.options().dry_run) {
    ZE_CHECK(dst.tier() == Tier::kHost && dst.dtype() == dtype_ && dst.numel() == r.count) << dst.debug_string();
    auto* out = static_cast<uint8_t*>(dst.data());
    const int64_t elem = layout_.param_elem;
    for (const auto& [from, n] : r.pieces) {
      std::memcpy(out, r.buffer.data + from, static_cast<size_t>(n * elem));
      out += n * elem;
    }
  }
  pool_.release(r.buffer);
  return s;
}

}  // namespace zero
