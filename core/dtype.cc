// Dtype name parsing.
#include "core/dtype.h"

#include "core/strings.h"

namespace zero {

absl::StatusOr<DType> parse_float_dtype(std::string_view name) {
  if (name == "fp32" || name == "float32" || name == "float") return DType::kF32;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  if (name == "fp16" || name == "float16" || name == "half") return DType::kF16;
  return absl::InvalidArgumentError(
      cat("unknown dtype \"", name, "\" (expected fp32, bf16 or fp16)"));
}

}  // namespace zero
