// Parameters on NVMe beside resident optimizer state; see nvme_param_store.h.
#include "offload/nvme_param_store.h"

#include <algorithm>
#include <deque>

#include "core/memory_tracker.h"
#include "core/status.h"
#include "core/strings.h"

namespace zero {

namespace {

constexpr std::string_view kKey = "zero_optimization.offload_param";

}  // namespace

NvmeParamStore::NvmeParamStore(std::unique_ptr<OptimizerStateStore> states, const NvmeParamStoreOptions& options)
    : OptimizerStateStore(states->names(), states->numel(), states->precision(), /*holds_parameters=*/true),
      states_(std::move(states)),
      options_(options),
      layout_(param_swap_layout(numel(), options.record_elems, static_cast<int64_t>(dtype_size(options.param_dtype)))),
      run_id_(make_swap_run_id()),
      on_disk_(static_cast<size_t>(layout_.groups()), false) {}

absl::StatusOr<std::unique_ptr<NvmeParamStore>> NvmeParamStore::create(Backend& backend,
                                                                       std::unique_ptr<OptimizerStateStore> states,
                                                                       const NvmeParamStoreOptions& options) {
  ZE_CHECK(states != nullptr && !states->holds_parameters());
  if (backend.compute_tier() != Tier::kHost) {
    return absl::InvalidArgumentError(cat(kKey, ".device \"nvme\": the parameter records are written on the CPU; ",
                                          "build the store on a host backend, not on ", backend.name()));
  }
  if (options.read_buffers < 1) {
    return absl::InvalidArgumentError(cat(kKey, ".buffer_count: ", options.read_buffers,
                                          " must be at least 1 (each buffer holds one parameter chunk read ahead of "
                                          "its all-gather)"));
  }
  ZE_CHECK_LE(options.max_param_read, options.record_elems);  // checked with the key by make_state_store
  std::unique_ptr<NvmeParamStore> store(new NvmeParamStore(std::move(states), options));
  ZE_RETURN_IF_ERROR(store->open_file(backend));
  return store;
}

absl::Status NvmeParamStore::open_file(Backend& backend) {
  const int64_t read_buffer_bytes = layout_.param_read_buffer_bytes(options_.max_param_read);
  SwapFileSpec spec;
  spec.key = std::string(kKey);
  spec.dir = options_.nvme_path;
  spec.kind = "param";
  spec.run_id = run_id_;
  spec.rank = options_.rank;
  spec.file_bytes = layout_.file_bytes();
  spec.contents = cat("parameter shard (", numel(), " ", dtype_name(options_.param_dtype), " elements)");
  spec.buffer_bytes = kParamWriteBuffers * layout_.record_bytes() + options_.read_buffers * read_buffer_bytes;
  spec.buffers = cat(kParamWriteBuffers, " write buffers of ", format_bytes(layout_.record_bytes()), " and ",
                     options_.read_buffers, " read buffers of ", format_bytes(read_buffer_bytes));
  spec.lower_hint = cat(kKey, ".buffer_size or ", kKey, ".buffer_count");
  spec.header = cat("numel=", numel(), "\nrecord=", layout_.group, "\nparameters=", dtype_name(options_.param_dtype),
                    "\nrecord_bytes=", layout_.record_bytes(), "\n");
  spec.category = MemCategory::kParameters;
  ZE_ASSIGN_OR_RETURN(engine_, prepare_swap(backend, options_.aio, spec, &leftovers_));
  ZE_ASSIGN_OR_RETURN(write_pool_, AlignedBufferPool::create(backend, static_cast<size_t>(kParamWriteBuffers),
                                                             static_cast<size_t>(layout_.record_bytes())));
  ZE_ASSIGN_OR_RETURN(read_pool_, AlignedBufferPool::create(backend, static_cast<size_t>(options_.read_buffers),
                                                             static_cast<size_t>(read_buffer_bytes)));
  std::vector<absl::Span<uint8_t>> spans = write_pool_->spans();
  for (absl::Span<uint8_t> b : read_pool_->spans()) spans.push_back(b);
  engine_->register_buffers(spans);
  ZE_ASSIGN_OR_RETURN(file_, SwapFile::open(*engine_, spec, *write_pool_, backend.process_tracker()));
  reads_ = std::make_unique<ParamReads>(*engine_, file_->file(), layout_, on_disk_, options_.param_dtype,
                                        options_.max_param_read, *read_pool_);
  return absl::OkStatus();
}

NvmeParamStore::~NvmeParamStore() {
  reads_.reset();  // waits for its reads
  file_.reset();   // closes and removes the file, through the engine
  // The engine goes before the pools: the kernel holds registered pages until then.
  engine_.reset();
  write_pool_.reset();
  read_pool_.reset();
}

absl::Status NvmeParamStore::for_each(RangeFn fn, bool write_back) {
  struct Write {
    IoBuffer buffer;
    IoTransfer io;
  };
  std::deque<Write> writes;  // in flight, oldest first
  IoBuffer filling;          // the record the CPU writes into
  int64_t filling_group = -1;
  absl::Status status;
  // Every buffer goes back to the pool however this ends (a transfer's
  // destructor waits for it).
  struct Release {
    AlignedBufferPool& pool;
    std::deque<Write>& writes;
    IoBuffer& filling;
    int64_t& filling_group;
    ~Release() {
      for (Write& w : writes) {
        w.io = IoTransfer();
        pool.release(w.buffer);
      }
      if (filling_group >= 0) pool.release(filling);
    }
  } release{*write_pool_, writes, filling, filling_group};

  auto wait_oldest = [&]() -> absl::Status {
    Write w = std::move(writes.front());
    writes.pop_front();
    absl::Status s = w.io.wait();
    write_pool_->release(w.buffer);
    return s;
  };
  // Hands the filled record to the disk (or back to the pool when nothing is written).
  auto close_record = [&]() {
    if (filling_group < 0) return;
    if (write_back) {
      writes.push_back({filling, engine_->submit_write(file_->file(), filling.data,
                                                       static_cast<size_t>(layout_.record_bytes()),
                                                       layout_.record_offset(filling_group))});
      on_disk_[static_cast<size_t>(filling_group)] = true;
    } else {
      write_pool_->release(filling);
    }
    filling_group = -1;
  };
  auto open_record = [&](int64_t g) -> absl::Status {
    close_record();
    if (write_pool_->free_count() == 0) ZE_RETURN_IF_ERROR(wait_oldest());
    ZE_ASSIGN_OR_RETURN(filling, write_pool_->acquire());
    filling_group = g;
    return absl::OkStatus();
  };

  const int64_t elem = layout_.param_elem;
  std::vector<Tensor> pieces;
  ZE_RETURN_IF_ERROR(states_->for_each(
      [&](int64_t offset, absl::Span<const Tensor> arrays) {
        if (!status.ok()) return;  // an I/O error ends the pass; the step reports it
        const int64_t n = arrays[0].numel();
        pieces.resize(arrays.size() + 1);
        // The range may cross records: cut it there (every fn is elementwise).
        for (int64_t e = offset; e < offset + n;) {
          const int64_t g = e / layout_.group;
          if (g != filling_group) {
            status = open_record(g);
            if (!status.ok()) return;
          }
          const int64_t end = std::min(offset + n, layout_.group_begin(g) + layout_.group_numel(g));
          const Shape s{end - e};
          for (size_t i = 0; i < arrays.size(); ++i) pieces[i] = arrays[i].slice(e - offset, s);
          pieces.back() = Tensor::wrap(filling.data + (e - layout_.group_begin(g)) * elem, s, options_.param_dtype,
                                       Tier::kHost);
          fn(e, pieces);
          e = end;
        }
        engine_->poll();
      },
      write_back));
  if (status.ok()) close_record();
  while (!writes.empty()) {
    absl::Status s = wait_oldest();
    if (status.ok()) status = s;
  }
  return status;
}

std::string NvmeParamStore::describe() const {
  std::string s = cat(states_->describe(), "; the parameter shard (", dtype_name(options_.param_dtype), ") on NVMe: ",
                      path(), " (no name on disk; ", format_bytes(layout_.file_bytes()), ", ", layout_.groups(),
                      " records of ", layout_.group, " elements; written by the step through ", kParamWriteBuffers,
                      " buffers of ", format_bytes(layout_.record_bytes()), ", read ahead of each all-gather through ",
                      reads_->buffer_count(), " buffers of ", format_bytes(reads_->buffer_size_bytes()), "; io_uring ",
                      engine_->mode().describe(), ")");
  s += swap_leftovers_note(options_.nvme_path, leftovers_);
  return s;
}

}  // namespace zero
