// The NVMe optimizer-state store; see nvme_state_store.h.
#include "offload/nvme_state_store.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <random>

#include "runtime/base/status.h"
#include "runtime/base/strings.h"
#include "runtime/core/memory_tracker.h"

namespace zero {

namespace {

constexpr std::string_view kKey = "zero_optimization.offload_optimizer";
constexpr std::string_view kMagic = "ZEROENGINE SWAP 1\n";

std::string random_run_id() {
  std::random_device rd;
  const uint64_t v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// MemAvailable from /proc/meminfo, in bytes; -1 when unknown.
int64_t host_memory_available() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (f >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return -1;
}

bool is_swap_file_name(const std::string& name) {
  return name.rfind("zeroengine-", 0) == 0 && name.size() > 11 && name.find(".optim.swp") != std::string::npos;
}

}  // namespace

NvmeStateStore::NvmeStateStore(std::vector<std::string> names, int64_t numel, const NvmeStateStoreOptions& options)
    : OptimizerStateStore(std::move(names), numel, options.hold_parameters),
      options_(options),
      layout_(SwapLayout::make(numel, options.sub_group_size, static_cast<int>(this->names().size()),
                               options.hold_parameters ? static_cast<int64_t>(dtype_size(options.param_dtype)) : 0)),
      run_id_(random_run_id()),
      on_disk_(static_cast<size_t>(layout_.groups()), false) {}

absl::StatusOr<std::unique_ptr<NvmeStateStore>> NvmeStateStore::create(Backend& backend, int64_t numel,
                                                                       std::vector<std::string> names,
                                                                       const NvmeStateStoreOptions& options) {
  if (backend.compute_tier() != Tier::kHost) {
    // For a device the model state builds the store on its host backend and
    // reaches it through the host step (zero/host_step.h).
    return absl::InvalidArgumentError(cat(kKey, ".device \"nvme\": the store's records are stepped on the CPU; ",
                                          "build it on a host backend, not on ", backend.name()));
  }
  if (options.buffer_count < 1) {
    return absl::InvalidArgumentError(cat(kKey, ".buffer_count: ", options.buffer_count, " must be at least 1 (3 or more ",
                                          "lets a step read, update and write sub-groups at the same time)"));
  }
  std::unique_ptr<NvmeStateStore> store(new NvmeStateStore(std::move(names), numel, options));
  ZE_RETURN_IF_ERROR(store->open_file(backend));
  return store;
}

absl::Status NvmeStateStore::open_file(Backend& backend) {
  namespace fs = std::filesystem;
  const std::string& dir = options_.nvme_path;
  if (dir.empty()) {
    return absl::InvalidArgumentError(cat(kKey, ".nvme_path is not set: with device \"nvme\" it names the directory ",
                                          "(on an NVMe drive) that holds the swap files"));
  }
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (!fs::exists(st)) {
    return absl::NotFoundError(cat(kKey, ".nvme_path: ", dir, " does not exist; create it (on an NVMe drive) or point ",
                                   "nvme_path at an existing directory"));
  }
  if (!fs::is_directory(st)) return absl::InvalidArgumentError(cat(kKey, ".nvme_path: ", dir, " is not a directory"));

  // Host memory for the buffers, disk for the file: both before any byte moves.
  const int64_t buffer_bytes = layout_.buffer_bytes(options_.buffer_count) +
                               options_.param_read_buffers * param_read_buffer_bytes();
  const int64_t available = host_memory_available();
  if (available >= 0 && buffer_bytes > available) {
    return absl::ResourceExhaustedError(cat(
        kKey, ": ", options_.buffer_count, " swap buffers of ", format_bytes(layout_.record_bytes()), " (a sub-group of ",
        layout_.group, " elements x ", layout_.arrays, " fp32 arrays) need ", format_bytes(buffer_bytes),
        " of host memory; ", format_bytes(available), " is available. Lower zero_optimization.sub_group_size or ",
        kKey, ".buffer_count"));
  }
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) == 0) {
    const int64_t free_bytes = static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize);
    if (free_bytes < layout_.file_bytes()) {
      return absl::ResourceExhaustedError(cat(kKey, ".nvme_path: ", dir, " has ", format_bytes(free_bytes),
                                              " free; this rank's optimizer state needs ",
                                              format_bytes(layout_.file_bytes()), " (", layout_.arrays,
                                              " fp32 arrays of ", numel(), " elements). Free space or use another drive"));
    }
  }
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!is_swap_file_name(name)) continue;
    std::error_code size_ec;
    const auto bytes = e.file_size(size_ec);
    leftovers_.push_back(cat(name, " (", format_bytes(size_ec ? 0 : static_cast<int64_t>(bytes)), ")"));
  }

  ZE_ASSIGN_OR_RETURN(IoEngineOptions io, IoEngineOptions::from_aio(options_.aio));
  ZE_ASSIGN_OR_RETURN(engine_, IoEngine::create(io));
  ZE_ASSIGN_OR_RETURN(pool_, AlignedBufferPool::create(backend, static_cast<size_t>(options_.buffer_count),
                                                       static_cast<size_t>(layout_.record_bytes())));
  std::vector<absl::Span<uint8_t>> spans = pool_->spans();
  if (holds_parameters()) {
    ZE_ASSIGN_OR_RETURN(read_pool_,
                        AlignedBufferPool::create(backend, static_cast<size_t>(std::max<int64_t>(1, options_.param_read_buffers)),
                                                  static_cast<size_t>(param_read_buffer_bytes())));
    for (absl::Span<uint8_t> b : read_pool_->spans()) spans.push_back(b);
  }
  engine_->register_buffers(spans);

  path_ = cat(dir, "/zeroengine-", run_id_, "-rank", options_.rank, ".optim.swp");
  ZE_ASSIGN_OR_RETURN(file_, engine_->open(path_, IoFileMode::kReadWrite));
  absl::Status s = engine_->preallocate(file_, layout_.file_bytes());
  if (s.ok()) {
    // The header: what this file is, for whoever finds it.
    ZE_ASSIGN_OR_RETURN(IoBuffer b, pool_->acquire());
    std::memset(b.data, 0, kSwapHeaderBytes);
    char host[256] = {};
    ::gethostname(host, sizeof(host) - 1);
    std::string arrays;
    for (const std::string& n : names()) arrays += cat(arrays.empty() ? "" : ",", n);
    const std::string text = cat(kMagic, "run_id=", run_id_, "\nrank=", options_.rank, "\npid=", ::getpid(),
                                 "\nhost=", host, "\nnumel=", numel(), "\nsub_group=", layout_.group,
                                 "\narrays=", arrays,
                                 holds_parameters() ? cat("\nparameters=", dtype_name(options_.param_dtype)) : "",
                                 "\nrecord_bytes=", layout_.record_bytes(), "\n");
    std::memcpy(b.data, text.data(), std::min<size_t>(text.size(), kSwapHeaderBytes));
    s = engine_->write(file_, b.data, kSwapHeaderBytes, 0);
    pool_->release(b);
  }
  if (!s.ok()) {
    (void)engine_->close(file_);
    ::unlink(path_.c_str());
    return s;
  }
  MemoryTracker::global().add_allocated(Tier::kNvme, MemCategory::kOptimizerState, layout_.file_bytes());
  tracked_ = true;
  return absl::OkStatus();
}

NvmeStateStore::~NvmeStateStore() {
  for (auto& [ticket, r] : reads_) {
    r.io = IoTransfer();  // waits
    read_pool_->release(r.buffer);
  }
  reads_.clear();
  if (cache_.group >= 0) pool_->release(cache_.buffer);
  if (file_.is_open()) {
    (void)engine_->close(file_);
    ::unlink(path_.c_str());
  }
  if (tracked_) MemoryTracker::global().add_allocated(Tier::kNvme, MemCategory::kOptimizerState, -layout_.file_bytes());
  // The engine goes before the pool: the kernel holds registered pages until then.
  engine_.reset();
  pool_.reset();
  read_pool_.reset();
}

int64_t NvmeStateStore::param_read_buffer_bytes() const {
  return layout_.param_read_buffer_bytes(options_.max_param_read);
}

Tensor NvmeStateStore::array_in(const IoBuffer& buffer, int index, int64_t n) const {
  const DType t = index == layout_.arrays ? options_.param_dtype : DType::kF32;
  return Tensor::wrap(buffer.data + layout_.array_offset(index), {n}, t, Tier::kHost);
}

absl::Status NvmeStateStore::for_each(RangeFn fn, bool write_back) {
  ZE_RETURN_IF_ERROR(flush());
  const int64_t groups = layout_.groups();
  const size_t record = static_cast<size_t>(layout_.record_bytes());
  struct Slot {
    IoBuffer buffer;
    int64_t group;
    IoTransfer io;  // the read into, or the write from, buffer
  };
  std::deque<Slot> reads, writes;  // in group order
  // Every buffer this call holds goes back to the pool however it ends.
  // Transfers are waited for first (an IoTransfer's destructor waits).
  struct Release {
    AlignedBufferPool& pool;
    std::deque<Slot>& a;
    std::deque<Slot>& b;
    ~Release() {
      for (std::deque<Slot>* q : {&a, &b})
        for (Slot& s : *q) {
          s.io = IoTransfer();
          pool.release(s.buffer);
        }
    }
  } release{*pool_, reads, writes};

  // A buffer for the next read: a free one, else the oldest write's once it lands.
  auto next_buffer = [&]() -> absl::StatusOr<IoBuffer> {
    if (pool_->free_count() == 0) {
      ZE_CHECK(!writes.empty()) << "swap buffers exhausted with no write in flight";
      Slot done = std::move(writes.front());
      writes.pop_front();
      absl::Status s = done.io.wait();
      pool_->release(done.buffer);
      ZE_RETURN_IF_ERROR(s);
    }
    return pool_->acquire();
  };
  int64_t next = 0;
  auto start_read = [&]() -> absl::Status {
    ZE_ASSIGN_OR_RETURN(IoBuffer b, next_buffer());
    Slot s{b, next, IoTransfer()};
    if (on_disk_[static_cast<size_t>(next)]) {
      s.io = engine_->submit_read(file_, b.data, record, layout_.record_offset(next));
    } else {
      std::memset(b.data, 0, record);  // never written by this run: zeros, whatever the disk holds
    }
    reads.push_back(std::move(s));
    ++next;
    return absl::OkStatus();
  };
  // Reads ahead: every buffer but the one being updated and (when writing
  // back) the one whose write is in flight.
  const int64_t ahead = std::max<int64_t>(1, options_.buffer_count - (write_back ? 2 : 1));
  while (next < groups && next < ahead) ZE_RETURN_IF_ERROR(start_read());

  const int narrays = layout_.arrays + (holds_parameters() ? 1 : 0);
  std::vector<Tensor> arrays(static_cast<size_t>(narrays));
  for (int64_t g = 0; g < groups; ++g) {
    if (reads.empty()) ZE_RETURN_IF_ERROR(start_read());
    Slot cur = std::move(reads.front());
    reads.pop_front();
    ZE_CHECK_EQ(cur.group, g);
    absl::Status s = cur.io.wait();
    if (!s.ok()) {
      pool_->release(cur.buffer);
      return s;
    }
    // Update in pieces, feeding the ring between them.
    const int64_t n = layout_.group_numel(g), base = layout_.group_begin(g);
    const int64_t piece = std::max<int64_t>(1, options_.poll_every);
    for (int64_t o = 0; o < n; o += piece) {
      const int64_t len = std::min(piece, n - o);
      for (int i = 0; i < narrays; ++i) arrays[static_cast<size_t>(i)] = array_in(cur.buffer, i, n).slice(o, {len});
      fn(base + o, arrays);
      engine_->poll();
    }
    if (write_back) {
      cur.io = engine_->submit_write(file_, cur.buffer.data, record, layout_.record_offset(g));
      on_disk_[static_cast<size_t>(g)] = true;
      writes.push_back(std::move(cur));
    } else {
      pool_->release(cur.buffer);
    }
    if (next < groups) ZE_RETURN_IF_ERROR(start_read());
  }
  while (!writes.empty()) {
    Slot done = std::move(writes.front());
    writes.pop_front();
    absl::Status s = done.io.wait();
    pool_->release(done.buffer);
    ZE_RETURN_IF_ERROR(s);
  }
  return absl::OkStatus();
}

absl::Status NvmeStateStore::load_cached(int64_t g) {
  if (cache_.group == g) return absl::OkStatus();
  ZE_RETURN_IF_ERROR(flush());
  ZE_ASSIGN_OR_RETURN(IoBuffer b, pool_->acquire());
  const size_t record = static_cast<size_t>(layout_.record_bytes());
  if (on_disk_[static_cast<size_t>(g)]) {
    absl::Status s = engine_->read(file_, b.data, record, layout_.record_offset(g));
    if (!s.ok()) {
      pool_->release(b);
      return s;
    }
  } else {
    std::memset(b.data, 0, record);
  }
  cache_ = {b, g, false};
  return absl::OkStatus();
}

absl::Status NvmeStateStore::flush() {
  if (cache_.group < 0) return absl::OkStatus();
  absl::Status s;
  if (cache_.dirty) {
    s = engine_->write(file_, cache_.buffer.data, static_cast<size_t>(layout_.record_bytes()),
                       layout_.record_offset(cache_.group));
    if (s.ok()) on_disk_[static_cast<size_t>(cache_.group)] = true;
  }
  pool_->release(cache_.buffer);
  cache_ = Cached();
  return s;
}

absl::StatusOr<std::vector<float>> NvmeStateStore::read(int index, int64_t offset, int64_t count) {
  ZE_CHECK(index >= 0 && index < layout_.arrays && offset >= 0 && count >= 0 && offset + count <= numel());
  std::vector<float> out(static_cast<size_t>(count));
  for (int64_t done = 0; done < count;) {
    const int64_t e = offset + done, g = e / layout_.group;
    ZE_RETURN_IF_ERROR(load_cached(g));
    const int64_t in_group = e - layout_.group_begin(g), n = std::min(count - done, layout_.group_numel(g) - in_group);
    std::memcpy(out.data() + done, array_in(cache_.buffer, index, layout_.group_numel(g)).f32() + in_group,
                static_cast<size_t>(n) * 4);
    done += n;
  }
  return out;
}

absl::Status NvmeStateStore::write(int index, int64_t offset, absl::Span<const float> values) {
  const int64_t count = static_cast<int64_t>(values.size());
  ZE_CHECK(index >= 0 && index < layout_.arrays && offset >= 0 && offset + count <= numel());
  for (int64_t done = 0; done < count;) {
    const int64_t e = offset + done, g = e / layout_.group;
    ZE_RETURN_IF_ERROR(load_cached(g));
    const int64_t in_group = e - layout_.group_begin(g), n = std::min(count - done, layout_.group_numel(g) - in_group);
    std::memcpy(array_in(cache_.buffer, index, layout_.group_numel(g)).f32() + in_group, values.data() + done,
                static_cast<size_t>(n) * 4);
    cache_.dirty = true;
    done += n;
  }
  return absl::OkStatus();
}

std::string NvmeStateStore::describe() const {
  std::string s = cat("NVMe: ", path_, " (", format_bytes(layout_.file_bytes()), ", ", layout_.groups(),
                      " sub-groups of ", layout_.group, " elements; ", options_.buffer_count, " buffers of ",
                      format_bytes(layout_.record_bytes()), " in host memory; io_uring ",
                      engine_->mode().describe(), ")");
  if (holds_parameters()) {
    s += cat("; parameters (", dtype_name(options_.param_dtype), ") in the same records, read ahead through ",
             options_.param_read_buffers, " buffers of ", format_bytes(param_read_buffer_bytes()));
  }
  if (!leftovers_.empty()) {
    s += cat("\nnote: ", options_.nvme_path, " holds ", leftovers_.size(),
             " swap file(s) of other runs (", leftovers_.front(), leftovers_.size() > 1 ? ", ..." : "",
             "): a crashed run's leftovers are never read; remove them if no run is using them");
  }
  return s;
}

absl::StatusOr<std::optional<int64_t>> NvmeStateStore::start_parameter_read(int64_t offset, int64_t count) {
  ZE_CHECK(holds_parameters());
  ZE_CHECK(offset >= 0 && count > 0 && offset + count <= numel() && count <= std::max<int64_t>(1, options_.max_param_read))
      << offset << " + " << count << " of " << numel() << ", largest read " << options_.max_param_read;
  // A read must see what the last step wrote: the cached record goes first.
  ZE_RETURN_IF_ERROR(flush());
  if (read_pool_->free_count() == 0) return std::optional<int64_t>();
  ZE_ASSIGN_OR_RETURN(IoBuffer b, read_pool_->acquire());
  ParamRead r;
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
    } else {
      std::memset(b.data + at, 0, static_cast<size_t>(hi - lo));  // never written by this run: zeros
    }
    at += hi - lo;
    e = end;
  }
  if (!requests.empty()) r.io = engine_->submit(requests);
  const int64_t ticket = next_ticket_++;
  reads_.emplace(ticket, std::move(r));
  return std::optional<int64_t>(ticket);
}

absl::Status NvmeStateStore::finish_parameter_read(int64_t ticket, const Tensor& dst) {
  auto it = reads_.find(ticket);
  ZE_CHECK(it != reads_.end()) << "unknown parameter read " << ticket;
  ParamRead r = std::move(it->second);
  reads_.erase(it);
  absl::Status s = r.io.wait();
  if (s.ok()) {
    ZE_CHECK(dst.tier() == Tier::kHost && dst.dtype() == options_.param_dtype && dst.numel() == r.count)
        << dst.debug_string();
    auto* out = static_cast<uint8_t*>(dst.data());
    const int64_t elem = layout_.param_elem;
    for (const auto& [from, n] : r.pieces) {
      std::memcpy(out, r.buffer.data + from, static_cast<size_t>(n * elem));
      out += n * elem;
    }
  }
  read_pool_->release(r.buffer);
  return s;
}

}  // namespace zero
