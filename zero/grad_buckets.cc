// Gradient bucket planning; see grad_buckets.h.
#include "zero/grad_buckets.h"

#include <algorithm>

namespace zero {

std::vector<GradBucket> plan_grad_buckets(const FlatLayout& layout, int64_t bucket_elems) {
  std::vector<GradBucket> buckets;
  const auto& segs = layout.segments();
  GradBucket cur;
  cur.end = layout.numel();  // the tail padding rides with the last parameter
  int64_t first_offset = cur.end;
  for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
    // Close the bucket when this parameter would overflow it.
    if (!cur.params.empty() && cur.end - it->offset > std::max<int64_t>(bucket_elems, 1)) {
      cur.begin = first_offset;
      buckets.push_back(cur);
      cur = GradBucket();
      cur.end = first_offset;
    }
    cur.params.push_back(it->param);
    first_offset = it->offset;
  }
  cur.begin = 0;
  buckets.push_back(cur);
  return buckets;
}

std::unordered_map<const Parameter*, int> count_parameter_uses(Module& root) {
  std::unordered_map<const Parameter*, int> uses;
  for (Module* m : root.modules()) {
    for (Parameter* p : m->direct_parameters()) ++uses[p];
  }
  return uses;
}

std::vector<int64_t> partition_counts(int64_t begin, int64_t end, int64_t part, int world) {
  std::vector<int64_t> counts(world, 0);
  for (int r = 0; r < world; ++r) {
    const int64_t lo = std::max(begin, r * part), hi = std::min(end, (r + 1) * part);
    counts[r] = std::max<int64_t>(0, hi - lo);
  }
  return counts;
}

}  // namespace zero
