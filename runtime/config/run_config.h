// The whole configuration of a zero-train run: ZeroEngine's own sections
// (model, data, run) beside DeepSpeed's keys, parsed strictly (see
// config_reader.h) into typed structs. The DeepSpeed keys mean what they mean
// in DeepSpeed, with its current defaults.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/mesh_layout.h"
#include "graph/gpt.h"
#include "runtime/config/elasticity.h"
#include "runtime/config/json_file.h"
#include "runtime/engine/engine_config.h"

namespace zero {

// "model": which network to build.
struct ModelSection {
  std::string type = "gpt";
  std::string hf_config;  // a Hugging Face config.json the architecture is read from ("": none)
  GptConfig gpt;          // arch: any family of graph/model_features.h
  // The Hugging Face config.json the model came from (model.hf_config's, or
  // the resumed checkpoint's); null when the section describes it. Saved
  // with every checkpoint (hf_config_json(gpt, dtype, hf_source)) so the
  // export keeps its token ids, model_type and the keys we do not read.
  Json hf_source;
  // Parameters to freeze (graph/freeze.h's freeze_matching): regular
  // expressions over whole dotted parameter names ("wte\\.weight",
  // "h\\.0\\..*"); each must match some parameter of the model.
  std::vector<std::string> freeze;
  // "model.lora" (runtime/config/lora_section.h); the adapters' settings are gpt.lora.
  std::string lora_bias = "none";  // PEFT's bias: "none" only
  std::string lora_init_from;      // a PEFT adapter directory to start the adapters from ("": none)
};

// "data": where training tokens come from (runtime/config/data_section.h
// has the keys' rules; runtime/tools/training_data.h opens the data).
struct DataSection {
  // "text": text files, one document each, through `tokenizer` (bytes when
  // there is none and the model's vocabulary is 256); "jsonl": one document
  // per JSON line (its `jsonl_field`); "sft": prompt/completion or messages
  // examples; "bytes": bytes of files, vocabulary 256; "llmc": llm.c token shards.
  std::string format = "text";
  std::string path;              // a file, a directory, or a glob pattern
  uint64_t seed = 1234;          // sampling is a function of (seed, step, sample index)
  std::string val_path;          // validation data, same format as path ("": no evaluation)
  std::string tokenizer;         // a model directory or tokenizer file ("": run.init_from's, when it has one)
  std::string jsonl_field = "text";  // "jsonl": the field of each line that holds the document
  bool packing = false;          // "sft": several examples per row (best-fit decreasing)
  // Whether the text formats read their text through a tokenizer; "sft" and "jsonl" always do.
  bool tokenized() const { return format == "jsonl" || format == "sft" || (format == "text" && !tokenizer.empty()); }
};

// "run": the loop around the engine.
struct RunSection {
  int64_t steps = 100;    // optimizer steps (in total, counting those before a resume)
  std::string metrics;    // JSON-lines file, one object per optimizer step ("" = none)
  std::string save_dir;   // checkpoint directory ("" = no checkpoints)
  int64_t save_every = 0; // save every N optimizer steps (0: only at the end)
  int64_t keep = 0;       // keep the newest N checkpoints (0: all)
  std::string resume;     // a checkpoint directory, or "auto" (save_dir's newest if any)
  // A Hugging Face model directory (its config.json, weights and tokenizer
  // files) or a safetensors file to initialise the weights from; a run that
  // resumes a checkpoint takes the checkpoint's instead.
  std::string init_from;
  std::string backend = "cpu";  // where ops run: "cpu" or "cuda" (one GPU per rank: the node-local rank's)
  // Consecutive steps with inf/NaN gradients or loss that are skipped before
  // the run stops with an error (fp32, bf16; fp16's loss scaler has its own
  // rules). 0: stop at the first, before it updates or saves anything.
  int64_t nonfinite_steps_allowed = 0;
  // Evaluation (runtime/tools/evaluation.h): every eval_every optimizer steps
  // and at the end, the mean loss over eval_steps fixed batches of
  // data.val_path. 0: never.
  int64_t eval_every = 0;
  int64_t eval_steps = 10;
  // One device's (rank's) peak in TFLOP/s, for MFU on the progress line (0:
  // the rate this rank measures at start on the model's MLP GEMM).
  double peak_tflops = 0.0;
};

// DeepSpeed's "csv_monitor" and "tensorboard" sections (monitor/config.py):
// rank 0 writes under output_path/job_name/.
struct MonitorSection {
  bool enabled = false;
  std::string output_path;
  std::string job_name = "DeepSpeedJobName";
};

// DeepSpeed's "flops_profiler" section (profiling/config.py): one step's
// per-module FLOPs and latency (runtime/tools/flops_profile_report.h), from
// the first rank of each pipeline stage.
struct FlopsProfilerSection {
  bool enabled = false;
  int64_t profile_step = 1;   // profile the step run when global_steps == this (0-based, as DeepSpeed)
  int64_t module_depth = -1;  // -1: every level
  int64_t top_modules = 1;
  bool detailed = true;
  std::string output_file;    // "": the console
};

// DeepSpeed's "comms_logger" section (comm/config.py): every collective's
// op, size and latency (comm/comm_log.h); rank 0 prints the summary at the
// end of the run, and with verbose each op as it completes.
struct CommsLoggerSection {
  bool enabled = false;
  bool verbose = false;
  bool prof_all = true;                // every op; false: the ops in prof_ops only
  std::vector<std::string> prof_ops;  // comm_op_names()
};

// What the keys that no single engine field holds say, before
// parse_run_config's rules turn them into EngineConfig: the model dtype and
// the master precision (fp16, bf16), the gradient averaging, the
// communication dtype.
struct ConfigSwitches {
  bool fp16 = false, bf16 = false;
  bool bf16_check_grad_overflow = true;  // DeepSpeed >= 0.19.3
  bool bf16_master_weights_and_grads = false, bf16_optimizer_states = false;
  bool fp16_master_weights_and_grads = false;
  double loss_scale = 0.0;  // 0: dynamic
  bool prescale_gradients = false;
  double gradient_predivide_factor = 1.0;
  std::string gradient_allreduce_op = "mean";
  std::string grad_accum_dtype;         // "": the model dtype
  std::string communication_data_type;  // "": the gradient dtype
  std::string tag_validation = "WARN";
  // checkpoint.use_node_local_storage: each host saves to its own disk (runtime/checkpoint/checkpoint.h).
  bool use_node_local_storage = false;
};

struct RunConfig {
  ModelSection model;
  DataSection data;
  RunSection run;
  EngineConfig engine;
  ConfigSwitches switches;
  MonitorSection csv_monitor, tensorboard;
  FlopsProfilerSection flops_profiler;
  CommsLoggerSection comms_logger;
  int world_size = 1;            // processes (ranks)
  int64_t autotp_size = 0;       // tensor_parallel.autotp_size: 0 or 1, no tensor parallelism
  bool sequence_parallel = false;  // tensor_parallel.sequence_parallel (Megatron-SP; with T > 1)
  bool tp_overlap_comm = false;    // tensor_parallel.tp_overlap_comm: dx's all-reduce overlaps dW (graph/build_model.h)
  // mesh.order: the mesh's axes, fastest-varying first (comm/mesh_layout.h).
  std::string mesh_order = std::string(kDefaultMeshOrder);
  int64_t train_batch_size = 0;  // global: micro x accumulation x data-parallel size
  // DeepSpeed's "elasticity": the batch for the data-parallel size (runtime/config/elasticity_section.h).
  ElasticityConfig elasticity;
  std::vector<int64_t> elastic_valid_sizes;  // with elasticity on: the data-parallel sizes its batch allows
  // The mesh: tensor groups of tensor_size() adjacent ranks, data_size() of them.
  int tensor_size() const { return autotp_size > 1 ? static_cast<int>(autotp_size) : 1; }
  int pipeline_size() const { return engine.pipeline.stages; }
  int data_size() const { return world_size / (tensor_size() * pipeline_size()); }
  // model.ep_size: expert parallelism, groups of that many data-parallel
  // ranks splitting the experts (graph/moe.h).
  int64_t ep_size = 1;
  int expert_size() const { return static_cast<int>(ep_size); }
  // The sizes of the mesh's axes that are not 1 (dp left to the layout).
  std::map<std::string, int> mesh_sizes() const;
  int64_t steps_per_print = 10;  // DeepSpeed's default is None (no progress log); ours prints every 10
  bool wall_clock_breakdown = false;  // forward/backward/step times at each print
  bool memory_breakdown = false;      // every category and tier at each print
  bool dump_state = false;            // print the effective config at start
  Json effective;                // every key with its value in effect, for --print-config
  std::vector<std::string> derived_keys;
  std::vector<std::string> warnings;
};

// Upper limits of the batch keys: a value past them is a config error (a
// typo such as 1e15 would otherwise run for ever or ask for memory that
// cannot exist).
inline constexpr int64_t kMaxBatchSamples = int64_t{1} << 31;       // train_batch_size, micro batch
inline constexpr int64_t kMaxAccumulationSteps = int64_t{1} << 20;  // gradient_accumulation_steps

// The model a checkpoint describes, for a run that resumes it.
struct CheckpointModel {
  std::string checkpoint;  // "DIR/TAG", for messages
  Json hf;                 // its Hugging Face config.json (the manifest's "model"); null: it recorded none
};

// Finds the checkpoint run.resume names ("auto": run.save_dir's newest) and
// returns its model; nullopt when there is none to resume, or none that
// reads (restoring says why). The checkpoint layer's
// resumed_checkpoint_model (runtime/checkpoint/checkpoint.h).
using ResumedModelFinder = absl::StatusOr<std::optional<CheckpointModel>> (*)(const RunSection& run);

struct ConfigOptions {
  int world_size = 1;               // ranks (the batch triple depends on the data-parallel part of them)
  bool allow_unknown_keys = false;  // unknown keys warn instead of failing
  // Key paths a config layer gave as "auto" that an earlier layer had set
  // (ConfigSources::auto_filled()): listed as derived with the value kept.
  std::set<std::string> auto_filled = {};
  // Set (zero-train, zero-estimate): a resumed checkpoint's model is the
  // run's, and a model the config names must be the same one. Unset: the
  // config's model, unchecked.
  ResumedModelFinder resumed_model = nullptr;
};

absl::StatusOr<RunConfig> parse_run_config(const Json& config, const ConfigOptions& options);

// The effective config as JSON text, derived values marked "// derived".
std::string format_effective_config(const RunConfig& config);

// Loads and merges the files in order, then applies the --set overrides.
absl::StatusOr<Json> load_merged_config(const std::vector<std::string>& files,
                                        const std::vector<std::string>& overrides);

}  // namespace zero
