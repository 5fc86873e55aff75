// zero-report: what this build has and what this machine gives it, in the
// spirit of DeepSpeed's ds_report — ZeroEngine's version and features; the
// CUDA runtime, driver, cuBLAS and NCCL, and the GPUs visible; Open MPI;
// oneDNN and the ISA it dispatches to; our SIMD kernel table; liburing and
// whether this kernel allows io_uring and registered buffers; whether
// O_DIRECT works on a path; the OpenMP threads and the memory.
//
//   zero-report [--path DIR] [--json]
//
// Every check is a definite yes or no with the reason (the errno a call
// failed with, or what was done); nothing here needs a GPU, MPI_Init or
// root. Plain text is aligned `key: value` lines; --json is one object with
// the same keys (a check is {"ok": bool, "reason": "..."}).
// Exit status: 0 the report was printed (whatever it says); 2 bad usage.
#include <fcntl.h>
#include <mpi.h>
#include <omp.h>
#include <sys/statfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <oneapi/dnnl/dnnl.h>

#include "absl/base/config.h"
#include "core/strings.h"
#include "kernels/cpu/bf16_gemm_policy.h"
#include "kernels/cpu/simd_kernels.h"
#include "runtime/tools/cli.h"
#include "ze_build_info.h"

#if ZE_REPORT_URING
#include <liburing.h>
#endif
#if ZE_REPORT_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>
#endif
#if ZE_REPORT_NCCL
#include <nccl.h>
#endif

namespace {

using Json = nlohmann::ordered_json;
using zero::cat;

// One line of the report: the text shown, and the value --json gives.
struct Entry {
  std::string key;
  std::string text;
  Json json;
};

class Report {
 public:
  void add(std::string key, std::string value) {
    entries_.push_back({std::move(key), value, Json(value)});
  }
  void add(std::string key, std::string text, Json json) {
    entries_.push_back({std::move(key), std::move(text), std::move(json)});
  }
  // A yes/no finding and why.
  void check(std::string key, bool ok, std::string reason) {
    entries_.push_back({std::move(key), cat(ok ? "yes" : "no", " (", reason, ")"),
                        Json{{"ok", ok}, {"reason", reason}}});
  }
  std::string text() const {
    size_t width = 0;
    for (const Entry& e : entries_) width = std::max(width, e.key.size());
    std::string out;
    for (const Entry& e : entries_) out += cat(e.key, std::string(width - e.key.size(), ' '), " : ", e.text, "\n");
    return out;
  }
  Json json() const {
    Json j = Json::object();
    for (const Entry& e : entries_) j[e.key] = e.json;
    return j;
  }

 private:
  std::vector<Entry> entries_;
};

std::string errno_text(int err) { return cat(std::strerror(err), " (errno ", err, ")"); }

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1 << 30));
  return buf;
}

// A field of /proc/meminfo in bytes; -1 when absent.
int64_t meminfo_bytes(const std::string& field) {
  std::ifstream in("/proc/meminfo");
  std::string name;
  int64_t kib = 0;
  std::string unit;
  while (in >> name >> kib) {
    std::getline(in, unit);
    if (name == field + ":") return kib * 1024;
  }
  return -1;
}

std::string first_line_of(const std::string& path, const std::string& prefix) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) == 0) {
      const size_t colon = line.find(':');
      std::string v = colon == std::string::npos ? line : line.substr(colon + 1);
      v.erase(0, v.find_first_not_of(" \t"));
      return v;
    }
  }
  return "";
}

std::string filesystem_name(const std::string& path) {
  struct statfs s {};
  if (statfs(path.c_str(), &s) != 0) return cat("unknown: statfs: ", errno_text(errno));
  switch (static_cast<unsigned long>(s.f_type)) {
    case 0xEF53: return "ext4";  // ext2/3/4 share the magic
    case 0x58465342: return "xfs";
    case 0x9123683E: return "btrfs";
    case 0x01021994: return "tmpfs";
    case 0x794C7630: return "overlayfs";
    case 0x6969: return "nfs";
    case 0x65735546: return "fuse";
    case 0x2FC12FC1: return "zfs";
    case 0xF2F52010: return "f2fs";
    case 0x5346544E: return "ntfs";
    case 0x858458F6: return "ramfs";
    default: return cat("type 0x", [&] {
      char buf[20];
      std::snprintf(buf, sizeof buf, "%lx", static_cast<unsigned long>(s.f_type));
      return std::string(buf);
    }());
  }
}

// O_DIRECT on `dir`: a temporary file opened with O_DIRECT, 4 KiB written and
// read back at offset 0 from an aligned buffer, then removed.
void report_o_direct(Report& r, const std::string& dir) {
  r.add("o_direct.path", dir);
  r.add("o_direct.filesystem", filesystem_name(dir));
  constexpr size_t kBytes = 4096;
  std::string name = dir + "/.zero-report-XXXXXX";
  const int plain = mkstemp(name.data());
  if (plain < 0) {
    r.check("o_direct", false, cat("cannot create a file in ", dir, ": ", errno_text(errno)));
    return;
  }
  close(plain);
  struct Cleanup {
    std::string path;
    ~Cleanup() { unlink(path.c_str()); }
  } cleanup{name};
  const int fd = open(name.c_str(), O_RDWR | O_DIRECT);
  if (fd < 0) {
    r.check("o_direct", false, cat("open(O_DIRECT) failed: ", errno_text(errno)));
    return;
  }
  void* raw = nullptr;
  if (posix_memalign(&raw, kBytes, 2 * kBytes) != 0) {
    close(fd);
    r.check("o_direct", false, "cannot allocate an aligned buffer");
    return;
  }
  std::unique_ptr<unsigned char, decltype(&std::free)> buf(static_cast<unsigned char*>(raw), &std::free);
  for (size_t i = 0; i < kBytes; ++i) buf.get()[i] = static_cast<unsigned char>(i * 7 + 1);
  const ssize_t wrote = pwrite(fd, buf.get(), kBytes, 0);
  const int write_errno = errno;
  const ssize_t read = wrote == static_cast<ssize_t>(kBytes) ? pread(fd, buf.get() + kBytes, kBytes, 0) : -1;
  const int read_errno = errno;
  close(fd);
  if (wrote != static_cast<ssize_t>(kBytes)) {
    r.check("o_direct", false,
            wrote < 0 ? cat("O_DIRECT write failed: ", errno_text(write_errno)) : cat("short O_DIRECT write: ", wrote));
  } else if (read != static_cast<ssize_t>(kBytes)) {
    r.check("o_direct", false,
            read < 0 ? cat("O_DIRECT read failed: ", errno_text(read_errno)) : cat("short O_DIRECT read: ", read));
  } else if (std::memcmp(buf.get(), buf.get() + kBytes, kBytes) != 0) {
    r.check("o_direct", false, "4 KiB read back with O_DIRECT differ from what was written");
  } else {
    r.check("o_direct", true, "wrote and read back 4 KiB with O_DIRECT");
  }
}

void report_io_uring(Report& r) {
  r.add("liburing", ZE_BUILD_NVME_OFFLOAD ? cat(ZE_BUILD_LIBURING_VERSION, " (NVMe offload built)")
                    : std::string(ZE_BUILD_LIBURING_VERSION).empty()
                        ? std::string("not found at build time (NVMe offload not built)")
                        : cat(ZE_BUILD_LIBURING_VERSION, " (older than 2.3: NVMe offload not built)"));
  const std::string disabled = first_line_of("/proc/sys/kernel/io_uring_disabled", "");
  if (!disabled.empty()) r.add("io_uring.sysctl_disabled", disabled);
#if ZE_REPORT_URING
  io_uring ring{};
  const int ret = io_uring_queue_init(8, &ring, 0);
  if (ret < 0) {
    r.check("io_uring", false, cat("io_uring_queue_init: ", errno_text(-ret),
                                    -ret == EPERM || -ret == ENOSYS ? "; the kernel or a seccomp profile forbids it" : ""));
    r.check("io_uring.registered_buffers", false, "no ring");
    return;
  }
  r.check("io_uring", true, "io_uring_queue_init of 8 entries succeeded");
  void* raw = nullptr;
  if (posix_memalign(&raw, 4096, 4096) != 0) {
    r.check("io_uring.registered_buffers", false, "cannot allocate an aligned buffer");
  } else {
    iovec iov{raw, 4096};
    const int reg = io_uring_register_buffers(&ring, &iov, 1);
    if (reg < 0) {
      r.check("io_uring.registered_buffers", false,
              cat("io_uring_register_buffers: ", errno_text(-reg),
                  -reg == ENOMEM ? "; raise the locked-memory limit (ulimit -l)" : ""));
    } else {
      r.check("io_uring.registered_buffers", true, "registered one 4 KiB buffer");
      io_uring_unregister_buffers(&ring);
    }
    std::free(raw);
  }
  io_uring_queue_exit(&ring);
#else
  r.check("io_uring", false, "this build has no liburing");
  r.check("io_uring.registered_buffers", false, "this build has no liburing");
#endif
}

std::string onednn_isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return cat("isa 0x", std::hex, static_cast<int>(isa));
  }
}

void report_cpu_libraries(Report& r) {
  const dnnl_version_t* v = dnnl_version();
  const std::string hash = v->hash != nullptr ? v->hash : "";
  r.add("onednn", cat(v->major, ".", v->minor, ".", v->patch, hash.empty() || hash == "N/A" ? "" : cat(" (", hash, ")")));
  r.add("onednn.cpu_isa", onednn_isa_name(dnnl_get_effective_cpu_isa()));
  std::string runs;
  for (const char* isa : {"avx512", "avx2"}) {
    if (zero::cpu::simd_kernels_for(isa) != nullptr) runs += cat(runs.empty() ? "" : " ", isa);
  }
  r.add("simd.compiled", ZE_BUILD_SIMD_ISAS);
  r.add("simd.cpu_runs", runs.empty() ? "none (this CPU has no AVX2: the kernels cannot run)" : runs);
  if (!runs.empty()) {
    const char* forced = std::getenv("ZE_SIMD");
    r.add("simd.kernels", cat(zero::cpu::simd_kernels().isa, forced != nullptr ? cat(" (ZE_SIMD=", forced, ")") : ""),
          zero::cpu::simd_kernels().isa);
  }
  // Which precision bf16 GEMMs run in on this CPU (kernels/cpu/bf16_gemm_policy.h).
  const zero::cpu::Bf16GemmChoice& bf16 = zero::cpu::bf16_gemm_choice();
  r.add("gemm.bf16", bf16.reason, Json{{"precision", bf16.gemm == zero::DType::kBF16 ? "bf16" : "fp32"},
                                       {"bf16_gflops", bf16.bf16_gflops},
                                       {"fp32_gflops", bf16.fp32_gflops}});
  r.add("openmp.threads", cat(omp_get_max_threads(), std::getenv("OMP_NUM_THREADS") != nullptr
                                                         ? cat(" (OMP_NUM_THREADS=", std::getenv("OMP_NUM_THREADS"), ")")
                                                         : ""),
        omp_get_max_threads());
  char mpi[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  MPI_Get_library_version(mpi, &len);  // callable before MPI_Init
  std::string mpi_text(mpi, static_cast<size_t>(std::max(len, 0)));
  mpi_text = mpi_text.substr(0, mpi_text.find_first_of("\n,"));
  r.add("mpi", mpi_text);
#ifdef ABSL_LTS_RELEASE_VERSION
  r.add("abseil", cat(ABSL_LTS_RELEASE_VERSION, ".", ABSL_LTS_RELEASE_PATCH_LEVEL));
#else
  r.add("abseil", "unknown (not an LTS release)");
#endif
  r.add("nlohmann_json",
        cat(NLOHMANN_JSON_VERSION_MAJOR, ".", NLOHMANN_JSON_VERSION_MINOR, ".", NLOHMANN_JSON_VERSION_PATCH));
  r.add("cli11", ZE_BUILD_CLI11_VERSION);
}

void report_gpus(Report& r) {
#if ZE_REPORT_CUDA
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  r.add("cuda.runtime", cat(runtime / 1000, ".", runtime % 1000 / 10));
  r.add("cuda.driver", driver == 0 ? std::string("none (no NVIDIA driver loaded)")
                                   : cat(driver / 1000, ".", driver % 1000 / 10));
  int major = 0, minor = 0, patch = 0;
  cublasGetProperty(MAJOR_VERSION, &major);
  cublasGetProperty(MINOR_VERSION, &minor);
  cublasGetProperty(PATCH_LEVEL, &patch);
  r.add("cublas", cat(major, ".", minor, ".", patch));
#if ZE_REPORT_NCCL
  int nccl = 0;
  ncclGetVersion(&nccl);
  r.add("nccl", cat(nccl / 10000, ".", nccl % 10000 / 100, ".", nccl % 100));
#else
  r.add("nccl", "not found at build time (GPU collectives off)");
#endif
  r.add("cuda.architectures", ZE_BUILD_CUDA_ARCHITECTURES);
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    r.add("gpus", cat("no GPU visible (", err != cudaSuccess ? cudaGetErrorString(err) : "0 devices", ")"), 0);
    return;
  }
  r.add("gpus", cat(count), count);
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, d) != cudaSuccess) continue;
    r.add(cat("gpu.", d), cat(p.name, ", ", gib(static_cast<int64_t>(p.totalGlobalMem)), ", sm_", p.major, p.minor),
          Json{{"name", p.name}, {"memory_bytes", p.totalGlobalMem}, {"compute_capability", cat(p.major, ".", p.minor)}});
  }
#else
  r.add("cuda", "not built (configure with nvcc found and ZE_ENABLE_CUDA=ON)");
  r.add("gpus", "no GPU visible (built without CUDA)", 0);
#endif
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app;
  zero::cli::init_app(app, "zero-report",
                      "usage: zero-report [--path DIR] [--json]\n"
                      "\n"
                      "What this build of ZeroEngine has and what this machine gives it: versions, GPUs, the\n"
                      "ISA each CPU library runs, io_uring, O_DIRECT on DIR (like DeepSpeed's ds_report).\n");
  std::string path = "/var/tmp";
  bool json = false;
  app.add_option("--path", path, "the directory to test O_DIRECT on, e.g. an nvme_path (default /var/tmp)")
      ->type_name("DIR")
      ->check(CLI::Validator(CLI::ExistingDirectory).description(""))
      ->take_last();
  app.add_flag("--json", json, "one JSON object instead of text");
  if (const std::optional<int> exit_code = zero::cli::parse(app, argc, argv)) return *exit_code;

  Report r;
  r.add("version", ZE_VERSION);
  r.add("revision", ZE_GIT_REVISION);
  r.add("build", ZE_BUILD_TYPE);
  r.add("features", zero::cli::build_features());
#if defined(__clang__)
  r.add("compiler", "Clang " __clang_version__);
#else
  r.add("compiler", "GCC " __VERSION__);
#endif
  utsname u{};
  if (uname(&u) == 0) r.add("kernel", cat(u.sysname, " ", u.release, " ", u.machine));
  r.add("cpu", first_line_of("/proc/cpuinfo", "model name"));
  r.add("cpu.cores_online", cat(sysconf(_SC_NPROCESSORS_ONLN)), sysconf(_SC_NPROCESSORS_ONLN));
  const int64_t total = meminfo_bytes("MemTotal"), available = meminfo_bytes("MemAvailable");
  r.add("memory.total", gib(total), total);
  r.add("memory.available", gib(available), available);
  report_gpus(r);
  report_cpu_libraries(r);
  report_io_uring(r);
  report_o_direct(r, path);
  if (json) {
    std::cout << r.json().dump(2) << "\n";
  } else {
    std::cout << r.text();
  }
  return 0;
}
