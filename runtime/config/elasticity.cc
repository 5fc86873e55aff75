// The elastic batch; see elasticity.h.
#include "runtime/config/elasticity.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <numeric>
#include <set>

#include "absl/strings/str_join.h"
#include "core/status.h"
#include "core/strings.h"

namespace zero {

namespace {

// The smallest highly composite numbers: the scale factors of a candidate
// batch (enough for batches up to 720720 x the base).
constexpr int64_t kHighlyComposite[] = {1,     2,     4,      6,      12,     24,     36,     48,     60,     120,
                                        180,   240,   360,    720,    840,    1260,   1680,   2520,   5040,   7560,
                                        10080, 15120, 20160,  25200,  27720,  45360,  50400,  55440,  83160,  110880,
                                        166320, 221760, 277200, 332640, 498960, 554400, 665280, 720720};

// Each base scaled by the largest highly composite number that keeps it
// within max_batch (a base above it is no candidate).
std::set<int64_t> candidate_batches(const std::vector<int64_t>& bases, int64_t max_batch) {
  std::set<int64_t> out;
  for (const int64_t base : bases) {
    if (base > max_batch) continue;
    const int64_t fits = max_batch / base;
    int64_t scale = 1;
    for (const int64_t h : kHighlyComposite)
      if (h <= fits) scale = h;
    out.insert(scale * base);
  }
  return out;
}

// The rank counts in [min_ranks, max_ranks] that split `batch` into whole
// micro-batches of one of the listed sizes.
std::vector<int64_t> valid_sizes(int64_t batch, const std::vector<int64_t>& micro, int64_t min_ranks,
                                 int64_t max_ranks) {
  std::set<int64_t> out;
  for (const int64_t m : micro) {
    if (batch % m != 0) continue;
    const int64_t most = batch / m;
    if (most >= min_ranks && most <= max_ranks) out.insert(most);
    for (int64_t g = std::max<int64_t>(min_ranks, 1); g <= std::min(most / 2, max_ranks); ++g)
      if (most % g == 0) out.insert(g);
  }
  return {out.begin(), out.end()};
}

// Version 0.1's batch: the candidate the most rank counts divide.
ElasticBatch best_batch(const std::vector<int64_t>& micro, int64_t max_batch, int64_t min_ranks, int64_t max_ranks,
                        bool prefer_larger) {
  if (min_ranks <= 0) min_ranks = 1;
  if (max_ranks <= 0) max_ranks = max_batch / *std::min_element(micro.begin(), micro.end());
  std::vector<int64_t> bases = micro;
  bases.push_back(std::accumulate(micro.begin(), micro.end(), int64_t{1},
                                  [](int64_t a, int64_t b) { return std::lcm(a, b); }));
  ElasticBatch best;
  best.train_batch_size = *std::min_element(micro.begin(), micro.end());
  size_t most = 0;
  for (const int64_t batch : candidate_batches(bases, max_batch)) {
    std::vector<int64_t> sizes = valid_sizes(batch, micro, min_ranks, max_ranks);
    const bool tie_wins = prefer_larger ? batch > best.train_batch_size : batch < best.train_batch_size;
    if (sizes.size() > most || (sizes.size() == most && tie_wins)) {
      most = sizes.size();
      best.train_batch_size = batch;
      best.valid_sizes = std::move(sizes);
    }
  }
  return best;
}

absl::Status check(const ElasticityConfig& c) {
  auto bad = [](const std::string& msg) { return absl::InvalidArgumentError(cat("elasticity.", msg)); };
  if (c.version != 0.1 && c.version != 0.2)
    return bad(cat("version: ", c.version, " is not an elasticity version this engine knows (0.1, 0.2)"));
  if (c.max_train_batch_size < 1) return bad(cat("max_train_batch_size: ", c.max_train_batch_size, " is below 1"));
  if (c.micro_batch_sizes.empty()) return bad("micro_batch_sizes: the list is empty");
  for (const int64_t m : c.micro_batch_sizes) {
    if (m < 1) return bad(cat("micro_batch_sizes: ", m, " is below 1"));
    if (m > c.max_train_batch_size)
      return bad(cat("micro_batch_sizes: ", m, " exceeds max_train_batch_size ", c.max_train_batch_size));
  }
  if (c.min_gpus < 1) return bad(cat("min_gpus: ", c.min_gpus, " is below 1"));
  if (c.max_gpus < c.min_gpus) return bad(cat("max_gpus: ", c.max_gpus, " is below min_gpus ", c.min_gpus));
  if (c.model_parallel_size < 1) return bad(cat("model_parallel_size: ", c.model_parallel_size, " is below 1"));
  if (c.num_gpus_per_node < 1) return bad(cat("num_gpus_per_node: ", c.num_gpus_per_node, " is below 1"));
  if (c.version == 0.1 && c.model_parallel_size > 1)
    return bad(cat("model_parallel_size: ", c.model_parallel_size,
                   " needs elasticity.version 0.2 (version 0.1 has no model parallelism)"));
  if (c.version == 0.2 && c.num_gpus_per_node % c.model_parallel_size != 0)
    return bad(cat("num_gpus_per_node: ", c.num_gpus_per_node, " does not divide by model_parallel_size ",
                   c.model_parallel_size));
  return absl::OkStatus();
}

// The largest listed micro-batch size dividing batch / ranks, or 0.
int64_t micro_for(const ElasticityConfig& c, int64_t batch, int64_t ranks) {
  if (ranks < 1 || batch % ranks != 0) return 0;
  int64_t pick = 0;
  for (const int64_t m : c.micro_batch_sizes) {
    if ((batch / ranks) % m != 0) continue;
    pick = std::max(pick, m);
  }
  return pick;
}

}  // namespace

std::string describe_sizes(const std::vector<int64_t>& sizes) { return cat("[", absl::StrJoin(sizes, ", "), "]"); }

absl::StatusOr<ElasticBatch> elastic_batch_candidates(const ElasticityConfig& c) {
  ZE_RETURN_IF_ERROR(check(c));
  return best_batch(c.micro_batch_sizes, c.max_train_batch_size, c.min_gpus, c.max_gpus, c.prefer_larger_batch);
}

absl::StatusOr<ElasticBatch> elastic_batch_for(const ElasticityConfig& c, int64_t data_parallel, int64_t world) {
  ZE_RETURN_IF_ERROR(check(c));
  ElasticBatch b;
  if (c.version == 0.1) {
    b = best_batch(c.micro_batch_sizes, c.max_train_batch_size, c.min_gpus, c.max_gpus, c.prefer_larger_batch);
  } else {
    if (world != data_parallel * c.model_parallel_size)
      return absl::InvalidArgumentError(
          cat("elasticity.model_parallel_size: ", c.model_parallel_size, " is not this run's model-parallel size ",
              world / std::max<int64_t>(data_parallel, 1), " (", world, " ranks over ", data_parallel,
              " data-parallel ones: tensor x pipeline)"));
    const int64_t dp_per_node = c.num_gpus_per_node / c.model_parallel_size;
    b = best_batch(c.micro_batch_sizes, c.max_train_batch_size / dp_per_node, c.min_gpus / c.num_gpus_per_node,
                   c.max_gpus / c.num_gpus_per_node, c.prefer_larger_batch);
    b.train_batch_size *= dp_per_node;
    for (int64_t& s : b.valid_sizes) s *= dp_per_node;
    if (!std::binary_search(b.valid_sizes.begin(), b.valid_sizes.end(), data_parallel)) {
      // Outside the list: the largest (smallest) multiple of one micro-batch
      // on every rank within the cap.
      const int64_t dp = static_cast<int64_t>(static_cast<double>(world) / static_cast<double>(c.num_gpus_per_node) *
                                              static_cast<double>(dp_per_node));
      std::vector<int64_t> candidates;
      for (const int64_t m : c.micro_batch_sizes)
        if (m * dp > 0) candidates.push_back(c.max_train_batch_size / (m * dp) * m * dp);
      b.train_batch_size = c.prefer_larger_batch ? *std::max_element(candidates.begin(), candidates.end())
                                                 : *std::min_element(candidates.begin(), candidates.end());
      b.valid_sizes = {dp};
    }
  }
  if (!std::binary_search(b.valid_sizes.begin(), b.valid_sizes.end(), data_parallel))
    return absl::InvalidArgumentError(cat("elasticity: ", data_parallel, " data-parallel rank",
                                          data_parallel == 1 ? "" : "s", " cannot split the elastic batch of ",
                                          b.train_batch_size, " into micro-batches of ",
                                          describe_sizes(c.micro_batch_sizes), "; the sizes that can: ",
                                          describe_sizes(b.valid_sizes), " (min_gpus ", c.min_gpus, ", max_gpus ",
                                          c.max_gpus, ")"));
  b.micro_batch_size = micro_for(c, b.train_batch_size, data_parallel);
  if (b.micro_batch_size == 0 || b.train_batch_size <= 0)
    return absl::InvalidArgumentError(cat("elasticity: no micro-batch size of ", describe_sizes(c.micro_batch_sizes),
                                          " divides the batch of ", b.train_batch_size, " over ", data_parallel,
                                          " data-parallel ranks"));
  b.gradient_accumulation_steps = b.train_batch_size / (b.micro_batch_size * data_parallel);
  return b;
}

}  // namespace zero
