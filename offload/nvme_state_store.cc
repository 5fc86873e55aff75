// The NVMe optimizer-state store; see nvme_state_store.h.
#include "offload/nvme_state_store.h"

#include <cstring>
#include <deque>

#include "core/memory_tracker.h"
#include "core/status.h"
#include "core/strings.h"

namespace zero {

namespace {

constexpr std::string_view kKey = "zero_optimization.offload_optimizer";

}  // namespace

NvmeStateStore::NvmeStateStore(std::vector<std::string> names, int64_t numel, const NvmeStateStoreOptions& options)
    : OptimizerStateStore(std::move(names), numel, options.precision, options.hold_parameters),
      options_(options),
      layout_(SwapLayout::make(numel, options.sub_group_size, static_cast<int>(this->names().size()),
                               options.hold_parameters ? static_cast<int64_t>(dtype_size(options.param_dtype)) : 0,
                               static_cast<int64_t>(dtype_size(options.precision.master)),
                               static_cast<int64_t>(dtype_size(options.precision.states)))),
      run_id_(make_swap_run_id()),
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
  const int64_t read_buffer_bytes = layout_.param_read_buffer_bytes(options_.max_param_read);
  std::string arrays;
  for (const std::string& n : names()) arrays += cat(arrays.empty() ? "" : ",", n);
  // "3 fp32 arrays", or "3 arrays (bf16 master, fp32 states)"
  const std::string kinds = precision().narrow() ? cat(layout_.arrays, " arrays (", dtype_name(precision().master),
                                                       " master, ", dtype_name(precision().states), " states)")
                                                 : cat(layout_.arrays, " fp32 arrays");
  SwapFileSpec spec;
  spec.key = std::string(kKey);
  spec.dir = options_.nvme_path;
  spec.kind = "optim";
  spec.run_id = run_id_;
  spec.rank = options_.rank;
  spec.file_bytes = layout_.file_bytes();
  spec.contents = cat("optimizer state (", kinds, " of ", numel(), " elements",
                      holds_parameters() ? cat(" and the ", dtype_name(options_.param_dtype), " parameters") : "", ")");
  spec.buffer_bytes = layout_.buffer_bytes(options_.buffer_count) +
                      (holds_parameters() ? options_.param_read_buffers * read_buffer_bytes : 0);
  spec.buffers = cat(options_.buffer_count, " swap buffers of ", format_bytes(layout_.record_bytes()),
                     " (a sub-group of ", layout_.group, " elements x ", kinds, ")");
  spec.lower_hint = cat("zero_optimization.sub_group_size or ", kKey, ".buffer_count");
  spec.header = cat("numel=", numel(), "\nsub_group=", layout_.group, "\narrays=", arrays, "\nmaster=",
                    dtype_name(precision().master), "\nstates=", dtype_name(precision().states),
                    holds_parameters() ? cat("\nparameters=", dtype_name(options_.param_dtype)) : "",
                    "\nrecord_bytes=", layout_.record_bytes(), "\n");
  spec.category = MemCategory::kOptimizerState;
  // The parameter shard shares the file (offload_param "nvme" beside it): its bytes are parameters.
  if (options_.hold_parameters) spec.parameter_bytes = layout_.groups() * layout_.param_stride_bytes();
  ZE_ASSIGN_OR_RETURN(engine_, prepare_swap(backend, options_.aio, spec, &leftovers_));
  ZE_ASSIGN_OR_RETURN(pool_, AlignedBufferPool::create(backend, static_cast<size_t>(options_.buffer_count),
                                                       static_cast<size_t>(layout_.record_bytes())));
  std::vector<absl::Span<uint8_t>> spans = pool_->spans();
  if (holds_parameters()) {
    ZE_ASSIGN_OR_RETURN(read_pool_,
                        AlignedBufferPool::create(backend, static_cast<size_t>(std::max<int64_t>(1, options_.param_read_buffers)),
                                                  static_cast<size_t>(read_buffer_bytes)));
    for (absl::Span<uint8_t> b : read_pool_->spans()) spans.push_back(b);
  }
  engine_->register_buffers(spans);
  ZE_ASSIGN_OR_RETURN(file_, SwapFile::open(*engine_, spec, *pool_, backend.process_tracker()));
  if (holds_parameters()) {
    param_reads_ = std::make_unique<ParamReads>(*engine_, file_->file(), layout_, on_disk_, options_.param_dtype,
                                                options_.max_param_read, *read_pool_);
  }
  return absl::OkStatus();
}

NvmeStateStore::~NvmeStateStore() {
  param_reads_.reset();  // waits for its reads
  if (cache_.group >= 0) pool_->release(cache_.buffer);
  file_.reset();  // closes and removes the file, through the engine
  // The engine goes before the pools: the kernel holds registered pages until then.
  engine_.reset();
  pool_.reset();
  read_pool_.reset();
}

Tensor NvmeStateStore::array_in(const IoBuffer& buffer, int index, int64_t n) const {
  const DType t = index == layout_.arrays ? options_.param_dtype : dtype(index);
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
      s.io = engine_->submit_read(file_->file(), b.data, record, layout_.record_offset(next));
    } else if (!dry_run()) {
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
      cur.io = engine_->submit_write(file_->file(), cur.buffer.data, record, layout_.record_offset(g));
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
    absl::Status s = engine_->read(file_->file(), b.data, record, layout_.record_offset(g));
    if (!s.ok()) {
      pool_->release(b);
      return s;
    }
  } else if (!dry_run()) {
    std::memset(b.data, 0, record);
  }
  cache_ = {b, g, false};
  return absl::OkStatus();
}

absl::Status NvmeStateStore::flush() {
  if (cache_.group < 0) return absl::OkStatus();
  absl::Status s;
  if (cache_.dirty) {
    s = engine_->write(file_->file(), cache_.buffer.data, static_cast<size_t>(layout_.record_bytes()),
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
    const Tensor a = array_in(cache_.buffer, index, layout_.group_numel(g));
    if (!dry_run()) {
      for (int64_t i = 0; i < n; ++i)
        out[static_cast<size_t>(done + i)] = load_as_float(a.data(), a.dtype(), static_cast<size_t>(in_group + i));
    }
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
    const Tensor a = array_in(cache_.buffer, index, layout_.group_numel(g));
    if (!dry_run()) {
      for (int64_t i = 0; i < n; ++i)
        store_from_float(a.data(), a.dtype(), static_cast<size_t>(in_group + i), values[static_cast<size_t>(done + i)]);
    }
    cache_.dirty = true;
    done += n;
  }
  return absl::OkStatus();
}

std::string NvmeStateStore::describe() const {
  std::string s = cat("NVMe: ", path(), " (no name on disk; ", format_bytes(layout_.file_bytes()), ", ",
                      layout_.groups(), " sub-groups of ", layout_.group, " elements; ", options_.buffer_count,
                      " buffers of ", format_bytes(layout_.record_bytes()), " in host memory; io_uring ",
                      engine_->mode().describe(), ")");
  if (holds_parameters()) {
    s += cat("; parameters (", dtype_name(options_.param_dtype), ") in the same records, read ahead through ",
             param_reads_->buffer_count(), " buffers of ", format_bytes(param_reads_->buffer_size_bytes()));
  }
  s += swap_leftovers_note(options_.nvme_path, leftovers_);
  return s;
}

absl::StatusOr<std::optional<int64_t>> NvmeStateStore::start_parameter_read(int64_t offset, int64_t count) {
  ZE_CHECK(holds_parameters());
  // A read must see what the last step wrote: the cached record goes first.
  ZE_RETURN_IF_ERROR(flush());
  return param_reads_->start(offset, count);
}

absl::Status NvmeStateStore::finish_parameter_read(int64_t ticket, const Tensor& dst) {
  ZE_CHECK(holds_parameters());
  return param_reads_->finish(ticket, dst);
}

}  // namespace zero
