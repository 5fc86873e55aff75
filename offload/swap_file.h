// One rank's swap file under an nvme_path: the checks before it exists, its
// name and header, and its lifetime. Both NVMe stores use it: the optimizer
// state's (offload/nvme_state_store.h, "<run id>-rank<r>.optim.swp") and the
// parameter shard's when only offload_param is on NVMe
// (offload/nvme_param_store.h, "...param.swp").
//
// Two steps, because the host buffers are allocated between them:
//   1. swap_file_preflight(): nvme_path exists and is a directory, host memory
//      has room for the buffers the store is about to allocate, the disk has
//      room for the whole file; lists swap files of other runs found there.
//      Each error names the config key, the path and what to do.
//   2. SwapFile::open(): creates the file O_DIRECT through the store's I/O
//      engine with no name on disk (IoEngine::open_unnamed: O_TMPFILE, or
//      created and unlinked at once), preallocates it (a full disk shows
//      before the first step, not half-way through one) and writes a
//      readable 4 KiB header naming the run, rank, host and layout (what
//      /proc/<pid>/fd shows). Every access after that is through the
//      descriptor.
// The file has no name, so however the run ends (a clean exit, Ctrl-C,
// mpirun's SIGKILL, the OOM killer) the kernel frees its blocks when the
// descriptor closes: nvme_path never holds a swap file of ours, and the
// name above appears only in messages. Its bytes are tracked on the NVMe tier
// while the SwapFile lives (close it before its engine goes). Files with such
// names found in nvme_path come from an older ZeroEngine (or a process killed
// between create and unlink where O_TMPFILE is missing): they are never read
// and never deleted (an older version's run may still be using one).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/memory_tracker.h"
#include "offload/aligned_buffer_pool.h"
#include "offload/io_engine.h"

namespace zero {

struct SwapFileSpec {
  std::string key;          // the config section, for messages ("zero_optimization.offload_optimizer")
  std::string dir;          // nvme_path
  std::string kind;         // the file's suffix: "optim" or "param"
  std::string run_id;       // random, per store: in the name and the header
  int rank = 0;
  int64_t file_bytes = 0;   // header included
  std::string contents;     // what it holds, for messages ("optimizer state (3 fp32 arrays of N elements)")
  int64_t buffer_bytes = 0; // host buffers the store allocates for it
  std::string buffers;      // how to describe them ("4 swap buffers of 1 MiB (a sub-group of ...)")
  std::string lower_hint;   // which keys lower the buffers, for the host-memory error
  std::string header;       // extra "key=value\n" lines for the header
  MemCategory category = MemCategory::kOptimizerState;  // how the file's bytes are tracked (NVMe tier)
  // Of file_bytes, those of a parameter shard kept in the same file (the
  // optimizer-state store's, holding the parameters too): tracked as
  // parameters, the rest as `category`.
  int64_t parameter_bytes = 0;
};

// A fresh random run id (16 hex digits).
std::string make_swap_run_id();

// Step 1: the checks. Returns the swap files of other runs in spec.dir
// ("name (size)"), for the store's describe().
absl::StatusOr<std::vector<std::string>> swap_file_preflight(const SwapFileSpec& spec);
// Step 1 and the store's I/O engine, shared by the NVMe stores: the checks
// (skipped on a dry-run backend, which plans for any machine: this one's
// directory and disk are not its business; *leftovers is then empty) and an
// io_uring engine from the aio section (a dry one on a dry-run backend).
absl::StatusOr<std::unique_ptr<IoEngine>> prepare_swap(const Backend& backend, const AioConfig& aio,
                                                      const SwapFileSpec& spec, std::vector<std::string>* leftovers);
// For a store's describe(): "" or a line noting those leftovers.
std::string swap_leftovers_note(const std::string& dir, const std::vector<std::string>& leftovers);

class SwapFile {
 public:
  // Step 2. The header is written through a buffer of `pool` (the store's,
  // at least 4 KiB each), returned before this returns. The file's bytes
  // count in `process` (the backend's process_tracker()) as NVMe-tier
  // spec.category (spec.parameter_bytes of them as parameters). With a
  // dry-run engine nothing is created or written.
  static absl::StatusOr<std::unique_ptr<SwapFile>> open(IoEngine& engine, const SwapFileSpec& spec,
                                                        AlignedBufferPool& pool, MemoryTracker& process);
  ~SwapFile();  // closes the file, which frees it; the engine must still exist
  SwapFile(const SwapFile&) = delete;
  SwapFile& operator=(const SwapFile&) = delete;

  const IoFile& file() const { return file_; }
  const std::string& path() const { return file_.path(); }  // for messages: it has no name on disk

 private:
  SwapFile(IoEngine& engine, IoFile file, int64_t bytes, MemCategory category, int64_t parameter_bytes,
           MemoryTracker& process);
  bool dry_run() const { return engine_.options().dry_run; }
  IoEngine& engine_;
  MemoryTracker& process_;
  IoFile file_;
  int64_t bytes_;
  MemCategory category_;
  int64_t parameter_bytes_;
};

}  // namespace zero
