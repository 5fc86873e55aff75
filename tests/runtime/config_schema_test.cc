// One declaration per config key (runtime/config/config_schema.h), and
// everything follows from it:
//  * the key tables of docs/config-reference.md are the declarations printed
//    (fails when they differ; ZE_UPDATE_DOCS=1 writes them into the page);
//  * every declared key that the parser reads is wired to its field: a
//    config giving it a valid value other than its default parses, and the
//    field then holds that value;
//  * every bound and choice is enforced: a value just outside is an error
//    naming the key's full path;
//  * every refused key is refused at another value, naming the key.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "runtime/config/config_schema.h"
#include "runtime/config/run_config.h"
#include "tests/testing/generated_section.h"

namespace zero {
namespace {

const std::string kPage = std::string(ZE_SOURCE_DIR) + "/docs/config-reference.md";
constexpr const char* kBegin = "<!-- config-keys: begin (tests/runtime/config_schema_test.cc writes this) -->";
constexpr const char* kEnd = "<!-- config-keys: end -->";

TEST(ConfigSchemaTest, DocsTablesAreTheDeclarations) {
  zero::testing::expect_generated_section(kPage, kBegin, kEnd, config_key_table());
}

// Sets `path` (dotted) in `j` to v.
void put(Json& j, const std::string& path, const Json& v) {
  Json* node = &j;
  size_t start = 0;
  for (;;) {
    const size_t dot = path.find('.', start);
    if (dot == std::string::npos) {
      (*node)[path.substr(start)] = v;
      return;
    }
    node = &(*node)[path.substr(start, dot - start)];
    start = dot + 1;
  }
}

// A config that reaches `key`: the keys of one optimizer or schedule only
// exist beside it; offload and 16-bit-master keys need a stage that has them.
Json context_for(const ConfigKey& key) {
  Json j = {{"train_micro_batch_size_per_gpu", 1}};
  const std::string& p = key.path;
  if (p.rfind("optimizer.params.", 0) == 0) {
    RunConfig sgd;
    sgd.engine.optimizer.type = OptimizerType::kSGD;
    // ("AdamW" has decoupled decay whatever adam_w_mode says; "Adam" follows it.)
    put(j, "optimizer.type", key.applies && key.applies(sgd) ? "SGD" : "Adam");
  }
  for (const char* llama_key : {"model.n_kv_head", "model.d_ff", "model.norm_eps", "model.rope_theta",
                                "model.tie_word_embeddings", "model.head_dim"}) {
    if (p == llama_key) put(j, "model.arch", "llama");  // Llama-family keys are errors for GPT-2
  }
  // A mixture of experts' keys need a family with experts.
  for (const char* moe_key : {"model.num_experts", "model.num_experts_per_tok", "model.moe_intermediate_size",
                              "model.norm_topk_prob", "model.shared_expert_intermediate_size",
                              "model.decoder_sparse_step", "model.router_aux_loss_coef", "model.aux_loss_scope",
                              "model.router_z_loss_coef", "model.capacity_factor", "model.min_capacity"}) {
    if (p != moe_key) continue;
    put(j, "model.arch", "mixtral");
    if (p != "model.num_experts") put(j, "model.num_experts", 8);
  }
  // Keys of one data format are errors for the others.
  if (p == "data.jsonl_field") put(j, "data.format", "jsonl");
  if (p == "data.packing") put(j, "data.format", "sft");
  // LoRA's other keys need LoRA on.
  if (p.rfind("model.lora.", 0) == 0 && p != "model.lora.r") put(j, "model.lora.r", 4);
  if (p.rfind("scheduler.", 0) == 0) {
    std::string type = "WarmupLR";
    for (SchedulerType t : {SchedulerType::kWarmupLR, SchedulerType::kWarmupDecayLR, SchedulerType::kWarmupCosineLR,
                            SchedulerType::kOneCycle, SchedulerType::kLRRangeTest}) {
      RunConfig c;
      c.engine.scheduler.type = t;
      if (!key.applies || key.applies(c)) {
        type = std::string(scheduler_type_name(t));
        break;
      }
    }
    put(j, "scheduler.type", type);
    if (type == "WarmupDecayLR" || type == "WarmupCosineLR") put(j, "scheduler.params.total_num_steps", 10);
    if (type == "OneCycle") {
      put(j, "scheduler.params.cycle_min_lr", 0.1);
      put(j, "scheduler.params.cycle_max_lr", 0.2);
    }
  }
  if (p.rfind("zero_optimization.offload_param", 0) == 0) put(j, "zero_optimization.stage", 3);
  if (p.rfind("zero_optimization.offload_", 0) == 0) put(j, "zero_optimization.stage", 3);
  if (p == "bf16.bf16_master_weights_and_grads" || p == "bf16.bf16_optimizer_states") {
    put(j, "zero_optimization.stage", 1);
    put(j, "bf16.enabled", true);
    put(j, "bf16.bf16_master_weights_and_grads", true);
  }
  if (p == "fp16.fp16_master_weights_and_grads") {
    put(j, "zero_optimization.stage", 1);
    put(j, "fp16.enabled", true);
  }
  if (p == "communication_data_type") put(j, "data_types.grad_accum_dtype", "fp16");
  if (p == "gradient_allreduce_op" || p == "prescale_gradients") put(j, "zero_optimization.stage", 1);
  if (p == "optimizer.params.nesterov") put(j, "optimizer.params.momentum", 0.9);
  if (p == "run.eval_every") put(j, "data.val_path", "val.txt");  // evaluation needs validation data
  if (p == "elasticity.enabled") {  // the elastic batch replaces the triple, and needs its two keys
    put(j, "elasticity.ignore_non_elastic_batch_info", true);
    put(j, "elasticity.max_train_batch_size", 16);
    put(j, "elasticity.micro_batch_sizes", Json::array({1, 2}));
  }
  return j;
}

// A valid value other than the default, or null when the test cannot pick one.
Json other_value(const ConfigKey& k, const Json& def) {
  switch (k.kind) {
    case KeyKind::kBool:
      return !def.get<bool>();
    case KeyKind::kInt: {
      const int64_t d = def.is_null() ? 0 : def.get<int64_t>();
      const int64_t v = d == k.min_int ? std::min(k.max_int, k.min_int + 1) : k.min_int < 0 ? 1 : k.min_int;
      return v == d ? Json() : Json(v);
    }
    case KeyKind::kNumber: {
      const double d = def.is_null() ? -1.0 : def.get<double>();
      for (double v : {0.5, 0.25, 2.0, 3.0}) {
        if (v != d && k.range.contains(v)) return v;
      }
      return Json();
    }
    case KeyKind::kString:
      return def.is_null() ? Json() : Json("some/value");
    case KeyKind::kChoice:
      for (const std::string& c : k.choices) {
        if (!(def.is_string() && def.get<std::string>() == c)) return c;
      }
      return Json();
    case KeyKind::kChoiceList:
      return Json::array({k.choices.back()});
    case KeyKind::kStringList:
      return Json::array({"some\\.value"});
    case KeyKind::kNumberList:
      return Json::array({0.5, 0.75});
    case KeyKind::kRefused:
      return Json();
  }
  return Json();
}

// Values the cross-key rules or a file system would refuse for reasons other
// than the key's own declaration.
Json adjust(const ConfigKey& k, Json v) {
  if (k.path == "zero_optimization.allgather_bucket_size") return 2;
  if (k.path == "data_types.grad_accum_dtype" || k.path == "communication_data_type") return "fp16";
  if (k.path == "model.n_head") return 2;  // divides d_model
  if (k.path == "model.d_model") return 24;
  if (k.path == "run.save_dir" || k.path == "run.init_from" || k.path == "run.metrics") return v;
  if (k.path == "model.hf_config") return Json();  // a file to read: hf_format_test and configs_test
  if (k.path == "model.n_kv_head") return 2;        // divides n_head
  if (k.path == "model.num_experts") return 8;      // at least num_experts_per_tok
  if (k.path == "model.head_dim") return 8;         // even, for RoPE
  if (k.path == "model.max_positions") return 4096;  // above seq_len
  if (k.path.find("offload_") != std::string::npos && k.name() == "device") return "cpu";
  if (k.path == "model.type" || k.path == "run.backend") return Json();  // one value only / needs a GPU at run time
  if (k.path == "scheduler.params.warmup_type") return "linear";
  if (k.path == "activation_checkpointing.contiguous_memory_optimization") return Json();  // needs partitioning
  if (k.path == "gradient_allreduce_op") return "sum";
  if (k.name() == "job_name") return "some_value";  // one directory name: no separator
  if (k.path == "pipeline.stages") return Json();  // needs a world of 2 ranks: zero_train_mpi_test sets it
  if (k.path == "model.ep_size") return Json();  // needs experts and 2 ranks: cli_test, moe_parallel_test
  if (k.path == "pipeline.num_layers_per_virtual_stage") return Json();  // needs 2 stages: pipeline_interleaved_test
  if (k.path == "mesh.order") return "dp-tp-pp";  // names the axes of a mesh
  if (k.path == "model.lora.target_modules") return Json::array({"c_fc"});  // a layer of the model
  if (k.path == "model.lora.init_from") return Json();  // a PEFT directory to read: lora_test and the CLI test
  return v;
}

TEST(ConfigSchemaTest, EveryDeclaredKeyReachesItsField) {
  int checked = 0;
  for (const ConfigKey& k : config_schema()) {
    if (k.by_code || k.kind == KeyKind::kRefused || !k.set) continue;
    RunConfig fresh;
    const Json def = k.get(fresh);
    const Json v = adjust(k, other_value(k, def));
    if (v.is_null()) continue;
    Json j = context_for(k);
    put(j, k.path, v);
    absl::StatusOr<RunConfig> c = parse_run_config(j, {});
    ASSERT_TRUE(c.ok()) << k.path << " = " << v.dump() << " in " << j.dump() << ": " << c.status();
    Json got = k.get(*c);
    if (got.is_number_float() && v.is_number()) {
      EXPECT_NEAR(got.get<double>(), v.get<double>(), 1e-6) << k.path;
    } else if (got.is_array() && !got.empty() && got[0].is_number()) {
      EXPECT_NEAR(got[0].get<double>(), v[0].get<double>(), 1e-6) << k.path;
      EXPECT_NEAR(got[1].get<double>(), v[1].get<double>(), 1e-6) << k.path;
    } else {
      EXPECT_EQ(got, v) << k.path;
    }
    ++checked;
  }
  EXPECT_GT(checked, 100);
}

TEST(ConfigSchemaTest, EveryBoundAndChoiceIsEnforcedNamingTheKey) {
  int checked = 0;
  for (const ConfigKey& k : config_schema()) {
    if (k.by_code || !k.set) continue;
    Json bad;
    if (k.kind == KeyKind::kInt && k.min_int > INT64_MIN) bad = k.min_int - 1;
    else if (k.kind == KeyKind::kInt && k.max_int < INT64_MAX) bad = k.max_int + 1;
    else if (k.kind == KeyKind::kNumber && std::isfinite(k.range.lo)) bad = k.range.lo_open ? k.range.lo : k.range.lo - 1;
    else if (k.kind == KeyKind::kChoice) bad = "no-such-choice";
    else if (k.kind == KeyKind::kChoiceList) bad = Json::array({"no-such-choice"});
    else if (k.kind == KeyKind::kStringList) bad = Json::array({1});
    else if (k.kind == KeyKind::kBool) bad = "yes";
    if (bad.is_null()) continue;
    Json j = context_for(k);
    put(j, k.path, bad);
    absl::StatusOr<RunConfig> c = parse_run_config(j, {});
    ASSERT_FALSE(c.ok()) << k.path << " = " << bad.dump() << " was accepted";
    const std::string key = k.path.substr(0, k.path.rfind('.') + 1) + k.name();
    EXPECT_NE(c.status().message().find(key + ":"), std::string::npos) << c.status();
    ++checked;
  }
  EXPECT_GT(checked, 80);
}

TEST(ConfigSchemaTest, EveryRefusedKeyIsRefusedNamingTheKeyAndWhy) {
  int checked = 0;
  for (const ConfigKey& k : config_schema()) {
    if (k.kind != KeyKind::kRefused) continue;
    Json j = context_for(k);
    put(j, k.path, k.allowed);
    EXPECT_TRUE(parse_run_config(j, {}).ok()) << k.path << " at " << k.allowed.dump();
    put(j, k.path, Json("something else"));
    absl::StatusOr<RunConfig> c = parse_run_config(j, {});
    ASSERT_FALSE(c.ok()) << k.path;
    EXPECT_NE(c.status().message().find(k.path + ": \"something else\" is not supported (" + k.meaning + ")"),
              std::string::npos)
        << c.status();
    ++checked;
  }
  EXPECT_GT(checked, 30);
}

}  // namespace
}  // namespace zero
