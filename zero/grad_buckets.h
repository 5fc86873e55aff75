// Gradient buckets for stages 0-2: contiguous ranges of the flat layout, in
// the order backward completes them (the end of the layout first, since
// backward visits modules in reverse). A bucket holds whole parameters up to
// reduce_bucket_size elements (a larger parameter is a bucket of its own);
// the layout's tail padding belongs to the bucket of the last parameter.
// A bucket is ready for reduction once every parameter in it has had its
// last use in the backward pass (a tied parameter is used twice).
#pragma once

#include <unordered_map>
#include <vector>

#include "zero/flat_layout.h"

namespace zero {

struct GradBucket {
  int64_t begin = 0, end = 0;  // flat element range
  std::vector<Parameter*> params;
};

// With overlap_comm, buckets whose reduction is still in flight at once (the
// rest of backward waits for the oldest beyond this): DeepSpeed's double-
// buffered gradient buckets, so communication buffers stay at about two
// buckets instead of growing to the whole gradient.
inline constexpr size_t kBucketsInFlight = 2;

std::vector<GradBucket> plan_grad_buckets(const FlatLayout& layout, int64_t bucket_elems);

// How many modules of the tree use each parameter directly: the number of
// backward calls after which its gradient is complete.
std::unordered_map<const Parameter*, int> count_parameter_uses(Module& root);

// The elements of [begin, end) that fall in each rank's partition
// [r * part, (r + 1) * part): the reduce-scatter counts of a bucket.
std::vector<int64_t> partition_counts(int64_t begin, int64_t end, int64_t part, int world);

}  // namespace zero
