// The process's oneDNN CPU engine and stream, and the mapping of oneDNN
// errors to one place. oneDNN runs on the same OpenMP thread pool as our own
// kernels (Debian's libdnnl is built with the OpenMP runtime).
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include "core/dtype.h"

namespace zero::cpu {

struct OneDnn {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  static OneDnn& get();
};

inline dnnl::memory::data_type to_dnnl(DType t) {
  switch (t) {
    case DType::kF32: return dnnl::memory::data_type::f32;
    case DType::kBF16: return dnnl::memory::data_type::bf16;
    case DType::kF16: return dnnl::memory::data_type::f16;
    case DType::kI32: return dnnl::memory::data_type::s32;
  }
  return dnnl::memory::data_type::undef;
}

}  // namespace zero::cpu
