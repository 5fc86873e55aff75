// Parsing of a run config; see run_config.h.
#include "runtime/config/run_config.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <regex>
#include <set>

#include "absl/algorithm/container.h"
#include "comm/comm_log.h"
#include "core/status.h"
#include "core/strings.h"
#include "graph/gpt.h"
#include "runtime/config/config_key_builders.h"
#include "runtime/config/config_reader.h"
#include "runtime/config/config_schema.h"
#include "runtime/config/data_section.h"
#include "runtime/config/deepspeed_sections.h"
#include "runtime/config/hf_config.h"
#include "runtime/config/elasticity_section.h"
#include "runtime/config/lora_section.h"
#include "runtime/config/model_limits.h"
#include "runtime/config/moe_section.h"

namespace zero {

std::map<std::string, int> RunConfig::mesh_sizes() const {
  std::map<std::string, int> sizes;
  if (tensor_size() > 1) sizes["tp"] = tensor_size();
  if (expert_size() > 1) sizes["ep"] = expert_size();
  if (pipeline_size() > 1) sizes["pp"] = pipeline_size();
  return sizes;
}

namespace {

// The keys that say what the architecture is (a Hugging Face config.json
// says it all), and those only the families with RoPE have.
constexpr std::string_view kArchitectureKeys[] = {"arch", "n_layer", "n_head", "d_model", "vocab_size",
                                                  "n_kv_head", "d_ff", "norm_eps", "rope_theta",
                                                  "tie_word_embeddings", "max_positions", "head_dim",
                                                  "logit_softcap", "num_experts", "num_experts_per_tok",
                                                  "moe_intermediate_size", "norm_topk_prob",
                                                  "shared_expert_intermediate_size", "decoder_sparse_step"};
constexpr std::string_view kRopeFamilyKeys[] = {"n_kv_head", "d_ff",  "norm_eps",
                                                "rope_theta", "tie_word_embeddings", "head_dim"};

// model.arch's values: every family of graph/model_features.h.
std::vector<std::pair<std::string, ModelArch>> family_choices() {
  std::vector<std::pair<std::string, ModelArch>> out;
  for (const ModelFamily& f : kModelFamilies) out.emplace_back(std::string(f.name), f.arch);
  return out;
}

// A model read from a Hugging Face config.json (`hf`, read from `where`):
// the architecture from it; the section may still set seq_len (at most
// max_position_embeddings) and dropout, and nothing that contradicts it.
// A config.json that does not read is an error of `error_key`.
void apply_hf_model(ConfigReader& r, RunConfig& c, const Json& hf, const std::string& where,
                    const std::string& error_key) {
  absl::StatusOr<GptConfig> parsed = gpt_config_from_hf(hf, where);
  if (!parsed.ok()) {
    r.diagnostics().errors.push_back(cat(error_key, ": ", parsed.status().message()));
    return;
  }
  GptConfig& g = c.model.gpt;
  const int64_t seq_len = g.seq_len;
  const float dropout = g.dropout;
  g = *parsed;
  g.seq_len = r.has("seq_len") ? seq_len : std::min(seq_len, g.positions());
  g.dropout = dropout;
  c.model.hf_source = hf;
  r.set_effective("arch", std::string(g.family_name()));
  r.set_effective("n_layer", g.n_layer);
  r.set_effective("n_head", g.n_head);
  r.set_effective("d_model", g.d_model);
  r.set_effective("vocab_size", g.vocab_size);
  r.set_effective("seq_len", g.seq_len);
  r.set_effective("max_positions", g.positions());
  if (g.rope()) {
    r.set_effective("n_kv_head", g.kv_heads());
    r.set_effective("head_dim", g.head_dim());
    r.set_effective("d_ff", g.ffn_width());
    r.set_effective("norm_eps", g.norm_eps);
    r.set_effective("rope_theta", g.rope_theta);
    r.set_effective("tie_word_embeddings", g.tie_word_embeddings);
  }
  r.set_effective("logit_softcap", g.logit_softcap);
}

// model.hf_config: the architecture from the file.
void read_hf_config(ConfigReader& r, RunConfig& c) {
  for (std::string_view key : kArchitectureKeys) {
    if (r.has(key)) r.error(key, cat("comes from model.hf_config (", c.model.hf_config, "); remove one of them"));
  }
  absl::StatusOr<Json> file = load_json_file(c.model.hf_config);
  if (!file.ok()) {
    r.error("hf_config", std::string(file.status().message()));
    return;
  }
  apply_hf_model(r, c, *file, c.model.hf_config, r.key_path("hf_config"));
}

// A resumed checkpoint's model against the one the config names: the same
// model (hf_model_difference), or an error naming both. The checkpoint's
// description is kept for its saves (its token ids, the source's keys).
void check_resumed_model(ConfigReader& r, RunConfig& c, const CheckpointModel& resumed) {
  const std::string where = resumed.checkpoint + "/manifest.json \"model\"";
  absl::StatusOr<GptConfig> theirs = gpt_config_from_hf(resumed.hf, where);
  if (!theirs.ok()) {
    r.diagnostics().errors.push_back(cat("run.resume: ", theirs.status().message()));
    return;
  }
  const GptConfig& ours = c.model.gpt;
  const std::string difference = hf_model_difference(*theirs, ours);
  if (!difference.empty()) {
    const std::string source =
        c.model.hf_config.empty() ? std::string("the model section") : cat("model.hf_config ", c.model.hf_config);
    r.diagnostics().errors.push_back(cat(
        "run.resume: checkpoint ", resumed.checkpoint, " holds a ", model_family(theirs->arch).display,
        " model and the run's config (", source, ") describes a ", model_family(ours.arch).display,
        " model that differs from it: ", difference, " (the checkpoint's, then the config's). Resume with the "
        "model the checkpoint was saved from, or name none (no model.hf_config, --init-from or architecture keys) "
        "and the checkpoint's is used"));
    return;
  }
  c.model.hf_source = resumed.hf;
}

void parse_model(ConfigReader r, RunConfig& c, const std::optional<CheckpointModel>& resumed) {
  read_declared_keys(r, c);
  // Each freeze pattern must be a regular expression (which parameters it
  // matches is known only once the model is built: train_loop.cc).
  for (const std::string& pattern : c.model.freeze) {
    try {
      std::regex re(pattern, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      r.error("freeze", cat("\"", pattern, "\" is not a regular expression (", e.what(), ")"));
    }
  }
  GptConfig& g = c.model.gpt;
  const bool section_names_model = std::any_of(std::begin(kArchitectureKeys), std::end(kArchitectureKeys),
                                               [&](std::string_view key) { return r.has(key); });
  // --init-from a Hugging Face directory brings its config.json, unless the
  // section says what the model is (then the weights must fit it).
  std::error_code ec;
  if (c.model.hf_config.empty() && !c.run.init_from.empty() &&
      std::filesystem::is_regular_file(std::filesystem::path(c.run.init_from) / "config.json", ec) &&
      !section_names_model) {
    c.model.hf_config = (std::filesystem::path(c.run.init_from) / "config.json").string();
    r.set_effective("hf_config", c.model.hf_config);
  }
  // A resumed checkpoint's model, where nothing else names one.
  const bool from_checkpoint =
      resumed && !resumed->hf.is_null() && c.model.hf_config.empty() && !section_names_model;
  if (from_checkpoint) {
    apply_hf_model(r, c, resumed->hf, resumed->checkpoint + "/manifest.json \"model\"", "run.resume");
  } else if (!c.model.hf_config.empty()) {
    read_hf_config(r, c);
  } else if (g.rope()) {
    if (g.n_kv_head > g.n_head || (g.n_kv_head > 0 && g.n_head % g.n_kv_head != 0)) {
      r.error("n_kv_head", cat(g.n_kv_head, " key/value heads do not divide n_head ", g.n_head));
    }
    if (g.d_head == 0 && g.d_model % g.n_head != 0) {
      r.error("d_model", cat(g.d_model, " is not divisible by n_head ", g.n_head, " (or set model.head_dim)"));
    } else if (absl::StatusOr<RopeFreqs> f = rope_frequencies(g.head_dim(), g.rope_theta, g.rope_scaling); !f.ok()) {
      r.error(g.d_head > 0 ? "head_dim" : "rope_theta", std::string(f.status().message()));
    }
  } else {
    for (std::string_view key : kRopeFamilyKeys) {
      if (r.has(key)) {
        r.error(key, cat("is a setting of the families with RoPE; set model.arch to one of them (\"llama\", "
                         "\"mistral\", \"qwen2\", \"qwen3\", \"gemma\", "
                         "\"mixtral\", \"qwen2_moe\", \"qwen3_moe\") or remove it"));
      }
    }
    if (g.d_model % g.n_head != 0) r.error("d_model", cat(g.d_model, " is not divisible by n_head ", g.n_head));
  }
  if (g.seq_len > g.positions()) {
    r.error("seq_len", cat(g.seq_len, " is longer than the model's ", g.positions(), " positions (",
                           c.model.hf_source.is_null() ? "model.max_positions" : "max_position_embeddings", ")"));
  }
  if (g.rope() && g.dropout > 0.0f) {
    r.error("dropout", cat("the ", model_family(g.arch).display, " family has no dropout sites here (Hugging Face's "
                           "attention_dropout is 0)"));
  }
  if (resumed && !resumed->hf.is_null() && !from_checkpoint && r.diagnostics().errors.empty()) {
    check_resumed_model(r, c, *resumed);
  }
  check_moe_model(r, g, c.ep_size);  // moe_section.cc
  if (r.diagnostics().errors.empty()) parse_lora_section(r.section("lora"), c);  // on the model read above
  r.mark_known("lora");
  r.finish();
}

void parse_run(ConfigReader r, RunConfig& c) {
  read_declared_keys(r, c);
  RunSection& run = c.run;
  // "auto" is a value here (the newest checkpoint), not DeepSpeed's "use the default".
  const Json& resume = r.get_raw("resume");
  if (resume.is_string()) run.resume = resume.get<std::string>();
  else if (!resume.is_null()) r.error("resume", cat("expected a directory or \"auto\", got ", resume.dump()));
  r.set_effective("resume", run.resume);
  if (run.resume == "auto" && run.save_dir.empty()) r.error("resume", "\"auto\" needs run.save_dir (--save-dir)");
  // run.init_from beside run.resume: the checkpoint wins where there is one
  // (its weights, optimizer state and step; the model must be the same), as
  // the Hugging Face Trainer's model_name_or_path beside
  // resume_from_checkpoint. So one launch command starts and restarts a job.
  r.finish();
}

// What evaluation asks of the other sections, once they are read.
void check_evaluation(ConfigReader& root, RunConfig& c) {
  if (c.run.eval_every > 0 && c.data.val_path.empty()) {
    root.error("run.eval_every", cat(c.run.eval_every, " needs data.val_path (the validation tokens, same formats as "
                                     "data.path); set it or set run.eval_every to 0"));
  } else if (c.run.eval_every == 0 && !c.data.val_path.empty()) {
    root.diagnostics().warnings.push_back(
        cat("data.val_path is set but run.eval_every is 0: no evaluation (set run.eval_every N to evaluate every N "
            "steps and at the end)"));
  }
}

// DeepSpeed's batch-size rule (runtime/config.py): give any two of the triple
// (or one of train_batch_size / micro batch), derive the rest with floor
// division, then check the product.
absl::Status resolve_batch(ConfigReader& r, int world, RunConfig& out) {
  // "auto" (the HF Trainer's placeholder) counts as not given: the value is
  // derived from the others when they allow it, else the error below says
  // which value to set.
  std::vector<std::string> autos;
  auto read = [&](std::string_view key) -> std::optional<int64_t> {
    r.mark_known(key);
    if (!r.has(key)) return std::nullopt;
    const Json& v = r.get_raw(key);
    if (v.is_null()) return std::nullopt;
    if (v.is_string() && v.get<std::string>() == "auto") {
      autos.emplace_back(key);
      return std::nullopt;
    }
    const size_t errors = r.diagnostics().errors.size();
    const int64_t n = r.get_int(key, 0);
    if (r.diagnostics().errors.size() > errors) return std::nullopt;  // not an integer: said already
    return n;
  };
  std::optional<int64_t> tb = read("train_batch_size");
  std::optional<int64_t> mb = read("train_micro_batch_size_per_gpu");
  std::optional<int64_t> gas = read("gradient_accumulation_steps");
  // Each given value on its own first (DeepSpeed's messages), naming its key.
  if (tb && *tb <= 0) r.error("train_batch_size", cat("Train batch size: ", *tb, " has to be greater than 0"));
  if (mb && *mb <= 0)
    r.error("train_micro_batch_size_per_gpu", cat("Micro batch size per gpu: ", *mb, " has to be greater than 0"));
  if (gas && *gas <= 0)
    r.error("gradient_accumulation_steps", cat("Gradient accumulation steps: ", *gas, " has to be greater than 0"));
  // Upper limits, so that a typo (1e15) is a config error rather than a run
  // that never ends or an allocation that cannot succeed.
  auto too_large = [&](std::string_view key, const std::optional<int64_t>& v, int64_t limit, std::string_view how) {
    if (v && *v > limit) r.error(key, cat(*v, " is above the limit ", limit, how));
  };
  too_large("train_batch_size", tb, kMaxBatchSamples, " samples per optimizer step");
  too_large("train_micro_batch_size_per_gpu", mb, kMaxBatchSamples, " samples per micro-batch");
  too_large("gradient_accumulation_steps", gas, kMaxAccumulationSteps, " micro-batches per optimizer step");
  if (!r.diagnostics().errors.empty()) return absl::OkStatus();
  // micro x accumulation x world must be a number, not an overflow.
  if (mb && gas) {
    int64_t product = 0;
    if (__builtin_mul_overflow(*mb, *gas, &product) || __builtin_mul_overflow(product, int64_t{world}, &product)) {
      r.error("train_micro_batch_size_per_gpu",
              cat(*mb, " x gradient_accumulation_steps ", *gas, " x ", world, " ranks overflows a 64-bit integer"));
      return absl::OkStatus();
    }
  }
  std::vector<std::string> derived;
  if (tb && mb && gas) {
  } else if (tb && mb) {
    gas = *tb / *mb / world, derived.push_back("gradient_accumulation_steps");
  } else if (tb && gas) {
    mb = *tb / world / *gas, derived.push_back("train_micro_batch_size_per_gpu");
  } else if (mb && gas) {
    tb = *mb * *gas * world, derived.push_back("train_batch_size");
  } else if (tb) {
    gas = 1, mb = *tb / world;
    derived = {"gradient_accumulation_steps", "train_micro_batch_size_per_gpu"};
  } else if (mb) {
    gas = 1, tb = *mb * world;
    derived = {"gradient_accumulation_steps", "train_batch_size"};
  } else {
    r.error(autos.empty() ? "train_batch_size" : autos.front(),
            autos.empty() ? "either train_batch_size or train_micro_batch_size_per_gpu needs to be provided"
                          : "is \"auto\" and nothing to derive it from: set train_micro_batch_size_per_gpu "
                            "(or train_batch_size) to a number");
    return absl::OkStatus();
  }
  // A derived value past its limit names the keys it came from.
  const std::string from = cat(" (derived from ", tb && !absl::c_linear_search(derived, "train_batch_size")
                                                      ? cat("train_batch_size ", *tb, ", ") : "",
                               "train_micro_batch_size_per_gpu and gradient_accumulation_steps over ", world,
                               world == 1 ? " rank)" : " ranks)");
  if (absl::c_linear_search(derived, "gradient_accumulation_steps") && *gas > kMaxAccumulationSteps) {
    r.error("gradient_accumulation_steps",
            cat(*gas, " is above the limit ", kMaxAccumulationSteps, " micro-batches per optimizer step", from,
                ": lower train_batch_size or raise train_micro_batch_size_per_gpu"));
  } else if (absl::c_linear_search(derived, "train_batch_size") && *tb > kMaxBatchSamples) {
    r.error("train_batch_size", cat(*tb, " is above the limit ", kMaxBatchSamples, " samples per optimizer step", from));
  } else if (absl::c_linear_search(derived, "train_micro_batch_size_per_gpu") && *mb > kMaxBatchSamples) {
    r.error("train_micro_batch_size_per_gpu",
            cat(*mb, " is above the limit ", kMaxBatchSamples, " samples per micro-batch", from));
  } else if (*mb <= 0 && absl::c_linear_search(derived, "train_micro_batch_size_per_gpu")) {
    // Floor division left nothing per rank: say the division and the fix.
    r.error("train_micro_batch_size_per_gpu",
            cat("train_batch_size ", *tb, " / (gradient_accumulation_steps ", *gas, " x ", world,
                world == 1 ? " rank" : " ranks", ") is 0 samples per rank: raise train_batch_size to at least ",
                *gas * world, ", lower gradient_accumulation_steps, or use fewer ranks"));
  } else if (*gas <= 0 && absl::c_linear_search(derived, "gradient_accumulation_steps")) {
    r.error("gradient_accumulation_steps",
            cat("train_batch_size ", *tb, " / (train_micro_batch_size_per_gpu ", *mb, " x ", world,
                world == 1 ? " rank" : " ranks", ") is 0 micro-batches per step: raise train_batch_size to at least ",
                *mb * world, ", lower train_micro_batch_size_per_gpu, or use fewer ranks"));
  } else if (*tb <= 0) r.error("train_batch_size", cat("Train batch size: ", *tb, " has to be greater than 0"));
  else if (*mb <= 0)
    r.error("train_micro_batch_size_per_gpu", cat("Micro batch size per gpu: ", *mb, " has to be greater than 0"));
  else if (*gas <= 0)
    r.error("gradient_accumulation_steps",
            cat("Gradient accumulation steps: ", *gas, " has to be greater than 0"));
  else if (*tb != *mb * *gas * world)
    r.error("train_batch_size",
            cat("Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * "
                "gradient_acc_step * world_size ",
                *tb, " != ", *mb, " * ", *gas, " * ", world));
  out.train_batch_size = *tb;
  out.engine.micro_batch_size = *mb;
  out.engine.gradient_accumulation_steps = *gas;
  r.set_effective("train_batch_size", *tb);
  r.set_effective("train_micro_batch_size_per_gpu", *mb);
  r.set_effective("gradient_accumulation_steps", *gas);
  for (const std::string& k : derived) r.set_derived(k, k == "train_batch_size" ? *tb : k == "gradient_accumulation_steps" ? *gas : *mb);
  return absl::OkStatus();
}

// What the pipeline asks of the other sections, once they are read.

// "mesh": the order of the mesh's axes. The sizes come from
// tensor_parallel.autotp_size, model.ep_size, pipeline.stages and the world
// (dp takes the rest); cp is 1. With experts split and the default order,
// the ep axis goes inside dp: "tp-ep-dp-pp", DeepSpeed's expert groups of
// consecutive data-parallel ranks.
void parse_mesh_section(ConfigReader r, RunConfig& c) {
  read_declared_keys(r, c);
  if (c.expert_size() > 1 && c.mesh_order == kDefaultMeshOrder) c.mesh_order = "tp-ep-dp-pp";
  if (absl::Status s = MeshLayout::check_order(c.mesh_order); !s.ok()) {
    r.error("order", std::string(s.message()));
  } else if (r.diagnostics().errors.empty()) {
    const absl::StatusOr<MeshLayout> layout = MeshLayout::create(c.mesh_order, c.mesh_sizes(), c.world_size);
    if (!layout.ok()) {
      r.error("order", cat(layout.status().message(), " (tp is tensor_parallel.autotp_size, ep model.ep_size, pp "
                                                      "pipeline.stages, dp the ranks they leave)"));
    }
  }
  r.finish();
}

void check_pipeline_composition(ConfigReader& root, RunConfig& out) {
  const PipelineConfig& p = out.engine.pipeline;
  if (p.stages == 1) return;
  if (out.engine.zero.stage == ZeroStage::k3) {
    root.error("zero_optimization.stage",
               cat("3 with pipeline.stages ", p.stages, ": refused, as DeepSpeed does (stage 3 gathers parameters by "
                   "replaying one recorded module order, and the schedule interleaves micro-batches); use 0, 1 or 2"));
  }
  if (p.activation_checkpoint_interval > 0 && out.engine.activation_checkpointing.number_checkpoints) {
    root.error("activation_checkpointing.number_checkpoints",
               cat(*out.engine.activation_checkpointing.number_checkpoints, " and pipeline.activation_checkpoint_interval ",
                   p.activation_checkpoint_interval, " both say how blocks are checkpointed: keep one"));
  }
  const int64_t m = out.engine.gradient_accumulation_steps;
  if (p.num_layers_per_virtual_stage > 0 && out.model.gpt.n_layer % (p.num_layers_per_virtual_stage * p.stages) == 0) {
    const int chunks = static_cast<int>(out.model.gpt.n_layer / (p.num_layers_per_virtual_stage * p.stages));
    const std::string key = cat(p.num_layers_per_virtual_stage, " (", chunks, " model chunks per stage): ");
    // (Only once the batch resolved: its errors leave gradient_accumulation_steps at 1.)
    const absl::Status ok = check_interleaving(p.schedule, p.stages, static_cast<int>(m), chunks);
    if (!ok.ok() && root.diagnostics().errors.empty()) {
      root.error("pipeline.num_layers_per_virtual_stage", cat(key, ok.message()));
    }
    if (chunks > 1 && out.engine.activation_checkpointing.number_checkpoints) {
      root.error("pipeline.num_layers_per_virtual_stage",
                 cat(key, "activation_checkpointing.number_checkpoints splits a stage's blocks as one run, and the "
                          "chunks' blocks are not one; use pipeline.activation_checkpoint_interval"));
    }
    return;  // the bubble is (P - 1) / (v M): the warning below is 1F1B's without chunks
  }
  if (p.schedule == PipelineScheduleKind::k1F1B && m < p.stages) {
    root.diagnostics().warnings.push_back(absl::StrFormat(
        "pipeline: gradient_accumulation_steps %d micro-batches for %d stages: 1F1B never reaches its steady state "
        "and each stage idles (P - 1) / (M + P - 1) = %.0f%% of the step; use at least %d micro-batches (4 P keeps the "
        "bubble under 20%%)",
        m, p.stages, 100.0 * ideal_bubble_fraction(p.stages, static_cast<int>(m)), p.stages));
  }
}

// number_checkpoints splits each rank's blocks into segments: at most as
// many as the fewest blocks a rank holds (the model's, or the smallest
// pipeline stage's). A config error, before anything is built.
void check_checkpoint_segments(ConfigReader& root, const RunConfig& out) {
  const std::optional<int64_t>& k = out.engine.activation_checkpointing.number_checkpoints;
  const PipelineConfig& p = out.engine.pipeline;
  if (!k || p.num_layers_per_virtual_stage > 0) return;  // interleaving: check_pipeline_composition's
  int64_t blocks = out.model.gpt.n_layer;
  for (int s = 0; p.stages > 1 && s < p.stages; ++s) {
    const absl::StatusOr<PipelineStage> stage = gpt_pipeline_stage(out.model.gpt, s, p.stages, p.partition_method);
    if (!stage.ok()) return;  // the pipeline's own error says why
    blocks = std::min(blocks, stage->layers.size);
  }
  if (*k > blocks) {
    root.error("activation_checkpointing.number_checkpoints",
               p.stages > 1 ? cat(*k, " must be between 1 and the smallest pipeline stage's ", blocks, " blocks")
                            : cat(*k, " must be between 1 and the model's ", blocks, " blocks"));
  }
}

}  // namespace

absl::StatusOr<RunConfig> parse_run_config(const Json& config, const ConfigOptions& options) {
  ConfigDiagnostics diag;
  diag.allow_unknown_keys = options.allow_unknown_keys;
  diag.autos = options.auto_filled;
  ConfigReader root(config, diag);
  root.set_unknown_keys(UnknownKeys::kWarnUnlessNearMiss);  // DeepSpeed ignores unknown top-level keys
  RunConfig out;
  out.world_size = options.world_size;

  parse_run(root.section("run"), out);  // first: run.init_from and run.resume may say what the model is
  std::optional<CheckpointModel> resumed;
  if (options.resumed_model != nullptr && !out.run.resume.empty()) {
    absl::StatusOr<std::optional<CheckpointModel>> found = options.resumed_model(out.run);
    if (found.ok()) resumed = *std::move(found);
    else root.diagnostics().errors.push_back(cat("run.resume: ", found.status().message()));
  }
  parse_model(root.section("model"), out, resumed);
  parse_data_section(root.section("data"), out);  // after run and model: run.init_from may bring the tokenizer
  // DeepSpeed's monitors (pydantic models there: unknown keys fail).
  for (const char* monitor : {"csv_monitor", "tensorboard", "flops_profiler", "comms_logger"}) {
    ConfigReader m = root.section(monitor);
    read_declared_keys(m, out);
    m.finish();
  }
  // job_name is one directory under output_path: a separator or ".." would
  // put the files somewhere else.
  for (const MonitorSection* m : {&out.csv_monitor, &out.tensorboard}) {
    const std::string& name = m->job_name;
    if (name.find_first_of(std::string_view("/\\\0", 3)) == std::string::npos && name != "..") continue;
    root.error(cat(m == &out.csv_monitor ? "csv_monitor" : "tensorboard", ".job_name"),
               cat("\"", name, "\" is not a directory name: job_name is the one directory made under output_path, "
                   "so it cannot hold \"/\" or \"\\\" or be \"..\"; put the directories in output_path"));
  }
  if (out.comms_logger.enabled && !out.comms_logger.prof_all && out.comms_logger.prof_ops.empty()) {
    root.warn("comms_logger.prof_ops",
              "is empty and comms_logger.prof_all is false: no collective is recorded (list ops, or set prof_all)");
  }
  // DeepSpeed's AutoTP section (a pydantic model there: unknown keys fail): before the batch, whose
  // triple counts data-parallel ranks only.
  parse_tensor_parallel_section(root.section("tensor_parallel"), out);
  parse_pipeline_section(root.section("pipeline"), out);
  parse_mesh_section(root.section("mesh"), out);
  if (out.world_size % (out.tensor_size() * out.pipeline_size()) != 0 ||
      out.pipeline_size() > out.model.gpt.n_layer) {
    ZE_RETURN_IF_ERROR(diag.status());  // the sections' errors say why
  }
  parse_elasticity_section(root.section("elasticity"), out);
  if (!resolve_elastic_batch(root, out)) ZE_RETURN_IF_ERROR(resolve_batch(root, out.data_size(), out));
  read_declared_keys(root, out);
  const bool prescale = out.switches.prescale_gradients;
  const double predivide = out.switches.gradient_predivide_factor;
  const bool sum_op = out.switches.gradient_allreduce_op == "sum";
  // DeepSpeed reads these sections with dict lookups: unknown keys there are
  // ignored (but not in their params, which go to constructors as kwargs).
  parse_optimizer_section(root.section("optimizer", UnknownKeys::kWarnUnlessNearMiss), out);
  parse_scheduler_section(root.section("scheduler", UnknownKeys::kWarnUnlessNearMiss), out);
  parse_precision_sections(root, out);
  parse_zero_section(root, out);
  // DeepSpeed's gradient averaging: divide by the data-parallel size before
  // communicating (or by gradient_predivide_factor with prescale_gradients,
  // the rest after); "sum" does not average.
  const ZeroConfig& z = out.engine.zero;
  if (!out.switches.communication_data_type.empty()) {
    const std::string& comm = out.switches.communication_data_type;
    const std::string grad(dtype_name(out.engine.gradient_dtype()));
    if (comm != grad) {
      root.error("communication_data_type",
                 cat("\"", comm, "\" differs from the gradient dtype ", grad,
                     "; gradients are reduced in their own dtype (set data_types.grad_accum_dtype to \"", comm,
                     "\" to communicate in it)"));
    }
  }
  if (absl::Status s = check_optimizer_precision(out.engine.optimizer_precision, stage_number(z.stage), out.engine.param_dtype,
                                                 out.engine.gradient_dtype());
      !s.ok()) {
    root.diagnostics().errors.emplace_back(s.message());
  }
  if (z.stage >= ZeroStage::k2 && z.reduce_scatter && (prescale || predivide != 1.0)) {
    root.error(prescale ? "prescale_gradients" : "gradient_predivide_factor",
               "must be false / 1.0 with ZeRO stage 2 or 3 and reduce_scatter (as in DeepSpeed)");
  }
  if (sum_op && z.stage == ZeroStage::k3) root.error("gradient_allreduce_op", "\"sum\" is not supported with ZeRO stage 3 (as in DeepSpeed)");
  const double world = out.data_size();  // DeepSpeed averages over the data-parallel group
  if (sum_op) {
    out.engine.pre_divide = 1.0;
  } else if (prescale) {
    out.engine.pre_divide = predivide;
    out.engine.post_reduce_scale = static_cast<float>(predivide / world);
  } else {
    out.engine.pre_divide = world;
  }
  parse_aio_section(root.section("aio", UnknownKeys::kWarnUnlessNearMiss), out);
  parse_activation_checkpointing_section(root.section("activation_checkpointing", UnknownKeys::kWarnUnlessNearMiss),
                                         out);
  parse_checkpoint_section(root.section("checkpoint", UnknownKeys::kWarnUnlessNearMiss), out);
  check_pipeline_composition(root, out);
  check_checkpoint_segments(root, out);
  check_evaluation(root, out);
  check_lora_composition(root, out);
  parse_unsupported_feature_sections(root);
  root.finish();
  ZE_RETURN_IF_ERROR(diag.status());
  // Every "auto" shows what it became.
  for (const std::string& path : diag.autos) {
    if (!json_at_path(diag.effective, path).is_null()) diag.derived.insert(path);
  }
  out.effective = diag.effective;
  out.derived_keys.assign(diag.derived.begin(), diag.derived.end());
  out.warnings = diag.warnings;
  return out;
}

std::string format_effective_config(const RunConfig& config) {
  // Plain JSON (any parser reads it); the keys the program derived are listed
  // under kDerivedKeysKey, last (the config reader ignores that key).
  Json out = config.effective;
  Json derived = Json::array();
  for (const std::string& key : config.derived_keys) derived.push_back(key);
  out[std::string(kDerivedKeysKey)] = derived;
  return out.dump(2) + "\n";
}

absl::StatusOr<Json> load_merged_config(const std::vector<std::string>& files,
                                        const std::vector<std::string>& overrides) {
  std::vector<ConfigOverride> sets;
  for (const std::string& o : overrides) sets.push_back({o, "--set"});
  return load_layered_config(files, sets);
}

namespace config_keys {

// ZeroEngine's sections (model, data, run) and DeepSpeed's top-level keys
// (config_schema.h).
std::vector<ConfigKey> run_config_keys() {
  std::vector<ConfigKey> k;
  // ---- ZeroEngine's sections.
  k.push_back(text_choice("model.type", ZE_FIELD(model.type), {"gpt"}, "the network (a decoder-only transformer)"));
  k.push_back(choice("model.arch", ZE_FIELD(model.gpt.arch), family_choices(),
                     "the family: GPT-2, or Llama (RMSNorm, RoPE, SwiGLU, grouped-query attention), Mistral "
                     "(Llama's layers, no sliding windows), Qwen2 (Llama with q/k/v biases), Qwen3 (Llama with "
                     "q/k norms), Gemma (RMSNorm (1+w), embeddings x sqrt(d_model), GeGLU, tied head); mixtures of "
                     "experts (model.num_experts): Mixtral (Mistral's attention), Qwen2-MoE (Qwen2's, a shared "
                     "expert), Qwen3-MoE (Qwen3's)"));
  k.push_back(text("model.hf_config", ZE_FIELD(model.hf_config),
                   "a Hugging Face config.json (gpt2, llama, mistral, qwen2, qwen3, gemma, mixtral, qwen2_moe, "
                   "qwen3_moe) the architecture is read "
                   "from; the other architecture keys may not be set beside it"));
  k.push_back(integer(kLayerLimit.key, ZE_FIELD(model.gpt.n_layer), kLayerLimit.min, kLayerLimit.max,
                      "transformer blocks"));
  k.push_back(integer(kHeadLimit.key, ZE_FIELD(model.gpt.n_head), kHeadLimit.min, kHeadLimit.max,
                      "attention heads (divide d_model)"));
  k.push_back(integer(kWidthLimit.key, ZE_FIELD(model.gpt.d_model), kWidthLimit.min, kWidthLimit.max,
                      "hidden width"));
  k.push_back(integer(kVocabLimit.key, ZE_FIELD(model.gpt.vocab_size), kVocabLimit.min, kVocabLimit.max,
                      "vocabulary (token ids must be below it)"));
  k.push_back(integer(kSeqLenLimit.key, ZE_FIELD(model.gpt.seq_len), kSeqLenLimit.min, kSeqLenLimit.max,
                      "sequence length"));
  k.push_back(integer(kPositionsLimit.key, ZE_FIELD(model.gpt.max_positions), kPositionsLimit.min,
                      kPositionsLimit.max,
                      "GPT-2's position table rows / Llama's max_position_embeddings (0: seq_len)"));
  k.push_back(integer(kKvHeadLimit.key, ZE_FIELD(model.gpt.n_kv_head), kKvHeadLimit.min, kKvHeadLimit.max,
                      "RoPE families: key/value heads, dividing n_head (0: n_head; fewer: grouped-query attention)"));
  k.push_back(integer(kHeadDimLimit.key, ZE_FIELD(model.gpt.d_head), kHeadDimLimit.min, kHeadDimLimit.max,
                      "RoPE families: an attention head's width (0: d_model / n_head; the attention is n_head "
                      "head_dim wide)"));
  k.push_back(integer(kFfnWidthLimit.key, ZE_FIELD(model.gpt.d_ff), kFfnWidthLimit.min, kFfnWidthLimit.max,
                      "RoPE families: the gated MLP's width (0: 8/3 d_model rounded up to a multiple of 256)"));
  k.push_back(number("model.norm_eps", ZE_FIELD(model.gpt.norm_eps), kPositive, "RoPE families: RMSNorm's eps"));
  k.push_back(number("model.rope_theta", ZE_FIELD(model.gpt.rope_theta), kPositive, "RoPE families: the RoPE base"));
  k.push_back(boolean("model.tie_word_embeddings", ZE_FIELD(model.gpt.tie_word_embeddings),
                      "RoPE families: the LM head is the token table (GPT-2's always is)"));
  k.push_back(number("model.logit_softcap", ZE_FIELD(model.gpt.logit_softcap), kNonNegative,
                     "the logits as cap tanh(logits / cap) (Gemma 2's final_logit_softcapping; 0: none)"));
  for (ConfigKey& key : moe_keys()) k.push_back(std::move(key));  // moe_section.cc
  k.push_back(number("model.dropout", ZE_FIELD(model.gpt.dropout), NumberRange::unit_open(),
                     "GPT-2's dropout (embeddings, attention and MLP outputs); masks are a hash of "
                     "(run.seed, layer, global sample, position), the same on any number of ranks"));
  k.push_back(text_list("model.freeze", ZE_FIELD(model.freeze),
                        "parameters that do not train (no gradients, no optimizer state): regular expressions, each "
                        "matching whole dotted names (\"wte\\\\.weight\", \"h\\\\.0\\\\..*\") and each matching some "
                        "parameter"));
  for (ConfigKey& key : lora_keys()) k.push_back(std::move(key));  // lora_section.cc
  for (ConfigKey& key : data_keys()) k.push_back(std::move(key));  // data_section.cc
  k.push_back(integer("run.steps", ZE_FIELD(run.steps), 0, int64_t{1} << 40,
                      "optimizer steps in total (counting those before a resume)"));
  k.push_back(text("run.metrics", ZE_FIELD(run.metrics), "JSON-lines file, one object per optimizer step"));
  k.push_back(text("mesh.order", ZE_FIELD(mesh_order),
                   "the mesh's axes, fastest-varying over world ranks first, joined by '-' (Megatron's order string): "
                   "tp (tensor_parallel.autotp_size), cp (context), ep (expert), dp (data: the ranks the others "
                   "leave), pp (pipeline.stages); any subset with every axis of size > 1. \"tp-dp-pp\" keeps a tensor "
                   "group's ranks adjacent (one node), \"tp-pp-dp\" a pipeline's, \"tp-cp-ep-dp-pp\" is Megatron's"));
  k.push_back(text("run.save_dir", ZE_FIELD(run.save_dir), "checkpoint directory (\"\": no checkpoints)"));
  k.push_back(integer("run.save_every", ZE_FIELD(run.save_every), 0, kMax,
                      "save every N optimizer steps (0: only at the end)"));
  k.push_back(integer("run.keep", ZE_FIELD(run.keep), 0, kMax, "keep the newest N checkpoints (0: all)"));
  k.push_back(text("run.resume", ZE_FIELD(run.resume),
                   "a checkpoint directory, or \"auto\" (save_dir's newest, if any): its model, weights, optimizer "
                   "state and step")
                  .read_by_code());
  k.push_back(text("run.init_from", ZE_FIELD(run.init_from),
                   "a Hugging Face model directory (its config.json, weights and tokenizer files) or a safetensors "
                   "file to initialise the weights from; a checkpoint run.resume finds wins"));
  k.push_back(integer("run.seed", ZE_FIELD(engine.seed), 0, kMax, "parameter initialisation and dropout seed"));
  k.push_back(text_choice("run.backend", ZE_FIELD(run.backend), {"cpu", "cuda"},
                          "where ops run (cuda: one GPU per rank, the node-local rank's)"));
  k.push_back(integer("run.nonfinite_steps_allowed", ZE_FIELD(run.nonfinite_steps_allowed), 0, INT32_MAX,
                      "consecutive steps with inf/NaN gradients or loss skipped before the run stops (fp32, bf16)"));
  k.push_back(integer("run.eval_every", ZE_FIELD(run.eval_every), 0, kMax,
                      "evaluate every N optimizer steps and at the end (0: never; needs data.val_path)"));
  k.push_back(integer("run.eval_steps", ZE_FIELD(run.eval_steps), 1, kMax,
                      "validation batches per evaluation (fixed: the same batches every time), each "
                      "train_micro_batch_size_per_gpu x data-parallel ranks sequences"));
  k.push_back(number("run.peak_tflops", ZE_FIELD(run.peak_tflops), kNonNegative,
                     "one rank's peak TFLOP/s, for MFU on the progress line (0: the CPU's peak from its ISA and clock; "
                     "on a GPU, the rate measured at start on the model's MLP GEMM; --peak-tflops)"));
  // ---- DeepSpeed's monitors.
  for (const char* m : {"csv_monitor", "tensorboard"}) {
    const bool csv = std::string_view(m) == "csv_monitor";
    auto section = [csv](RunConfig& c) -> MonitorSection& { return csv ? c.csv_monitor : c.tensorboard; };
    k.push_back(boolean(cat(m, ".enabled"), [section](RunConfig& c) -> auto& { return section(c).enabled; },
                        csv ? "one CSV file per metric (DeepSpeed's layout: output_path/job_name/Train_Samples_train_loss.csv)"
                            : "TensorBoard event files in output_path/job_name/"));
    k.push_back(text(cat(m, ".output_path"), [section](RunConfig& c) -> auto& { return section(c).output_path; },
                     "the directory job_name is made in (\"\": the working directory)"));
    k.push_back(text(cat(m, ".job_name"), [section](RunConfig& c) -> auto& { return section(c).job_name; },
                     "the run's directory under output_path"));
  }

  // ---- DeepSpeed's flops_profiler (runtime/tools/flops_profile_report.h).
  k.push_back(boolean("flops_profiler.enabled", ZE_FIELD(flops_profiler.enabled),
                      "print one step's per-module GEMM FLOPs and forward/backward/recompute latency (measured)"));
  k.push_back(integer("flops_profiler.profile_step", ZE_FIELD(flops_profiler.profile_step), 0, kMax,
                      "the step profiled: the one run when DeepSpeed's global_steps equals it (1: the second step)"));
  k.push_back(integer("flops_profiler.module_depth", ZE_FIELD(flops_profiler.module_depth), -1, 1000,
                      "deepest module level shown (-1: all)"));
  k.push_back(integer("flops_profiler.top_modules", ZE_FIELD(flops_profiler.top_modules), 1, 1000,
                      "modules listed per depth for params, FLOPs and latency"));
  k.push_back(boolean("flops_profiler.detailed", ZE_FIELD(flops_profiler.detailed),
                      "also print the module tree with every module's figures"));
  ConfigKey profile_file = text("flops_profiler.output_file", ZE_FIELD(flops_profiler.output_file),
                                "write the profile to this file (null: the console; stage s > 0 of a pipeline: "
                                "FILE.stage<s>)");
  profile_file.optional = true;
  k.push_back(profile_file.shown("null"));
  k.push_back(accepted("flops_profiler.recompute_fwd_factor", KeyKind::kNumber, 0.0,
                       "accepted; no effect: the recompute is measured as its own phase, not estimated"));

  // ---- DeepSpeed's comms_logger (comm/comm_log.h).
  k.push_back(boolean("comms_logger.enabled", ZE_FIELD(comms_logger.enabled),
                      "record every collective's size and latency; rank 0 prints the summary at the end"));
  k.push_back(boolean("comms_logger.verbose", ZE_FIELD(comms_logger.verbose),
                      "also print each collective (rank 0's; listed after each step)"));
  k.push_back(boolean("comms_logger.prof_all", ZE_FIELD(comms_logger.prof_all),
                      "record every op (false: only prof_ops)"));
  k.push_back(choice_list("comms_logger.prof_ops", ZE_FIELD(comms_logger.prof_ops), comm_op_names(),
                          "the ops recorded when prof_all is false"));
  k.push_back(accepted("comms_logger.debug", KeyKind::kBool, false,
                       "accepted; no effect (the summary names each op's group: data, tensor, pipeline)"));

  // ---- DeepSpeed's top level.
  k.push_back(integer("train_batch_size", ZE_FIELD(train_batch_size), 1, kMax,
                      "global batch: micro batch x accumulation x ranks (give one or two of the three)")
                  .shown("derived")
                  .read_by_code());
  k.push_back(integer("train_micro_batch_size_per_gpu", ZE_FIELD(engine.micro_batch_size), 1, kMax,
                      "samples per rank per forward")
                  .shown("derived")
                  .read_by_code());
  k.push_back(integer("gradient_accumulation_steps", ZE_FIELD(engine.gradient_accumulation_steps), 1, kMax,
                      "micro-steps per optimizer step")
                  .shown("derived")
                  .read_by_code());
  for (ConfigKey& key : elasticity_keys()) k.push_back(std::move(key));  // elasticity_section.cc
  k.push_back(number("gradient_clipping", ZE_FIELD(engine.gradient_clipping), kNonNegative,
                     "global L2-norm clipping (DeepSpeed's formula); 0 disables"));
  k.push_back(integer("steps_per_print", ZE_FIELD(steps_per_print), 1, kMax, "progress line period (steps)"));
  k.push_back(boolean("wall_clock_breakdown", ZE_FIELD(wall_clock_breakdown),
                      "forward/backward/step times at each print"));
  k.push_back(boolean("memory_breakdown", ZE_FIELD(memory_breakdown), "every category and tier at each print"));
  k.push_back(boolean("dump_state", ZE_FIELD(dump_state), "print the effective config at start"));
  k.push_back(boolean("prescale_gradients", ZE_FIELD(switches.prescale_gradients),
                      "divide gradients by gradient_predivide_factor before the reduction, the rest after"));
  k.push_back(number("gradient_predivide_factor", ZE_FIELD(switches.gradient_predivide_factor), kPositive,
                     "the divisor before the reduction with prescale_gradients"));
  k.push_back(text_choice("gradient_allreduce_op", ZE_FIELD(switches.gradient_allreduce_op), {"mean", "sum"},
                          "\"sum\" skips averaging gradients over ranks (not at stage 3)"));
  ConfigKey comm = text_choice("communication_data_type", ZE_FIELD(switches.communication_data_type),
                               {"fp32", "fp16", "bf16"},
                               "must equal the gradient dtype (gradients are reduced in their own dtype)");
  comm.optional = true;
  k.push_back(comm.shown("gradient dtype"));
  k.push_back(accepted("zero_allow_untested_optimizer", KeyKind::kBool, false,
                       "accepted; every optimizer here is one ZeRO supports"));
  k.push_back(accepted("zero_force_ds_cpu_optimizer", KeyKind::kBool, true, "accepted; no effect"));
  k.push_back(accepted("dataloader_drop_last", KeyKind::kBool, false,
                       "accepted; windows are sampled, never partial"));
  k.push_back(refused("managed_gradient_accumulation", true,
                      "the engine decides the accumulation boundary from gradient_accumulation_steps"));
  k.push_back(refused("sparse_gradients", false, "gradients are dense"));
  k.push_back(refused("disable_allgather", false, "the all-gather after the optimizer step is required"));
  k.push_back(refused("seq_parallel_communication_data_type", "fp32", "there is no sequence parallelism"));
  k.push_back(refused("sequence_parallel_size", 1,
                      "DeepSpeed-Ulysses (all-to-all over heads) is not here; Megatron's sequence parallelism is "
                      "tensor_parallel.sequence_parallel"));
  k.push_back(refused("graph_harvesting", false, "there are no CUDA graphs"));
  k.push_back(refused("use_data_before_expert_parallelism", false,
                    "expert groups are consecutive data-parallel ranks (DeepSpeed's default); mesh.order "
                    "\"tp-dp-ep-pp\" gives the other layout"));
  k.push_back(refused("log_level", "info", "ZeroEngine's log has one level"));
  return k;
}

}  // namespace config_keys

}  // namespace zero
