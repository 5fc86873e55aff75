// The "elasticity" section's keys and rules; see elasticity_section.h.
#include "runtime/config/elasticity_section.h"

#include "core/strings.h"
#include "runtime/config/config_key_builders.h"
#include "runtime/config/elasticity.h"

namespace zero {

namespace {

constexpr const char* kBatchKeys[] = {"train_batch_size", "train_micro_batch_size_per_gpu",
                                      "gradient_accumulation_steps"};

}  // namespace

void parse_elasticity_section(ConfigReader r, RunConfig& c) {
  read_declared_keys(r, c);
  if (r.has("micro_batch_sizes")) {
    const Json& v = r.get_raw("micro_batch_sizes");
    std::vector<int64_t> sizes;
    bool good = v.is_array() && !v.empty();
    for (const Json& e : good ? v : Json::array()) {
      if (!e.is_number_integer() || e.get<int64_t>() < 1 || e.get<int64_t>() > kMaxBatchSamples) {
        good = false;
        break;
      }
      sizes.push_back(e.get<int64_t>());
    }
    if (good) {
      c.elasticity.micro_batch_sizes = std::move(sizes);
    } else {
      r.error("micro_batch_sizes", cat(v.dump(), " is not a list of positive integers (the micro-batch sizes a rank "
                                                 "may run, e.g. [2, 4, 6])"));
    }
  }
  if (c.elasticity.enabled) {
    for (const char* key : {"max_train_batch_size", "micro_batch_sizes"}) {
      if (!r.has(key)) r.error(key, "is needed when elasticity.enabled is true (DeepSpeed requires it too)");
    }
  }
  r.finish();
}

bool resolve_elastic_batch(ConfigReader& root, RunConfig& c) {
  if (!c.elasticity.enabled) return false;
  if (!c.elasticity.ignore_non_elastic_batch_info) {
    for (const char* key : kBatchKeys) {
      if (!root.has(key)) continue;
      const Json& v = root.get_raw(key);
      if (v.is_null() || (v.is_string() && v.get<std::string>() == "auto")) continue;
      root.error(key, "is set while elasticity.enabled is true: the elastic batch replaces it (remove it, or set "
                      "elasticity.ignore_non_elastic_batch_info to true to ignore it)");
    }
  }
  for (const char* key : kBatchKeys) root.mark_known(key);
  absl::StatusOr<ElasticBatch> b = elastic_batch_for(c.elasticity, c.data_size(), c.world_size);
  if (!b.ok()) {
    const std::string message(b.status().message());
    // "elasticity.<key>: ..." names its key; the rest is about the world.
    const size_t colon = message.find(": ");
    if (message.rfind("elasticity.", 0) == 0 && colon != std::string::npos) {
      root.error(message.substr(0, colon), message.substr(colon + 2));
    } else {
      root.error("elasticity.enabled", cat("true, but ", message.substr(message.find(": ") + 2)));
    }
    return true;
  }
  c.train_batch_size = b->train_batch_size;
  c.engine.micro_batch_size = b->micro_batch_size;
  c.engine.gradient_accumulation_steps = b->gradient_accumulation_steps;
  root.set_derived("train_batch_size", b->train_batch_size);
  root.set_derived("train_micro_batch_size_per_gpu", b->micro_batch_size);
  root.set_derived("gradient_accumulation_steps", b->gradient_accumulation_steps);
  c.elastic_valid_sizes = b->valid_sizes;
  return true;
}

namespace config_keys {

std::vector<ConfigKey> elasticity_keys() {
  std::vector<ConfigKey> k;
  const std::string e = "elasticity.";
  k.push_back(boolean(e + "enabled", ZE_FIELD(elasticity.enabled),
                      "the global batch, micro-batch and accumulation come from this section for the run's "
                      "data-parallel size (DeepSpeed's algorithm), so a run relaunched on fewer ranks by zero-run "
                      "keeps its global batch"));
  k.push_back(integer(e + "max_train_batch_size", ZE_FIELD(elasticity.max_train_batch_size), 1, kMaxBatchSamples,
                      "the largest global batch acceptable"));
  ConfigKey sizes = base(e + "micro_batch_sizes", KeyKind::kNumberList,
                         "the micro-batch sizes a rank may run (positive integers); the largest that divides the "
                         "batch per rank is used");
  sizes.get = [](RunConfig& c) { return Json(c.elasticity.micro_batch_sizes); };
  k.push_back(sizes.read_by_code());
  k.push_back(integer(e + "min_gpus", ZE_FIELD(elasticity.min_gpus), 1, kMax,
                      "the fewest ranks the batch must allow (data-parallel ranks; version 0.2: ranks)"));
  k.push_back(integer(e + "max_gpus", ZE_FIELD(elasticity.max_gpus), 1, kMax, "the most ranks the batch must allow"));
  k.push_back(number(e + "min_time", ZE_FIELD(elasticity.min_time), kNonNegative,
                     "accepted: minutes a scheduler should keep the job at a size; no meaning to the run"));
  k.push_back(number(e + "version", ZE_FIELD(elasticity.version), kPositive,
                     "0.1 (no model parallelism) or 0.2 (num_gpus_per_node and model_parallel_size; a size outside "
                     "the valid list gets the largest batch within max_train_batch_size instead of an error)"));
  k.push_back(boolean(e + "prefer_larger_batch", ZE_FIELD(elasticity.prefer_larger_batch),
                      "between batches allowing equally many sizes, the larger"));
  k.push_back(boolean(e + "ignore_non_elastic_batch_info", ZE_FIELD(elasticity.ignore_non_elastic_batch_info),
                      "ignore train_batch_size, train_micro_batch_size_per_gpu and gradient_accumulation_steps "
                      "rather than refuse them"));
  k.push_back(integer(e + "model_parallel_size", ZE_FIELD(elasticity.model_parallel_size), 1, kMax,
                      "version 0.2: tensor x pipeline ranks, which must be the run's"));
  k.push_back(integer(e + "num_gpus_per_node", ZE_FIELD(elasticity.num_gpus_per_node), 1, kMax,
                      "version 0.2: ranks per node"));
  return k;
}

}  // namespace config_keys

}  // namespace zero
