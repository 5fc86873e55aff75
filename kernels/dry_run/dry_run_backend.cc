// The dry-run backend; see dry_run_backend.h.
#include "kernels/dry_run/dry_run_backend.h"

#include <sys/mman.h>

#include <mutex>

#include "kernels/dry_run/dry_run_ops.h"

namespace zero {

namespace {

// Address space for the fake allocations of one dry run: far more than any
// plan of one rank holds (beyond it, allocations fail as out of memory).
constexpr size_t kReservedBytes = size_t{1} << 45;  // 32 TiB, never backed

class DoneEvent final : public Event {
 public:
  bool query() const override { return true; }
};

// Bump allocation in the reserved range; nothing is ever freed or reused.
class DryRunAllocator final : public RawAllocator {
 public:
  DryRunAllocator(Tier tier, DryRunMemory& memory) : tier_(tier), memory_(memory) {}
  Tier tier() const override { return tier_; }
  void* allocate(size_t bytes, size_t alignment) override;
  void deallocate(void*, size_t) override {}

 private:
  Tier tier_;
  DryRunMemory& memory_;
};

}  // namespace

class DryRunMemory {
 public:
  DryRunMemory() {
    void* p = ::mmap(nullptr, kReservedBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    // Without the reservation (an address-space limit), addresses past the
    // canonical user range still hold nothing; a touch faults all the same.
    base_ = p == MAP_FAILED ? kDryRunUnbackedAddress : reinterpret_cast<uintptr_t>(p);
    reserved_ = p != MAP_FAILED;
    host_ = std::make_unique<DryRunAllocator>(Tier::kHost, *this);
    device_ = std::make_unique<DryRunAllocator>(Tier::kDevice, *this);
  }
  ~DryRunMemory() {
    if (reserved_) ::munmap(reinterpret_cast<void*>(base_), kReservedBytes);
  }
  DryRunMemory(const DryRunMemory&) = delete;
  DryRunMemory& operator=(const DryRunMemory&) = delete;

  void* take(size_t bytes, size_t alignment) {
    std::lock_guard<std::mutex> lock(mu_);
    const size_t a = std::max<size_t>(alignment, 1);
    const size_t at = (used_ + a - 1) / a * a;
    if (at + bytes > kReservedBytes) return nullptr;
    used_ = at + std::max<size_t>(bytes, 1);
    return reinterpret_cast<void*>(base_ + at);
  }

  MemoryTracker tracker;
  RawAllocator* allocator(Tier t) {
    return t == Tier::kHost ? host_.get() : t == Tier::kDevice ? device_.get() : nullptr;
  }

 private:
  std::mutex mu_;
  uintptr_t base_ = 0;
  bool reserved_ = false;
  size_t used_ = 0;
  std::unique_ptr<DryRunAllocator> host_, device_;
};

void* DryRunAllocator::allocate(size_t bytes, size_t alignment) { return memory_.take(bytes, alignment); }

DryRunBackend::DryRunBackend(Tier compute_tier) : DryRunBackend(compute_tier, std::make_shared<DryRunMemory>()) {}

DryRunBackend::DryRunBackend(Tier compute_tier, std::shared_ptr<DryRunMemory> memory)
    : compute_tier_(compute_tier), memory_(std::move(memory)), ops_(std::make_unique<cpu::DryRunOps>(*this)) {}

DryRunBackend::~DryRunBackend() = default;

MemoryTracker& DryRunBackend::process_tracker() { return memory_->tracker; }

std::unique_ptr<Backend> DryRunBackend::make_host_backend() {
  return std::unique_ptr<Backend>(new DryRunBackend(Tier::kHost, memory_));
}

EventPtr DryRunBackend::record_event(StreamId) { return std::make_shared<DoneEvent>(); }

RawAllocator* DryRunBackend::raw_allocator(Tier tier) { return memory_->allocator(tier); }

}  // namespace zero
