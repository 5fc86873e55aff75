// A rank's swap file: preflight, an unnamed file, its header; see swap_file.h.
#include "offload/swap_file.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>

#include "core/status.h"
#include "core/strings.h"
#include "offload/swap_layout.h"

namespace zero {

namespace {

constexpr std::string_view kMagic = "ZEROENGINE SWAP 1\n";

bool is_swap_file_name(const std::string& name) {
  auto ends_with = [&](std::string_view s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  return name.rfind("zeroengine-", 0) == 0 && (ends_with(".optim.swp") || ends_with(".param.swp"));
}

}  // namespace

std::string make_swap_run_id() {
  std::random_device rd;
  const uint64_t v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

absl::StatusOr<std::vector<std::string>> swap_file_preflight(const SwapFileSpec& spec) {
  namespace fs = std::filesystem;
  const std::string& dir = spec.dir;
  if (dir.empty()) {
    return absl::InvalidArgumentError(cat(spec.key, ".nvme_path is not set: with device \"nvme\" it names the ",
                                          "directory (on an NVMe drive) that holds the swap files"));
  }
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (!fs::exists(st)) {
    return absl::NotFoundError(cat(spec.key, ".nvme_path: ", dir, " does not exist; create it (on an NVMe drive) or ",
                                   "point nvme_path at an existing directory"));
  }
  if (!fs::is_directory(st)) return absl::InvalidArgumentError(cat(spec.key, ".nvme_path: ", dir, " is not a directory"));

  // Host memory for the buffers, disk for the file: both before any byte moves.
  const int64_t available = host_memory_available_bytes();
  if (available >= 0 && spec.buffer_bytes > available) {
    return absl::ResourceExhaustedError(cat(spec.key, ": ", spec.buffers, " need ", format_bytes(spec.buffer_bytes),
                                            " of host memory; ", format_bytes(available), " is available. Lower ",
                                            spec.lower_hint));
  }
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) == 0) {
    const int64_t free_bytes = static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize);
    if (free_bytes < spec.file_bytes) {
      return absl::ResourceExhaustedError(cat(spec.key, ".nvme_path: ", dir, " has ", format_bytes(free_bytes),
                                              " free; this rank's ", spec.contents, " needs ",
                                              format_bytes(spec.file_bytes), ". Free space or use another drive"));
    }
  }
  std::vector<std::string> leftovers;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!is_swap_file_name(name)) continue;
    std::error_code size_ec;
    const auto bytes = e.file_size(size_ec);
    leftovers.push_back(cat(name, " (", format_bytes(size_ec ? 0 : static_cast<int64_t>(bytes)), ")"));
  }
  return leftovers;
}

absl::StatusOr<std::unique_ptr<IoEngine>> prepare_swap(const Backend& backend, const AioConfig& aio,
                                                      const SwapFileSpec& spec, std::vector<std::string>* leftovers) {
  leftovers->clear();
  if (!backend.dry_run()) {
    ZE_ASSIGN_OR_RETURN(*leftovers, swap_file_preflight(spec));
  }
  ZE_ASSIGN_OR_RETURN(IoEngineOptions io, IoEngineOptions::from_aio(aio));
  io.dry_run = backend.dry_run();
  return IoEngine::create(io);
}

std::string swap_leftovers_note(const std::string& dir, const std::vector<std::string>& leftovers) {
  if (leftovers.empty()) return "";
  return cat("\nnote: ", dir, " holds ", leftovers.size(), " swap file(s) of other runs (", leftovers.front(),
             leftovers.size() > 1 ? ", ..." : "",
             "): a crashed run's leftovers are never read; remove them if no run is using them");
}

SwapFile::SwapFile(IoEngine& engine, IoFile file, int64_t bytes, MemCategory category, int64_t parameter_bytes,
                   MemoryTracker& process)
    : engine_(engine),
      process_(process),
      file_(std::move(file)),
      bytes_(bytes),
      category_(category),
      parameter_bytes_(parameter_bytes) {
  ZE_CHECK(parameter_bytes_ >= 0 && parameter_bytes_ <= bytes_) << parameter_bytes_ << " of " << bytes_;
  process_.add_allocated(Tier::kNvme, category_, bytes_ - parameter_bytes_);
  if (parameter_bytes_ > 0) process_.add_allocated(Tier::kNvme, MemCategory::kParameters, parameter_bytes_);
}

SwapFile::~SwapFile() {
  (void)engine_.close(file_);  // the file has no name: closing frees its blocks
  process_.add_allocated(Tier::kNvme, category_, -(bytes_ - parameter_bytes_));
  if (parameter_bytes_ > 0) process_.add_allocated(Tier::kNvme, MemCategory::kParameters, -parameter_bytes_);
}

absl::StatusOr<std::unique_ptr<SwapFile>> SwapFile::open(IoEngine& engine, const SwapFileSpec& spec,
                                                         AlignedBufferPool& pool, MemoryTracker& process) {
  ZE_CHECK_GE(pool.buffer_bytes(), static_cast<size_t>(kSwapHeaderBytes));
  const std::string name = cat("zeroengine-", spec.run_id, "-rank", spec.rank, ".", spec.kind, ".swp");
  ZE_ASSIGN_OR_RETURN(IoFile file, engine.open_unnamed(spec.dir, name));
  absl::Status s = engine.preallocate(file, spec.file_bytes);
  if (s.ok() && !engine.options().dry_run) {
    // The header: what this file is, for whoever opens it through /proc/<pid>/fd.
    absl::StatusOr<IoBuffer> b = pool.acquire();
    if (!b.ok()) {
      (void)engine.close(file);
      return b.status();
    }
    uint8_t* header_buffer = b->data;
    std::memset(header_buffer, 0, kSwapHeaderBytes);
    char host[256] = {};
    ::gethostname(host, sizeof(host) - 1);
    const std::string text = cat(kMagic, "run_id=", spec.run_id, "\nrank=", spec.rank, "\npid=", ::getpid(),
                                 "\nhost=", host, "\n", spec.header);
    std::memcpy(header_buffer, text.data(), std::min<size_t>(text.size(), kSwapHeaderBytes));
    s = engine.write(file, header_buffer, kSwapHeaderBytes, 0);
    pool.release(*b);
  }
  if (!s.ok()) {
    (void)engine.close(file);
    return s;
  }
  return std::unique_ptr<SwapFile>(new SwapFile(engine, std::move(file), spec.file_bytes, spec.category, spec.parameter_bytes, process));
}

}  // namespace zero
