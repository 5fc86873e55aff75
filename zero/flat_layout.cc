// Flat parameter layout; see flat_layout.h.
#include "zero/flat_layout.h"

namespace zero {

FlatLayout::FlatLayout(std::vector<Parameter*> params, int64_t pad_multiple) {
  ZE_CHECK_GE(pad_multiple, 1);
  int64_t offset = 0;
  for (Parameter* p : params) {
    segments_.push_back({p, offset});
    offset += p->numel();
  }
  real_numel_ = offset;
  numel_ = (offset + pad_multiple - 1) / pad_multiple * pad_multiple;
}

}  // namespace zero
