// Pipeline stage partitions; see pipeline_partition.h.
#include "graph/pipeline_partition.h"

#include <algorithm>
#include <limits>
#include <string>

#include "core/strings.h"

namespace zero {

std::string_view partition_method_name(PartitionMethod m) {
  return m == PartitionMethod::kUniform ? "uniform" : "parameters";
}

absl::StatusOr<std::vector<SplitRange>> partition_layers(const std::vector<int64_t>& layer_params, int stages,
                                                         PartitionMethod method, int64_t first_extra,
                                                         int64_t last_extra) {
  const int64_t n = static_cast<int64_t>(layer_params.size());
  if (stages < 1) return absl::InvalidArgumentError(cat("pipeline stages ", stages, " must be >= 1"));
  if (n < stages) {
    return absl::InvalidArgumentError(
        cat("a model of ", n, " layers cannot fill ", stages, " pipeline stages (each stage needs at least one layer)"));
  }
  std::vector<SplitRange> out(stages);
  if (method == PartitionMethod::kUniform) {
    for (int s = 0; s < stages; ++s) out[s] = even_split(n, stages, s);
    return out;
  }
  // Balanced: best[k][i] = the best split of layers [0, i) into stages
  // [0, k): the smallest largest stage, and among those the smallest sum of
  // squared stage weights (so the stages below the largest even out too); a
  // stage's weight is its layers' parameters plus the extras of the first /
  // last stage. O(P n^2), n is a layer count.
  std::vector<int64_t> prefix(n + 1, 0);
  for (int64_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + layer_params[i];
  auto weight = [&](int k, int64_t a, int64_t b) {
    return prefix[b] - prefix[a] + (k == 0 ? first_extra : 0) + (k == stages - 1 ? last_extra : 0);
  };
  struct Cost {
    int64_t largest = std::numeric_limits<int64_t>::max();
    double squares = 0;
    bool operator<(const Cost& o) const { return largest != o.largest ? largest < o.largest : squares < o.squares; }
  };
  std::vector<std::vector<Cost>> best(stages + 1, std::vector<Cost>(n + 1));
  std::vector<std::vector<int64_t>> cut(stages + 1, std::vector<int64_t>(n + 1, 0));
  best[0][0] = {0, 0};
  for (int k = 1; k <= stages; ++k) {
    for (int64_t i = k; i <= n - (stages - k); ++i) {
      for (int64_t j = k - 1; j < i; ++j) {
        if (best[k - 1][j].largest == std::numeric_limits<int64_t>::max()) continue;
        const int64_t w = weight(k - 1, j, i);
        const Cost c{std::max(best[k - 1][j].largest, w), best[k - 1][j].squares + static_cast<double>(w) * w};
        if (c < best[k][i]) {
          best[k][i] = c;
          cut[k][i] = j;
        }
      }
    }
  }
  int64_t end = n;
  for (int k = stages; k >= 1; --k) {
    const int64_t begin = cut[k][end];
    out[k - 1] = {begin, end - begin};
    end = begin;
  }
  return out;
}

absl::StatusOr<std::vector<SplitRange>> partition_virtual_stages(int64_t layers, int stages, int stage,
                                                                 int64_t layers_per_virtual_stage) {
  const int64_t per = layers_per_virtual_stage;
  const std::string key = cat("pipeline.num_layers_per_virtual_stage: ", per);
  if (stages < 1 || stage < 0 || stage >= stages) {
    return absl::InvalidArgumentError(cat("pipeline stage ", stage, " of ", stages));
  }
  if (per < 1) return absl::InvalidArgumentError(cat(key, " must be at least 1 (or unset: one chunk per stage)"));
  if (layers % (per * stages) != 0) {
    return absl::InvalidArgumentError(cat(
        key, " x pipeline.stages ", stages, " does not divide model.n_layer ", layers,
        " (each of the stages holds n_layer / (stages x num_layers_per_virtual_stage) chunks of that many blocks)"));
  }
  const int64_t chunks = layers / (per * stages);
  std::vector<SplitRange> out;
  for (int64_t c = 0; c < chunks; ++c) out.push_back({(c * stages + stage) * per, per});
  return out;
}

}  // namespace zero
