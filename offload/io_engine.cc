// io_uring O_DIRECT engine; see io_engine.h.
//
// Bookkeeping: a submitted transfer is cut into pieces of at most block_size
// bytes lazily, as slots free up. An in-flight piece lives in slots_[i] and its
// SQE carries i as user_data. A short completion puts the remainder on
// retry_queue_, which is served before new pieces, so a transfer finishes
// once its last piece (remainders included) has completed.
#include "offload/io_engine.h"

#include <fcntl.h>
#include <liburing.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "core/check.h"
#include "core/memory_tracker.h"
#include "core/status.h"
#include "offload/huge_pages.h"

namespace zero {

namespace {

// Pieces that make no progress (EAGAIN, a zero-byte completion) are retried
// this many times before the transfer fails.
constexpr int kMaxNoProgressAttempts = 8;
constexpr int64_t kMaxBlockSize = int64_t{1} << 30;  // an SQE length is 32-bit; registered buffers are <= 1 GiB
constexpr int64_t kMaxQueueDepth = 4096;
constexpr int kDryRunFirstFd = 1 << 30;  // above any descriptor a process can hold

absl::Status system_status(int ret_or_minus_errno, IoCall call, std::string_view path,
                           std::string_view detail = {}) {
  if (ret_or_minus_errno >= 0) return absl::OkStatus();
  return io_errno_status(-ret_or_minus_errno, call, path, detail);
}

}  // namespace

// ---------------------------------------------------------------- options, mode

absl::StatusOr<IoEngineOptions> IoEngineOptions::from_aio(const AioConfig& aio) {
  if (aio.use_gds) {
    return absl::UnimplementedError(
        "aio.use_gds = true: GPUDirect Storage is not supported by ZeroEngine's io_uring engine; set "
        "aio.use_gds to false");
  }
  if (aio.block_size <= 0 || aio.block_size % static_cast<int64_t>(kIoAlignment) != 0 ||
      aio.block_size > kMaxBlockSize) {
    return absl::InvalidArgumentError(cat("aio.block_size = ", aio.block_size,
                                          ": must be a positive multiple of 4096 bytes (O_DIRECT) of "
                                          "at most 1 GiB; 1048576 is the default"));
  }
  if (aio.queue_depth < 1 || aio.intra_op_parallelism < 1 || aio.queue_depth > kMaxQueueDepth ||
      aio.intra_op_parallelism > kMaxQueueDepth || aio.queue_depth * aio.intra_op_parallelism > kMaxQueueDepth) {
    return absl::InvalidArgumentError(cat("aio.queue_depth = ", aio.queue_depth, " x aio.intra_op_parallelism = ",
                                          aio.intra_op_parallelism, ": each must be at least 1 and their "
                                          "product at most ", kMaxQueueDepth));
  }
  IoEngineOptions o;
  o.block_size = aio.block_size;
  o.queue_depth = aio.queue_depth * aio.intra_op_parallelism;
  o.overlap_events = aio.overlap_events;
  o.single_submit = aio.single_submit;
  return o;
}

std::string IoEngineMode::describe() const {
  std::string buffers;
  if (buffers_registered) {
    buffers = cat("registered buffers (", registered_buffer_count, ", ",
                  format_bytes(static_cast<int64_t>(registered_buffer_bytes)), ")");
    if (huge_page_bytes > 0) {
      buffers = cat(buffers, ", ", format_bytes(static_cast<int64_t>(huge_page_bytes)), " in 2 MiB pages");
    }
  } else if (!buffers_fallback.empty()) {
    buffers = cat("unregistered buffers (", buffers_fallback, ")");
  } else {
    buffers = "unregistered buffers (none offered)";
  }
  const std::string files = files_registered ? cat("registered files (", registered_file_slots, " slots)")
                                             : cat("unregistered files (", files_fallback, ")");
  return cat(buffers, ", ", files);
}

// ---------------------------------------------------------------- IoFile, IoTransfer

IoFile::IoFile(IoFile&& other) noexcept { *this = std::move(other); }

IoFile& IoFile::operator=(IoFile&& other) noexcept {
  if (this != &other) {
    if (engine_ != nullptr && fd_ >= 0) engine_->close_quietly(*this);
    engine_ = std::exchange(other.engine_, nullptr);
    fd_ = std::exchange(other.fd_, -1);
    slot_ = std::exchange(other.slot_, -1);
    mode_ = other.mode_;
    path_ = std::move(other.path_);
  }
  return *this;
}

IoFile::~IoFile() {
  if (engine_ != nullptr && fd_ >= 0) engine_->close_quietly(*this);
}

absl::StatusOr<int64_t> IoFile::size() const {
  ZE_CHECK(is_open()) << "size() of a closed IoFile";
  struct stat st;
  if (::fstat(fd_, &st) != 0) return io_errno_status(errno, IoCall::kStat, path_);
  return static_cast<int64_t>(st.st_size);
}

IoTransfer::IoTransfer(IoTransfer&& other) noexcept { *this = std::move(other); }

IoTransfer& IoTransfer::operator=(IoTransfer&& other) noexcept {
  if (this != &other) {
    if (engine_ != nullptr) engine_->wait_transfer(id_).IgnoreError();
    engine_ = std::exchange(other.engine_, nullptr);
    id_ = other.id_;
    bytes_ = other.bytes_;
    result_ = std::move(other.result_);
  }
  return *this;
}

IoTransfer::~IoTransfer() {
  if (engine_ != nullptr) engine_->wait_transfer(id_).IgnoreError();
}

absl::Status IoTransfer::wait() {
  if (engine_ != nullptr) {
    result_ = engine_->wait_transfer(id_);
    engine_ = nullptr;
  }
  return result_;
}

bool IoTransfer::done() {
  if (engine_ == nullptr) return true;
  if (!engine_->transfer_done(id_)) return false;
  wait().IgnoreError();  // finished: returns at once and keeps the status for wait()
  return true;
}

// ---------------------------------------------------------------- engine set-up

IoEngine::IoEngine(const IoEngineOptions& options, int max_in_flight)
    : options_(options), max_in_flight_(max_in_flight), ring_(std::make_unique<io_uring>()) {
  slots_.resize(max_in_flight_);
  for (int i = max_in_flight_ - 1; i >= 0; --i) free_slots_.push_back(i);
}

absl::StatusOr<std::unique_ptr<IoEngine>> IoEngine::create(const IoEngineOptions& o) {
  if (o.block_size <= 0 || o.block_size % static_cast<int64_t>(kIoAlignment) != 0 || o.block_size > kMaxBlockSize) {
    return absl::InvalidArgumentError(cat("I/O block_size = ", o.block_size,
                                          ": must be a positive multiple of 4096 bytes of at most 1 GiB"));
  }
  if (o.queue_depth < 1 || o.queue_depth > kMaxQueueDepth) {
    return absl::InvalidArgumentError(
        cat("I/O queue_depth = ", o.queue_depth, ": must be between 1 and ", kMaxQueueDepth));
  }
  if (o.max_credited_bytes_for_testing < 0 ||
      o.max_credited_bytes_for_testing % static_cast<int64_t>(kIoAlignment) != 0) {
    return absl::InvalidArgumentError("max_credited_bytes_for_testing must be a multiple of 4096");
  }
  if (o.max_registered_files < 0) return absl::InvalidArgumentError("max_registered_files must be >= 0");
  std::unique_ptr<IoEngine> engine(new IoEngine(o, static_cast<int>(o.queue_depth)));
  if (o.dry_run) {
    engine->mode_.files_fallback = "a dry run";
    return engine;
  }
  ZE_RETURN_IF_ERROR(engine->init_ring());
  engine->init_file_table();
  return engine;
}

absl::Status IoEngine::init_ring() {
  // COOP_TASKRUN: completions are run when this thread next enters the kernel
  // (it always does to wait) instead of interrupting it; TASKRUN_FLAG lets a
  // non-blocking peek know it must enter. Kernels before 5.19 reject the
  // flags; they then get a plain ring.
  io_uring_params params{};
  params.flags = IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG;
  int ret = io_uring_queue_init_params(static_cast<unsigned>(max_in_flight_), ring_.get(), &params);
  if (ret == -EINVAL) {
    params = io_uring_params{};
    ret = io_uring_queue_init_params(static_cast<unsigned>(max_in_flight_), ring_.get(), &params);
  }
  ZE_RETURN_IF_ERROR(system_status(ret, IoCall::kSetup, "", cat(" with ", max_in_flight_, " entries")));
  ring_ready_ = true;
  return absl::OkStatus();
}

void IoEngine::init_file_table() {
  if (!options_.register_files || options_.max_registered_files == 0) {
    mode_.files_fallback = "file registration is off";
    return;
  }
  const int ret = io_uring_register_files_sparse(ring_.get(), static_cast<unsigned>(options_.max_registered_files));
  const absl::Status s = system_status(ret, IoCall::kRegisterFiles, "", cat(" (", options_.max_registered_files, " slots)"));
  if (!s.ok()) {
    mode_.files_fallback = std::string(s.message());
    return;
  }
  file_slot_used_.assign(options_.max_registered_files, false);
  mode_.files_registered = true;
  mode_.registered_file_slots = options_.max_registered_files;
}

IoEngine::~IoEngine() {
  ZE_CHECK(transfers_.empty()) << transfers_.size()
                               << " I/O transfers outlive their IoEngine; destroy the engine last";
  ZE_CHECK_EQ(open_files_, 0) << "IoFiles outlive their IoEngine; close them first";
  if (ring_ready_) io_uring_queue_exit(ring_.get());  // also drops registered buffers and files
}

const IoEngineMode& IoEngine::register_buffers(absl::Span<const absl::Span<uint8_t>> buffers) {
  ZE_CHECK(in_flight_ == 0 && issue_queue_.empty() && retry_queue_.empty())
      << "register_buffers() with transfers in progress";
  if (mode_.buffers_registered) {
    ZE_CHECK_OK(system_status(io_uring_unregister_buffers(ring_.get()), IoCall::kRegisterBuffers, ""));
    regions_.clear();
  }
  mode_.buffers_registered = false;
  mode_.registered_buffer_count = 0;
  mode_.registered_buffer_bytes = 0;
  mode_.huge_page_bytes = 0;
  mode_.buffers_fallback.clear();
  if (buffers.empty()) return mode_;
  if (options_.dry_run) {
    mode_.buffers_fallback = "a dry run";
    return mode_;
  }
  if (!options_.register_buffers) {
    mode_.buffers_fallback = "buffer registration is off";
    return mode_;
  }
  // Physically contiguous buffers: the kernel pins 2 MiB pages as single
  // segments (and io_uring merges them into one bvec), so a 1 MiB request is a
  // few device descriptors rather than 256. Done before registration, which
  // pins the pages where they are.
  size_t huge = 0;
  if (options_.huge_page_buffers) {
    for (const auto& b : buffers) huge += collapse_to_huge_pages(b.data(), b.size());
  }
  std::vector<iovec> iov;
  size_t total = 0;
  iov.reserve(buffers.size());
  for (const auto& b : buffers) {
    iov.push_back(iovec{b.data(), b.size()});
    total += b.size();
  }
  const int ret = io_uring_register_buffers(ring_.get(), iov.data(), static_cast<unsigned>(iov.size()));
  const absl::Status s = system_status(ret, IoCall::kRegisterBuffers, "",
                                       cat(" (", iov.size(), " buffers, ", format_bytes(static_cast<int64_t>(total)), ")"));
  if (!s.ok()) {
    mode_.buffers_fallback = std::string(s.message());
    return mode_;
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    const auto begin = reinterpret_cast<uintptr_t>(buffers[i].data());
    regions_.push_back(Region{begin, begin + buffers[i].size(), static_cast<int>(i)});
  }
  std::sort(regions_.begin(), regions_.end(), [](const Region& a, const Region& b) { return a.begin < b.begin; });
  mode_.buffers_registered = true;
  mode_.registered_buffer_count = buffers.size();
  mode_.registered_buffer_bytes = total;
  mode_.huge_page_bytes = huge;
  return mode_;
}

int IoEngine::registered_buffer_index(const void* data, size_t bytes) const {
  const auto p = reinterpret_cast<uintptr_t>(data);
  auto it = std::upper_bound(regions_.begin(), regions_.end(), p,
                             [](uintptr_t v, const Region& r) { return v < r.begin; });
  if (it == regions_.begin()) return -1;
  --it;
  return p + bytes <= it->end ? it->index : -1;
}

// ---------------------------------------------------------------- files

absl::StatusOr<IoFile> IoEngine::open(const std::string& path, IoFileMode mode) {
  if (options_.dry_run) return dry_run_file(path, mode);
  int flags = O_DIRECT | O_CLOEXEC;
  switch (mode) {
    case IoFileMode::kRead: flags |= O_RDONLY; break;
    case IoFileMode::kWrite: flags |= O_WRONLY | O_CREAT; break;
    case IoFileMode::kReadWrite: flags |= O_RDWR | O_CREAT; break;
  }
  ZE_ASSIGN_OR_RETURN(const int fd, open_path(path, flags, mode == IoFileMode::kRead ? IoCall::kOpenRead
                                                                                      : IoCall::kOpenWrite));
  return adopt(fd, mode, path);
}

absl::StatusOr<IoFile> IoEngine::open_unnamed(const std::string& dir, const std::string& name) {
  const std::string path = cat(dir, "/", name);
  if (options_.dry_run) return dry_run_file(path, IoFileMode::kReadWrite);
  // An inode that never has a name (ext4, XFS, Btrfs, tmpfs).
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_DIRECT | O_CLOEXEC, 0600);
  if (fd < 0) {
    // No O_TMPFILE there (EOPNOTSUPP; EISDIR from a kernel before 3.11), or
    // another error, which the named open then reports with its usual words:
    // create the name (never an existing file's) and remove it at once.
    ZE_ASSIGN_OR_RETURN(fd, open_path(path, O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, IoCall::kOpenWrite));
    if (::unlink(path.c_str()) != 0) {
      const int err = errno;
      ::close(fd);
      return io_errno_status(err, IoCall::kOpenWrite, path, " (removing its name)");
    }
  }
  return adopt(fd, IoFileMode::kReadWrite, path);
}

IoFile IoEngine::dry_run_file(const std::string& path, IoFileMode mode) {
  IoFile file;  // a descriptor no process has: nothing is opened
  file.engine_ = this;
  file.fd_ = kDryRunFirstFd + open_files_++;
  file.mode_ = mode;
  file.path_ = path;
  return file;
}

absl::StatusOr<int> IoEngine::open_path(const std::string& path, int flags, IoCall call) {
  // Linux creates the file before it checks O_DIRECT support: remember whether
  // it existed so a failed open leaves no empty file behind.
  struct stat before;
  const bool existed = ::stat(path.c_str(), &before) == 0;
  const int fd = ::open(path.c_str(), flags, 0600);
  if (fd < 0) {
    int err = errno;
    if (!existed && (flags & O_CREAT) != 0) ::unlink(path.c_str());
    // O_DIRECT on a directory fails with EINVAL, which would blame the filesystem.
    if (err == EINVAL && existed && S_ISDIR(before.st_mode)) err = EISDIR;
    return io_errno_status(err, call, path);
  }
  return fd;
}

absl::StatusOr<IoFile> IoEngine::adopt(int fd, IoFileMode mode, const std::string& path) {
  const IoCall call = mode == IoFileMode::kRead ? IoCall::kOpenRead : IoCall::kOpenWrite;
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return io_errno_status(err, IoCall::kStat, path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    if (S_ISDIR(st.st_mode)) return io_errno_status(EISDIR, call, path);
    return absl::InvalidArgumentError(cat(io_call_name(call), " ", path, ": not a regular file; give a file path"));
  }
  IoFile file;
  file.engine_ = this;
  file.fd_ = fd;
  file.mode_ = mode;
  file.path_ = path;
  if (mode_.files_registered) {
    auto free_slot = std::find(file_slot_used_.begin(), file_slot_used_.end(), false);
    if (free_slot != file_slot_used_.end()) {
      const int slot = static_cast<int>(free_slot - file_slot_used_.begin());
      int fds[1] = {fd};
      const int ret = io_uring_register_files_update(ring_.get(), static_cast<unsigned>(slot), fds, 1);
      // A failed slot update only costs this file the registered path.
      if (ret == 1) {
        file_slot_used_[slot] = true;
        file.slot_ = slot;
      }
    }
  }
  ++open_files_;
  return file;
}

absl::Status IoEngine::close(IoFile& file) {
  if (!file.is_open()) return absl::OkStatus();
  ZE_CHECK(file.engine_ == this) << file.path_ << " belongs to another IoEngine";
  ZE_CHECK(!pending_by_fd_.contains(file.fd_))
      << "closing " << file.path_ << " with transfers in progress; wait for them first";
  if (file.slot_ >= 0) {
    int fds[1] = {-1};
    const int ret = io_uring_register_files_update(ring_.get(), static_cast<unsigned>(file.slot_), fds, 1);
    ZE_CHECK_OK(system_status(ret, IoCall::kRegisterFiles, file.path_));
    file_slot_used_[file.slot_] = false;
  }
  const int ret = options_.dry_run ? 0 : ::close(file.fd_);
  const int err = errno;
  file.fd_ = -1;
  file.slot_ = -1;
  file.engine_ = nullptr;
  --open_files_;
  if (ret != 0) return io_errno_status(err, IoCall::kClose, file.path_);
  return absl::OkStatus();
}

void IoEngine::close_quietly(IoFile& file) { close(file).IgnoreError(); }

absl::Status IoEngine::preallocate(const IoFile& file, int64_t bytes) {
  ZE_CHECK(file.is_open()) << "preallocate() on a closed IoFile";
  if (bytes <= 0 || options_.dry_run) return absl::OkStatus();
  if (::fallocate(file.fd_, 0, 0, bytes) == 0) return absl::OkStatus();
  const int err = errno;
  if (err == EOPNOTSUPP) return absl::OkStatus();
  return io_errno_status(err, IoCall::kPreallocate, file.path_, cat(" (", format_bytes(bytes), ")"));
}

// ---------------------------------------------------------------- transfers

IoTransfer IoEngine::submit(absl::Span<const IoRequest> requests) {
  auto owned = std::make_unique<Transfer>();
  Transfer* t = owned.get();
  t->id = next_transfer_id_++;
  int64_t total = 0;
  for (size_t i = 0; i < requests.size() && t->status.ok(); ++i) {
    const IoRequest& r = requests[i];
    const bool is_read = r.op == IoOp::kRead;
    const std::string_view op = is_read ? "read" : "write";
    if (r.file == nullptr || !r.file->is_open() || r.file->engine_ != this) {
      t->status = absl::InvalidArgumentError(cat(op, " request ", i, ": the file is not open in this IoEngine"));
      break;
    }
    const IoFile& f = *r.file;
    const bool mode_ok = is_read ? f.mode_ != IoFileMode::kWrite : f.mode_ != IoFileMode::kRead;
    if (!mode_ok) {
      t->status = absl::InvalidArgumentError(
          cat(op, " of ", f.path_, ": the file was opened ", is_read ? "write-only" : "read-only"));
      break;
    }
    const auto address = reinterpret_cast<uintptr_t>(r.buffer);
    if (address % kIoAlignment != 0 || r.bytes % kIoAlignment != 0 || r.file_offset < 0 ||
        r.file_offset % static_cast<int64_t>(kIoAlignment) != 0) {
      t->status = absl::InvalidArgumentError(
          cat(op, " of ", f.path_, " (request ", i, "): buffer address 0x", std::hex, address, std::dec,
              ", length ", r.bytes, " and file offset ", r.file_offset,
              " must all be multiples of 4096 for O_DIRECT; take buffers from an AlignedBufferPool and "
              "pad sizes to 4096"));
      break;
    }
    if (r.bytes == 0) continue;
    t->requests.push_back(Request{r.op, f.fd_, f.slot_, registered_buffer_index(r.buffer, r.bytes),
                                  static_cast<uint8_t*>(r.buffer), r.bytes, r.file_offset, f.path_});
    total += static_cast<int64_t>(r.bytes);
  }
  if (!t->status.ok() || options_.dry_run) t->requests.clear();
  for (const Request& q : t->requests) ++pending_by_fd_[q.fd];
  transfers_.emplace(t->id, std::move(owned));
  if (t->issued_all()) {
    maybe_finish(t);
  } else {
    issue_queue_.push_back(t);
    fill();
  }
  return IoTransfer(this, t->id, total);
}

IoTransfer IoEngine::submit_read(const IoFile& file, void* buffer, size_t bytes, int64_t file_offset) {
  const IoRequest r{IoOp::kRead, &file, buffer, bytes, file_offset};
  return submit(absl::MakeConstSpan(&r, 1));
}

IoTransfer IoEngine::submit_write(const IoFile& file, const void* buffer, size_t bytes, int64_t file_offset) {
  // The kernel only reads from a write's buffer.
  const IoRequest r{IoOp::kWrite, &file, const_cast<void*>(buffer), bytes, file_offset};
  return submit(absl::MakeConstSpan(&r, 1));
}

absl::Status IoEngine::read(const IoFile& file, void* buffer, size_t bytes, int64_t file_offset) {
  return submit_read(file, buffer, bytes, file_offset).wait();
}

absl::Status IoEngine::write(const IoFile& file, const void* buffer, size_t bytes, int64_t file_offset) {
  return submit_write(file, buffer, bytes, file_offset).wait();
}

absl::Status IoEngine::wait_transfer(uint64_t id) {
  auto it = transfers_.find(id);
  ZE_CHECK(it != transfers_.end()) << "unknown transfer " << id;
  Transfer* t = it->second.get();
  for (;;) {
    fill();
    if (t->finished) break;
    ZE_CHECK(in_flight_ > 0) << "transfer " << id << " is unfinished with nothing in flight";
    reap(/*block=*/true);
  }
  absl::Status status = std::move(t->status);
  transfers_.erase(it);
  return status;
}

bool IoEngine::transfer_done(uint64_t id) {
  auto it = transfers_.find(id);
  ZE_CHECK(it != transfers_.end()) << "unknown transfer " << id;
  if (!it->second->finished) poll();
  return it->second->finished;
}

void IoEngine::poll() {
  fill();
  if (in_flight_ - unsubmitted_ > 0) {
    // Runs pending completion work without waiting (see COOP_TASKRUN above).
    const int ret = io_uring_get_events(ring_.get());
    if (ret < 0 && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY) {
      ZE_CHECK_OK(system_status(ret, IoCall::kSubmit, ""));
    }
    reap(/*block=*/false);
    fill();
  }
}

bool IoEngine::next_piece(Piece* piece) {
  while (!retry_queue_.empty()) {
    *piece = retry_queue_.front();
    retry_queue_.pop_front();
    if (piece->transfer->status.ok()) return true;
    finish_piece(piece->transfer);  // its transfer failed meanwhile: drop the remainder
  }
  if (issue_queue_.empty()) return false;
  Transfer* t = issue_queue_.front();
  const Request& r = t->requests[t->next_request];
  const size_t n = std::min(static_cast<size_t>(options_.block_size), r.bytes - t->next_offset);
  *piece = Piece{t, static_cast<int>(t->next_request), r.data + t->next_offset, n,
                 r.file_offset + static_cast<int64_t>(t->next_offset), 0};
  t->next_offset += n;
  if (t->next_offset == r.bytes) {
    ++t->next_request;
    t->next_offset = 0;
  }
  if (t->issued_all()) issue_queue_.pop_front();
  ++t->pieces_outstanding;
  return true;
}

void IoEngine::issue(const Piece& piece) {
  io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
  ZE_CHECK(sqe != nullptr) << "submission queue full with " << in_flight_ << " of " << max_in_flight_ << " in flight";
  const Request& r = piece.transfer->requests[piece.request];
  const int fd = r.file_slot >= 0 ? r.file_slot : r.fd;
  const auto len = static_cast<unsigned>(piece.bytes);
  const auto off = static_cast<uint64_t>(piece.file_offset);
  if (r.op == IoOp::kRead) {
    if (r.buf_index >= 0) io_uring_prep_read_fixed(sqe, fd, piece.data, len, off, r.buf_index);
    else io_uring_prep_read(sqe, fd, piece.data, len, off);
  } else {
    if (r.buf_index >= 0) io_uring_prep_write_fixed(sqe, fd, piece.data, len, off, r.buf_index);
    else io_uring_prep_write(sqe, fd, piece.data, len, off);
  }
  if (r.file_slot >= 0) io_uring_sqe_set_flags(sqe, IOSQE_FIXED_FILE);
  const int slot = free_slots_.back();
  free_slots_.pop_back();
  slots_[slot] = piece;
  io_uring_sqe_set_data64(sqe, static_cast<uint64_t>(slot));
  ++in_flight_;
  ++unsubmitted_;
  ++stats_.requests;
  if (r.buf_index >= 0) ++stats_.fixed_buffer_requests;
  if (r.file_slot >= 0) ++stats_.fixed_file_requests;
  if (options_.single_submit) flush_submissions();
}

void IoEngine::fill() {
  // Without overlap_events a batch of queue_depth is issued only once the
  // previous one has fully completed (DeepSpeed's overlap_events=false).
  if (!options_.overlap_events && in_flight_ > 0) return;
  Piece piece;
  while (in_flight_ < max_in_flight_ && next_piece(&piece)) issue(piece);
  flush_submissions();
}

void IoEngine::flush_submissions() {
  int idle_rounds = 0;  // submissions refused with nothing in flight to wait for
  while (unsubmitted_ > 0) {
    const int ret = io_uring_submit(ring_.get());
    if (ret > 0) {
      unsubmitted_ -= std::min(ret, unsubmitted_);
      idle_rounds = 0;
      continue;
    }
    if (ret == -EINTR) continue;
    if (ret == 0 || ret == -EAGAIN || ret == -EBUSY) {
      // The kernel is short of resources (or the completion queue is full):
      // make room by reaping, then submit the rest.
      if (in_flight_ - unsubmitted_ > 0) {
        reap(/*block=*/true);
      } else {
        ZE_CHECK(++idle_rounds < 100000) << io_errno_status(EAGAIN, IoCall::kSubmit, "").message();
        sched_yield();
      }
      continue;
    }
    ZE_CHECK_OK(system_status(ret, IoCall::kSubmit, ""));
  }
}

void IoEngine::reap(bool block) {
  if (block) {
    io_uring_cqe* cqe = nullptr;
    for (;;) {
      const int ret = io_uring_wait_cqe(ring_.get(), &cqe);
      if (ret == 0) break;
      if (ret == -EINTR || ret == -EAGAIN) continue;
      ZE_CHECK_OK(system_status(ret, IoCall::kSubmit, ""));
    }
  }
  io_uring_cqe* cqes[64];
  for (;;) {
    const unsigned n = io_uring_peek_batch_cqe(ring_.get(), cqes, 64);
    if (n == 0) break;
    for (unsigned i = 0; i < n; ++i) complete(static_cast<int>(cqes[i]->user_data), cqes[i]->res);
    io_uring_cq_advance(ring_.get(), n);
  }
}

void IoEngine::complete(int slot, int result) {
  ZE_CHECK(slot >= 0 && slot < max_in_flight_) << "completion for unknown slot " << slot;
  Piece p = slots_[slot];
  free_slots_.push_back(slot);
  --in_flight_;
  Transfer* t = p.transfer;
  if (!t->status.ok()) {  // failed meanwhile: only drain
    finish_piece(t);
    return;
  }
  const Request& r = t->requests[p.request];
  const bool is_read = r.op == IoOp::kRead;
  const IoCall call = is_read ? IoCall::kRead : IoCall::kWrite;
  auto where = [&p] { return cat(" at offset ", p.file_offset, " (", p.bytes, " bytes)"); };
  if ((result == -EAGAIN || result == -EINTR) && p.attempts < kMaxNoProgressAttempts) {
    ++p.attempts;
    ++stats_.resubmissions;
    retry_queue_.push_back(p);
    return;
  }
  if (result < 0) {
    fail(t, io_errno_status(-result, call, r.path, where()));
    finish_piece(t);
    return;
  }
  size_t moved = static_cast<size_t>(result);
  ZE_CHECK_LE(moved, p.bytes);
  if (options_.max_credited_bytes_for_testing > 0) {
    moved = std::min(moved, static_cast<size_t>(options_.max_credited_bytes_for_testing));
  }
  (is_read ? stats_.bytes_read : stats_.bytes_written) += static_cast<int64_t>(moved);
  if (moved == p.bytes) {
    finish_piece(t);
    return;
  }
  // Short: a read that reached the end of the file fails; anything else is
  // resubmitted for the remainder.
  if (is_read) {
    struct stat st;
    if (::fstat(r.fd, &st) != 0) {
      fail(t, io_errno_status(errno, IoCall::kStat, r.path));
      finish_piece(t);
      return;
    }
    if (p.file_offset + static_cast<int64_t>(moved) >= st.st_size) {
      fail(t, absl::OutOfRangeError(cat(
                  "reading ", r.path, ": the file holds ", st.st_size, " bytes but the read needs bytes [",
                  r.file_offset, ", ", r.file_offset + static_cast<int64_t>(r.bytes),
                  "); it is shorter than expected (truncated, or written with a different size or "
                  "configuration); write it again or remove the stale swap files")));
      finish_piece(t);
      return;
    }
  }
  if (moved == 0 && ++p.attempts > kMaxNoProgressAttempts) {
    fail(t, absl::DataLossError(cat(io_call_name(call), " ", r.path, where(), ": the device transferred no bytes ",
                                    kMaxNoProgressAttempts, " times in a row; check dmesg and the drive")));
    finish_piece(t);
    return;
  }
  p.data += moved;
  p.bytes -= moved;
  p.file_offset += static_cast<int64_t>(moved);
  ++stats_.resubmissions;
  retry_queue_.push_back(p);
}

void IoEngine::fail(Transfer* t, absl::Status status) {
  if (t->status.ok()) t->status = std::move(status);
  if (!t->issued_all()) {  // stop issuing its remaining pieces
    t->next_request = t->requests.size();
    t->next_offset = 0;
    auto queued = std::find(issue_queue_.begin(), issue_queue_.end(), t);
    ZE_CHECK(queued != issue_queue_.end()) << "transfer " << t->id << " not issued and not queued";
    issue_queue_.erase(queued);
  }
}

void IoEngine::finish_piece(Transfer* t) {
  --t->pieces_outstanding;
  maybe_finish(t);
}

void IoEngine::maybe_finish(Transfer* t) {
  if (t->finished || !t->issued_all() || t->pieces_outstanding > 0) return;
  t->finished = true;
  for (const Request& q : t->requests) {
    auto it = pending_by_fd_.find(q.fd);
    ZE_CHECK(it != pending_by_fd_.end());
    if (--it->second == 0) pending_by_fd_.erase(it);
  }
}

}  // namespace zero
