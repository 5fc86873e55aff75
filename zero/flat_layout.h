// Where each parameter lives in a flat buffer. Parameters are packed back to
// back in model order with no gaps (DeepSpeed's flatten order for ZeRO-1/2);
// the total is padded with zeros to a multiple of `pad_multiple` (ZeRO-1/2 use
// 2 x world size so every rank's partition has the same size and starts on an
// even element). Parameter tensors, gradient tensors and optimizer shards are
// views into buffers with this layout.
#pragma once

#include <vector>

#include "graph/module.h"

namespace zero {

struct FlatSegment {
  Parameter* param;
  int64_t offset;  // first element of the parameter in the flat buffer
};

class FlatLayout {
 public:
  FlatLayout() = default;
  explicit FlatLayout(std::vector<Parameter*> params, int64_t pad_multiple = 1);

  int64_t numel() const { return numel_; }          // padded total
  int64_t real_numel() const { return real_numel_; }  // sum of parameter sizes
  const std::vector<FlatSegment>& segments() const { return segments_; }

  // View of one parameter inside a flat buffer laid out like this.
  Tensor param_view(const Tensor& flat, const FlatSegment& seg) const {
    return flat.slice(seg.offset, seg.param->shape());
  }

 private:
  std::vector<FlatSegment> segments_;
  int64_t real_numel_ = 0;
  int64_t numel_ = 0;
};

}  // namespace zero
