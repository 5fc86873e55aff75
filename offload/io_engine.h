// IoEngine: asynchronous O_DIRECT file I/O on one io_uring, the transport of
// the NVMe swappers (optimizer state, parameters).
//
// A transfer is a batch of requests (read or write, buffer, length, file
// offset). The engine cuts each request into block_size pieces and keeps up to
// queue_depth of them in flight, issuing the next piece as each one completes
// (DeepSpeed's overlap_events) in submission order across transfers. Short
// completions are resubmitted for the remainder; the first error of a
// transfer stops the issue of its remaining pieces and is what its wait()
// returns. Buffer addresses, file offsets and lengths must be multiples of
// kIoAlignment (4096): O_DIRECT moves whole logical blocks.
//
// Registered resources. register_buffers() hands a set of buffers (normally
// an AlignedBufferPool's) to io_uring once, so the kernel does not pin and map
// their pages per request; requests inside a registered buffer then use the
// fixed-buffer opcodes, others the plain ones. Opened files take a slot of a
// registered (sparse) file table when the kernel has one. Either registration
// may fail (RLIMIT_MEMLOCK without CAP_IPC_LOCK, an old kernel, more than 1 GiB
// in one buffer): that is not an error; the engine uses plain requests and
// mode() says what is active and why.
//
// Threading and ownership. An engine, its IoFiles and IoTransfers are not
// synchronised: use them from one thread at a time (the thread may change
// between calls; the ring is created without SINGLE_ISSUER for that reason,
// though completions are quickest when the submitting thread also waits:
// io_uring runs a request's completion work in the thread that submitted it).
// There is no background thread: pieces are issued and completions reaped
// only inside submit(), poll() and IoTransfer::wait()/done(). A caller that
// overlaps I/O with compute calls poll() between pieces of work, or drives the
// engine from its own I/O thread. A transfer's buffers belong to the kernel
// from submit() until its wait() returns (or done() returns true); the engine
// must outlive every IoFile and IoTransfer it made.
//
// Errors a user can cause (missing directory, permissions, a read-only or
// full filesystem, a filesystem without O_DIRECT, a file shorter than the
// read) come back as absl::Status naming the operation, the path and what to
// do. Every errno from liburing and the system calls is turned into a Status
// in one place, io_errno_status() (io_errors.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "offload/aio_config.h"
#include "offload/io_errors.h"

struct io_uring;  // liburing's ring; kept out of this header

namespace zero {

class IoEngine;

// O_DIRECT alignment of buffer addresses, file offsets and lengths. 4096 is the
// page size and the largest logical block size of common NVMe/SSD devices.
inline constexpr size_t kIoAlignment = 4096;

enum class IoOp : uint8_t { kRead, kWrite };

enum class IoFileMode : uint8_t {
  kRead,       // O_RDONLY | O_DIRECT; the file must exist
  kWrite,      // O_WRONLY | O_CREAT | O_DIRECT, mode 0600, never truncated
  kReadWrite,  // O_RDWR | O_CREAT | O_DIRECT, mode 0600, never truncated
};

struct IoEngineOptions {
  int64_t block_size = 1 << 20;     // bytes per io_uring request; a positive multiple of 4096
  int64_t queue_depth = 8;          // requests in flight at most, 1..4096
  bool overlap_events = true;       // refill as each request completes; false: issue queue_depth, wait for all
  bool single_submit = false;       // one io_uring_submit per request instead of one per batch
  bool register_buffers = true;     // false: register_buffers() registers nothing (plain requests)
  bool register_files = true;       // false: requests name plain file descriptors
  // Back the 2 MiB-aligned parts of registered buffers with 2 MiB pages
  // (madvise MADV_HUGEPAGE + MADV_COLLAPSE) before registering them, so that
  // a block request covers a few physically contiguous segments instead of
  // one per 4 KiB page. A device that takes one descriptor per segment and
  // has no indirect descriptors (virtio-blk here: 256-entry ring, seg_max 254)
  // otherwise holds a single 1 MiB request at a time whatever queue_depth is;
  // see register_buffers(). Failure (no THP, no memory) only costs speed.
  // Cost, once per registration: populated pages are copied into the new 2 MiB
  // pages (512 MiB took 1.6 s on the 2-core test VM).
  bool huge_page_buffers = true;
  int max_registered_files = 64;    // slots of the registered file table; later opens use plain fds
  // Testing only: credit each completion with at most this many bytes (a
  // multiple of 4096), so the short-transfer resubmission path runs on a disk
  // that never returns short. 0: off.
  int64_t max_credited_bytes_for_testing = 0;
  // A dry run (the memory planner; kernels/dry_run/dry_run_backend.h): no
  // ring, no file is created, opened or written; transfers are checked as
  // usual and complete at once without touching their buffers.
  bool dry_run = false;

  // DeepSpeed's "aio" section. intra_op_parallelism P multiplies the requests
  // in flight (DeepSpeed runs P workers of queue_depth each; one ring carries
  // the same number of requests without threads). use_gds is refused.
  static absl::StatusOr<IoEngineOptions> from_aio(const AioConfig& aio);
};

// What registration achieved; see the file comment.
struct IoEngineMode {
  bool buffers_registered = false;
  size_t registered_buffer_count = 0;
  size_t registered_buffer_bytes = 0;
  size_t huge_page_bytes = 0;    // of which collapsed into 2 MiB pages (huge_page_buffers)
  std::string buffers_fallback;  // why buffers are not registered; empty if they are or none were offered
  bool files_registered = false;
  int registered_file_slots = 0;
  std::string files_fallback;    // why files are not registered; empty if they are

  // "registered buffers (8, 64.0 MiB), registered files (64 slots)", or the fallbacks' reasons;
  // ", 62.0 MiB in 2 MiB pages" follows the buffers when huge_page_bytes > 0.
  std::string describe() const;
};

// Counters since the engine was created (tests and benchmark reports).
struct IoEngineStats {
  int64_t requests = 0;               // block requests issued, resubmissions included
  int64_t fixed_buffer_requests = 0;  // of which READ_FIXED / WRITE_FIXED
  int64_t fixed_file_requests = 0;    // of which through a registered file slot
  int64_t resubmissions = 0;          // remainders of short completions and EAGAIN retries
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
};

// An open O_DIRECT file. Move-only; closes itself (ignoring errors) when
// destroyed open — call IoEngine::close() to see a close error.
class IoFile {
 public:
  IoFile() = default;
  IoFile(IoFile&& other) noexcept;
  IoFile& operator=(IoFile&& other) noexcept;
  IoFile(const IoFile&) = delete;
  IoFile& operator=(const IoFile&) = delete;
  ~IoFile();

  bool is_open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }
  IoFileMode mode() const { return mode_; }
  int fd() const { return fd_; }
  bool registered() const { return slot_ >= 0; }  // uses a registered file slot
  // Current size in bytes (fstat).
  absl::StatusOr<int64_t> size() const;

 private:
  friend class IoEngine;
  IoEngine* engine_ = nullptr;
  int fd_ = -1;
  int slot_ = -1;
  IoFileMode mode_ = IoFileMode::kRead;
  std::string path_;
};

// One request of a transfer. The file must stay open until the transfer completes.
struct IoRequest {
  IoOp op = IoOp::kRead;
  const IoFile* file = nullptr;
  void* buffer = nullptr;    // kIoAlignment-aligned; written into by reads, read by writes
  size_t bytes = 0;          // multiple of kIoAlignment
  int64_t file_offset = 0;   // multiple of kIoAlignment
};

// Handle of a submitted transfer. Move-only. Destroying it before wait()
// returned waits for the transfer (its buffers are still the kernel's) and
// drops its status.
class IoTransfer {
 public:
  IoTransfer() = default;
  IoTransfer(IoTransfer&& other) noexcept;
  IoTransfer& operator=(IoTransfer&& other) noexcept;
  IoTransfer(const IoTransfer&) = delete;
  IoTransfer& operator=(const IoTransfer&) = delete;
  ~IoTransfer();

  // Drives the engine until every request of this transfer has completed;
  // returns OK or the transfer's first error. Later calls return the same.
  absl::Status wait();
  // Reaps ready completions and refills the queue without blocking; true once
  // the transfer has completed (wait() then returns at once).
  bool done();
  int64_t bytes() const { return bytes_; }  // total bytes of its requests

 private:
  friend class IoEngine;
  IoTransfer(IoEngine* engine, uint64_t id, int64_t bytes) : engine_(engine), id_(id), bytes_(bytes) {}
  IoEngine* engine_ = nullptr;  // null once finished (or moved from)
  uint64_t id_ = 0;
  int64_t bytes_ = 0;
  absl::Status result_;
};

class IoEngine {
 public:
  // Sets up the ring. UNAVAILABLE when io_uring is missing or disabled
  // (kernel.io_uring_disabled, a container's seccomp profile), with the fix.
  static absl::StatusOr<std::unique_ptr<IoEngine>> create(const IoEngineOptions& options);
  // Every IoFile and IoTransfer of this engine must be gone by then (aborts
  // otherwise); an IoTransfer's destructor waits for its transfer.
  ~IoEngine();
  IoEngine(const IoEngine&) = delete;
  IoEngine& operator=(const IoEngine&) = delete;

  // Registers `buffers` (e.g. AlignedBufferPool::spans()) as io_uring fixed
  // buffers, replacing an earlier registration; nothing may be in flight. A
  // failure leaves plain requests in use and is reported through the returned
  // mode(), not as an error. With huge_page_buffers the 2 MiB-aligned parts of
  // the buffers are first collapsed into 2 MiB pages (contents kept; a
  // physical-layout change only). The kernel pins the pages it registered: free the
  // buffers only after the engine is gone or register_buffers({}) dropped
  // them, or later requests at the same addresses reach the old pages.
  const IoEngineMode& register_buffers(absl::Span<const absl::Span<uint8_t>> buffers);
  const IoEngineMode& mode() const { return mode_; }
  const IoEngineStats& stats() const { return stats_; }
  const IoEngineOptions& options() const { return options_; }

  // Opens (kWrite, kReadWrite: creates, mode 0600, without truncating) `path`
  // with O_DIRECT. Errors name the path and the fix: missing directory, no
  // permission, read-only filesystem, no O_DIRECT support, not a regular file.
  absl::StatusOr<IoFile> open(const std::string& path, IoFileMode mode);
  // A new kReadWrite file in `dir` that has no name on disk, so nothing is
  // left behind however the process ends (SIGKILL included): O_TMPFILE, or
  // where the filesystem lacks it, dir/name created (never an existing file)
  // and unlinked at once. Its path() is dir/name, for messages. Errors as open().
  absl::StatusOr<IoFile> open_unnamed(const std::string& dir, const std::string& name);
  // Closes `file`; none of its requests may be in flight (aborts otherwise).
  absl::Status close(IoFile& file);
  // Reserves `bytes` of disk for `file` (fallocate), so a full disk shows up
  // now rather than halfway through a swap. OK without reserving on a
  // filesystem that has no fallocate.
  absl::Status preallocate(const IoFile& file, int64_t bytes);

  // Starts a transfer: its first pieces are in the kernel when this returns.
  // Invalid requests (misaligned, closed file, wrong mode) fail the transfer:
  // its wait() returns INVALID_ARGUMENT without any I/O having been issued.
  IoTransfer submit(absl::Span<const IoRequest> requests);
  IoTransfer submit_read(const IoFile& file, void* buffer, size_t bytes, int64_t file_offset);
  IoTransfer submit_write(const IoFile& file, const void* buffer, size_t bytes, int64_t file_offset);
  // submit + wait.
  absl::Status read(const IoFile& file, void* buffer, size_t bytes, int64_t file_offset);
  absl::Status write(const IoFile& file, const void* buffer, size_t bytes, int64_t file_offset);

  // Reaps ready completions and issues queued pieces; never blocks.
  void poll();
  // Block requests in flight in the kernel now.
  int64_t in_flight() const { return in_flight_; }

 private:
  friend class IoTransfer;
  friend class IoFile;

  struct Transfer;
  // One request of a transfer, resolved at submit time.
  struct Request {
    IoOp op;
    int fd;
    int file_slot;   // registered file slot, or -1
    int buf_index;   // registered buffer index, or -1
    uint8_t* data;
    size_t bytes;
    int64_t file_offset;
    std::string path;  // for error messages
  };
  // A block-sized piece of a request: what one SQE carries.
  struct Piece {
    Transfer* transfer = nullptr;
    int request = 0;
    uint8_t* data = nullptr;
    size_t bytes = 0;
    int64_t file_offset = 0;
    int attempts = 0;
  };
  struct Transfer {
    uint64_t id = 0;
    std::vector<Request> requests;
    size_t next_request = 0;       // issue cursor: request index ...
    size_t next_offset = 0;        // ... and byte offset within it
    int64_t pieces_outstanding = 0;  // in flight or waiting for resubmission
    bool finished = false;         // every piece completed (or the transfer failed and drained)
    absl::Status status;           // first error
    bool issued_all() const { return next_request == requests.size(); }
  };
  // Registered buffer: [begin, end) and its registration index.
  struct Region {
    uintptr_t begin = 0, end = 0;
    int index = 0;
  };

  IoEngine(const IoEngineOptions& options, int max_in_flight);
  absl::Status init_ring();
  void init_file_table();

  absl::Status wait_transfer(uint64_t id);
  bool transfer_done(uint64_t id);
  void close_quietly(IoFile& file);
  // open()'s steps: a dry run's file; open(2) with errors named; the checks
  // and file-slot registration of an open descriptor (closed on error).
  IoFile dry_run_file(const std::string& path, IoFileMode mode);
  absl::StatusOr<int> open_path(const std::string& path, int flags, IoCall call);
  absl::StatusOr<IoFile> adopt(int fd, IoFileMode mode, const std::string& path);

  bool next_piece(Piece* piece);
  void issue(const Piece& piece);
  void fill();
  void flush_submissions();
  void reap(bool block);
  void complete(int slot, int result);
  void fail(Transfer* t, absl::Status status);
  void finish_piece(Transfer* t);
  void maybe_finish(Transfer* t);
  int registered_buffer_index(const void* data, size_t bytes) const;

  IoEngineOptions options_;
  int max_in_flight_;
  std::unique_ptr<io_uring> ring_;
  bool ring_ready_ = false;
  IoEngineMode mode_;
  IoEngineStats stats_;

  std::vector<Region> regions_;  // sorted by address
  std::vector<bool> file_slot_used_;
  absl::flat_hash_map<int, int64_t> pending_by_fd_;  // requests of unfinished transfers per file
  int open_files_ = 0;

  uint64_t next_transfer_id_ = 1;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Transfer>> transfers_;
  std::deque<Transfer*> issue_queue_;  // transfers with pieces not yet issued, in submission order
  std::deque<Piece> retry_queue_;      // remainders of short completions, issued first
  std::vector<Piece> slots_;           // in-flight pieces; an SQE's user_data is its slot index
  std::vector<int> free_slots_;
  int64_t in_flight_ = 0;
  int unsubmitted_ = 0;  // SQEs prepared but not yet taken by the kernel
};

}  // namespace zero
