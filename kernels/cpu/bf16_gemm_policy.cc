// The bf16 GEMM precision choice; see bf16_gemm_policy.h.
#include "kernels/cpu/bf16_gemm_policy.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "absl/strings/str_format.h"
#include "core/allocator.h"
#include "core/check.h"
#include "core/memory_tracker.h"
#include "kernels/cpu/onednn_context.h"

namespace zero::cpu {

namespace {

// fp32 must be this much faster to be chosen: a margin measurement noise on a
// busy machine does not cross, so separate processes (zero-estimate, the run)
// choose alike; where the two are closer, either is about as fast.
constexpr double kWidenAbove = 1.25;

// Tracked host memory for the measurement (workspace), freed after it.
class MeasureBuffer {
 public:
  explicit MeasureBuffer(size_t bytes) : bytes_(bytes), p_(allocator().allocate(bytes, kDefaultAlignment)) {
    ZE_CHECK(p_ != nullptr) << "bf16 GEMM measurement: " << bytes << " bytes";
    MemoryTracker::global().add_allocated(Tier::kHost, MemCategory::kWorkspace, static_cast<int64_t>(bytes));
    std::memset(p_, 0, bytes);
  }
  ~MeasureBuffer() {
    allocator().deallocate(p_, bytes_);
    MemoryTracker::global().add_allocated(Tier::kHost, MemCategory::kWorkspace, -static_cast<int64_t>(bytes_));
  }
  void* get() const { return p_; }

 private:
  static HostAllocator& allocator() {
    static HostAllocator a;
    return a;
  }
  size_t bytes_;
  void* p_;
};

// C[n, n] = A[n, n] B[n, n] in one dtype (fp32 C): the primitive and its buffers.
class TimedGemm {
 public:
  TimedGemm(DType t, int64_t n)
      : n_(n),
        in_(dnnl::memory::dims{n, n}, to_dnnl(t), dnnl::memory::format_tag::ab),
        out_(dnnl::memory::dims{n, n}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::ab),
        pd_(dnnl::matmul::desc(in_, in_, out_), OneDnn::get().engine),
        mm_(pd_),
        a_(in_.get_size()),
        b_(in_.get_size()),
        c_(out_.get_size()) {
    const dnnl::engine& e = OneDnn::get().engine;
    args_ = {{DNNL_ARG_SRC, dnnl::memory(in_, e, a_.get())},
             {DNNL_ARG_WEIGHTS, dnnl::memory(in_, e, b_.get())},
             {DNNL_ARG_DST, dnnl::memory(out_, e, c_.get())}};
    run();  // builds the kernels and touches the pages
  }
  // Seconds of one GEMM.
  double run() {
    OneDnn& ctx = OneDnn::get();
    const auto t0 = std::chrono::steady_clock::now();
    mm_.execute(ctx.stream, args_);
    ctx.stream.wait();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  double gflops(double seconds) const { return 2.0 * static_cast<double>(n_) * n_ * n_ / seconds / 1e9; }

 private:
  int64_t n_;
  dnnl::memory::desc in_, out_;
  dnnl::matmul::primitive_desc pd_;
  dnnl::matmul mm_;
  MeasureBuffer a_, b_, c_;
  std::unordered_map<int, dnnl::memory> args_;
};

Bf16GemmChoice choose() {
  Bf16GemmChoice c;
  const char* forced = std::getenv("ZE_CPU_BF16_GEMM");
  const std::string_view f = forced != nullptr ? forced : "";
  if (f == "bf16" || f == "fp32") {
    c.gemm = f == "bf16" ? DType::kBF16 : DType::kF32;
    c.reason = absl::StrFormat("bf16 GEMMs in %s (ZE_CPU_BF16_GEMM=%s)", f, f);
    return c;
  }
  if (!f.empty() && f != "auto") {
    std::fprintf(stderr, "ZeroEngine: ZE_CPU_BF16_GEMM=%s: use bf16, fp32 or auto\n", forced);
    std::exit(2);
  }
  // Interleaved, best of 6 each: a busy machine slows single runs, not the best.
  constexpr int64_t kN = 512;
  TimedGemm bf16(DType::kBF16, kN), fp32(DType::kF32, kN);
  double best_bf16 = 1e30, best_fp32 = 1e30;
  for (int i = 0; i < 6; ++i) {
    best_bf16 = std::min(best_bf16, bf16.run());
    best_fp32 = std::min(best_fp32, fp32.run());
  }
  c.bf16_gflops = bf16.gflops(best_bf16);
  c.fp32_gflops = fp32.gflops(best_fp32);
  c.gemm = c.fp32_gflops > kWidenAbove * c.bf16_gflops ? DType::kF32 : DType::kBF16;
  c.reason = absl::StrFormat("bf16 GEMMs in %s (measured at %d^3: bf16 %.0f GFLOP/s, fp32 %.0f GFLOP/s)",
                             c.gemm == DType::kBF16 ? "bf16" : "fp32, widened", kN, c.bf16_gflops, c.fp32_gflops);
  return c;
}

}  // namespace

const Bf16GemmChoice& bf16_gemm_choice() {
  static const Bf16GemmChoice c = choose();
  return c;
}

}  // namespace zero::cpu
