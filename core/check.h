// Internal-invariant checks. A failed ZE_CHECK is a bug in ZeroEngine, not a
// user error: it prints file:line and the failed condition, then aborts. User
// errors (config, files, disk, peers) travel as absl::Status instead.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

namespace zero::internal {

[[noreturn]] inline void check_failed(const char* file, int line, const char* cond,
                                      const std::string& msg) {
  std::fprintf(stderr, "ZeroEngine internal error at %s:%d: check failed: %s%s%s\n", file, line,
               cond, msg.empty() ? "" : ": ", msg.c_str());
  std::fflush(stderr);
  std::abort();
}

// Collects an optional message streamed after the check: ZE_CHECK(x) << "detail".
class CheckMessage {
 public:
  CheckMessage(const char* file, int line, const char* cond) : file_(file), line_(line), cond_(cond) {}
  [[noreturn]] ~CheckMessage() { check_failed(file_, line_, cond_, stream_.str()); }
  template <typename T>
  CheckMessage& operator<<(const T& v) {
    stream_ << v;
    return *this;
  }

 private:
  const char* file_;
  int line_;
  const char* cond_;
  std::ostringstream stream_;
};

// Lets `cond ? (void)0 : Voidify() & CheckMessage(...) << ...` type-check.
struct Voidify {
  template <typename T>
  void operator&(const T&) {}
};

}  // namespace zero::internal

#define ZE_CHECK(cond)                    \
  (cond) ? (void)0                        \
         : ::zero::internal::Voidify() &  \
               ::zero::internal::CheckMessage(__FILE__, __LINE__, #cond)

#define ZE_CHECK_EQ(a, b) ZE_CHECK((a) == (b)) << (a) << " vs " << (b) << " "
#define ZE_CHECK_LE(a, b) ZE_CHECK((a) <= (b)) << (a) << " vs " << (b) << " "
#define ZE_CHECK_LT(a, b) ZE_CHECK((a) < (b)) << (a) << " vs " << (b) << " "
#define ZE_CHECK_GE(a, b) ZE_CHECK((a) >= (b)) << (a) << " vs " << (b) << " "
#define ZE_CHECK_OK(expr)                                   \
  do {                                                      \
    const ::absl::Status ze_check_ok_status_ = (expr);      \
    ZE_CHECK(ze_check_ok_status_.ok()) << ze_check_ok_status_.ToString(); \
  } while (0)
