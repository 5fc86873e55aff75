// The decoder-only transformer of every family (GptConfig::arch: GPT-2,
// Llama, Mistral, Qwen2, Qwen3, Gemma; their features graph/model_features.h):
// token embeddings (GPT-2: plus learned positions; Gemma: times sqrt(d_model)),
// n_layer pre-norm transformer blocks (graph/transformer.h), a final norm
// and an LM head (GPT-2: tied to the token table; the others: tied or
// their own, as the config's tie_word_embeddings says).
// forward(ids int32 [B, T]) -> logits fp32 [B, T, vocab_size].
// Parameter names follow the families' checkpoints: GPT-2's ("wte.weight",
// "h.0.ln_1.weight", "h.0.attn.c_attn.weight", ...) and Hugging Face's
// LlamaForCausalLM's without "model." ("embed_tokens.weight",
// "layers.0.self_attn.q_proj.weight", ...); Linear weights are [out, in].
// Initialisation as GPT-2: N(0, 0.02) for weights and embeddings, the two
// residual projections per block N(0, 0.02 / sqrt(2 n_layer)), biases 0,
// norm weights 1; Llama as Hugging Face: N(0, init_std) for every weight.
// Dropout (config.dropout > 0, GPT-2) as GPT-2 places it: on the embedding output
// ("drop") and on each residual branch after its output projection
// ("h.i.attn.resid_dropout", "h.i.mlp.dropout"); none on the attention
// probabilities. With dropout 0 there are no Dropout modules at all.
//
// Tensor parallelism over a tensor group of T > 1 ranks (Megatron-LM's
// split; graph/parallel_layers.h, graph/vocab_parallel.h): the token table
// and the LM head are vocabulary-parallel, so forward returns this
// rank's vocabulary slice of the logits (logits_vocab_slice()); attention is
// split by heads (the key/value heads as evenly as can be, each with its
// group's query heads: T must not be more than the key/value heads; GPT-2's
// fused q/k/v: T must divide n_head) and the MLP by its hidden features (as
// evenly as can be); the norms and the position table are whole on
// every rank. Each parameter's initial values are its slice of the unsplit
// model's, so any T trains the same model. With sequence_parallel
// (Megatron-SP, graph/sequence_parallel.h) the embeddings' output, the
// dropouts, the norms and the residual stream are sequence shards
// [B, S/T, C] (S must divide by T); the logits are still [B, S, V/T].
#pragma once

#include <memory>
#include <optional>
#include <string_view>

#include "absl/status/statusor.h"
#include "graph/model_features.h"
#include "graph/lora.h"
#include "graph/model.h"
#include "graph/parallel_layers.h"
#include "graph/pipeline_partition.h"
#include "graph/transformer.h"
#include "kernels/rope.h"

namespace zero {

// The decoder-only transformer's families, one class as Megatron's GPTModel
// covers them; a family is a name for a row of feature flags
// (graph/model_features.h):
//   gpt2:    learned positions, pre-LN LayerNorm with biases, GELU MLP of
//            4 d_model, fused QKV with biases, LM head tied to the token table.
//   llama:   rotary positions (RoPE), RMSNorm, SwiGLU MLP of d_ff, separate
//            q/k/v projections with grouped-query attention (n_kv_head key and
//            value heads shared by n_head / n_kv_head query heads), no biases,
//            LM head tied or not (tie_word_embeddings). Parameter names are
//            Hugging Face's LlamaForCausalLM's without the "model." prefix
//            ("embed_tokens.weight", "layers.0.self_attn.q_proj.weight", ...,
//            "norm.weight", "lm_head.weight"). mistral: the same layers.
//   qwen2:   llama with biases on the q, k and v projections.
//   qwen3:   llama with an RMSNorm of each q and k head ("self_attn.q_norm",
//            "self_attn.k_norm", weight [head_dim]) before RoPE; head_dim its own.
//   gemma:   llama with RMSNorm scaling by (1 + w), embeddings times
//            sqrt(d_model), the GeGLU MLP (tanh GELU), head_dim its own.
struct GptConfig {
  ModelArch arch = ModelArch::kGpt2;
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t d_model = 768;
  int64_t vocab_size = 50304;
  int64_t seq_len = 1024;  // the training sequence length
  // GPT-2's position table rows / Llama's max_position_embeddings (what a
  // Hugging Face config.json says); 0: seq_len. seq_len may not exceed it.
  int64_t max_positions = 0;
  float dropout = 0.0f;    // probability, 0 <= p < 1 (0: no dropout layers)

  // The families with RoPE (ignored for GPT-2).
  int64_t n_kv_head = 0;        // key/value heads; 0: n_head (no grouping); must divide n_head
  int64_t d_ff = 0;             // the gated MLP's hidden width; 0: Llama's rule from d_model (see ffn_width)
  float norm_eps = 1e-5f;       // RMSNorm's eps (GPT-2's LayerNorm always uses 1e-5)
  double rope_theta = 10000.0;  // RoPE base
  RopeScaling rope_scaling{};   // Hugging Face's rope_scaling ("" type: none)
  bool tie_word_embeddings = false;  // the LM head is the token table (GPT-2: always)
  float init_std = 0.02f;       // N(0, init_std) for weights and embeddings (HF's initializer_range)
  // The width of an attention head; 0: d_model / n_head. Qwen3 and Gemma set
  // their own, so the attention is n_head * head_dim wide, not d_model.
  int64_t d_head = 0;
  // The features; unset: the family's (kModelFamilies). A Hugging Face
  // config.json that turns one on (Llama's attention_bias) sets them.
  std::optional<ModelFeatures> feature_flags = std::nullopt;
  // The logits as cap tanh(logits / cap) (Gemma 2's final_logit_softcapping); 0: none.
  float logit_softcap = 0.0f;
  // LoRA adapters on the blocks' projections (graph/lora.h); with r > 0
  // every other parameter is frozen.
  LoraConfig lora;
  // Mixture of experts (graph/moe.h; the mixtral, qwen2_moe and qwen3_moe
  // families): the sparse blocks' MLP; num_experts 0: every block dense.
  MoeConfig moe;

  ModelFeatures features() const { return feature_flags ? *feature_flags : model_family(arch).features; }
  std::string_view family_name() const { return model_family(arch).name; }
  bool rope() const { return !features().learned_positions; }
  int64_t head_dim() const { return d_head > 0 ? d_head : d_model / n_head; }
  // The attention's width, n_head * head_dim (d_model unless head_dim is its own).
  int64_t attention_width() const { return n_head * head_dim(); }
  int64_t kv_heads() const { return !features().fused_qkv && n_kv_head > 0 ? n_kv_head : n_head; }
  // The MLP's hidden width: 4 d_model (GPT-2's GELU MLP); d_ff, or when 0
  // Llama's 2/3 of 4 d_model rounded up to a multiple of 256.
  int64_t ffn_width() const;
  bool tied_head() const { return features().head_always_tied || tie_word_embeddings; }
  int64_t positions() const { return max_positions > 0 ? max_positions : seq_len; }

  // Parameters, counted exactly (tied head counted once; LoRA adapters included).
  int64_t num_parameters() const;
  // Of one transformer block (without adapters): a dense one, or block
  // `layer` (sparse when moe says so: every expert counted).
  int64_t block_parameters() const;
  int64_t block_parameters(int64_t layer) const;
  // The parameters one token's forward uses: the experts it is routed to
  // (top_k of them) and not the others; num_parameters() without MoE.
  int64_t active_parameters() const;
  // The LoRA adapters' (A and B of every adapted layer; 0 without LoRA).
  int64_t lora_parameters() const;
  // Training FLOPs per token at sequence length seq: 6 per (active) parameter plus
  // 12 n_layer attention_width seq for attention (PaLM's and llm.c's
  // accounting, with d_model the attention's width).
  double flops_per_token(int64_t seq) const;
};

// A linear layer of block `layer` as Hugging Face names it (without the
// model's prefix: "layers.0.self_attn.q_proj", "h.0.attn.c_attn"), with its
// unsplit sizes: what LoRA may adapt.
struct BlockLinear {
  std::string name;
  int64_t in = 0, out = 0;
};
std::vector<BlockLinear> block_linears(const GptConfig& config, int64_t layer);
// The prefix of Hugging Face's names before ours: "transformer." (GPT-2) or
// "model." (the others; an untied lm_head has none).
std::string_view hf_name_prefix(const GptConfig& config);

// The Llama family's fused projections (graph/transformer.h): our
// parameters "layers.<i>.self_attn.qkv_proj.weight" (and .bias) and
// "layers.<i>.mlp.gate_up_proj.weight" are Hugging Face's q_proj, k_proj and
// v_proj (gate_proj and up_proj) tensors concatenated by rows, in that order.
// A block keeps them separate layers, PEFT's modules, when LoRA adapts one
// of them.
bool fuses_qkv(const GptConfig& config, int64_t layer);
bool fuses_gate_up(const GptConfig& config, int64_t layer);
struct FusedPart {
  std::string name;  // as its own layer's parameter, our name: "layers.0.self_attn.k_proj.weight"
  int64_t rows = 0;  // its rows in the fused tensor (the first dim)
};
// The parts of our parameter `name` in row order; empty when it is not a
// fused one.
std::vector<FusedPart> fused_parts(const GptConfig& config, const std::string& name);

// One pipeline stage of P: stage i holds a contiguous run of blocks
// (`layers`; unset, even_split(n_layer, P, i): the first n_layer mod P
// stages one more), stage 0 also the embeddings and their dropout, stage
// P - 1 the final norm and the LM head, with (a tied head) a copy of the
// token table of its own ("wte.weight" / "embed_tokens.weight", the same
// initial values as stage 0's) that the head is tied to; the engine sums the two copies' gradients between the
// first and last stage (Megatron's embedding group) so they stay equal.
//
// Interleaved (pipeline.num_layers_per_virtual_stage): the stage holds v
// chunks, chunk c the blocks of virtual stage c P + index (`chunk_layers`,
// non-contiguous across chunks); the embeddings then sit in chunk 0 of stage
// 0, the final norm and the head in chunk v - 1 of stage P - 1.
struct PipelineStage {
  int index = 0, count = 1;
  SplitRange layers{0, -1};  // size < 0: the uniform split; unused with chunk_layers
  std::vector<SplitRange> chunk_layers;  // interleaved: chunk c's blocks; empty: one chunk, `layers`
  int chunks() const { return chunk_layers.empty() ? 1 : static_cast<int>(chunk_layers.size()); }
  bool first() const { return index == 0; }
  bool last() const { return index == count - 1; }
};

// Stage `index` of `count` with its blocks chosen by `method` (uniform, or
// balanced by parameters counting the embeddings on the first stage and the
// tied table and final norm on the last); INVALID_ARGUMENT when n_layer <
// count. layers_per_virtual_stage L > 0: Megatron's interleaving instead
// (pipeline_virtual_stages), `method` unused.
absl::StatusOr<PipelineStage> gpt_pipeline_stage(const GptConfig& config, int index, int count,
                                                 PartitionMethod method, int64_t layers_per_virtual_stage = 0);

// Every rule the model's constructor relies on, for a split over a tensor
// group of `tensor` ranks: heads divide d_model (unless head_dim is its
// own; GPT-2's fused q/k/v never), key/value heads divide the query heads,
// the tensor size divides both and the MLP width and is at most the
// vocabulary, seq_len fits the positions, RoPE's frequencies exist for
// head_dim, and with sequence parallelism seq_len divides by the tensor size.
// INVALID_ARGUMENT naming the model field; what reaches the constructor
// past it would be a broken internal invariant.
absl::Status check_gpt_split(const GptConfig& config, int tensor, bool sequence_parallel);

class Gpt : public Module, public Model {
 public:
  // tensor_group: the mesh's tensor group (nullptr or one rank: no split);
  // it must outlive the model.
  // stage: this rank's pipeline stage; forward then takes the previous
  // stage's activations [B, S, C] (the ids on the first stage) and returns
  // this stage's (the logits on the last), and backward (the recorded
  // replay) their gradients (none for the ids).
  // expert_group: the mesh's ep group (nullptr or one rank: every expert
  // here); this rank then holds its share of each sparse block's experts.
  explicit Gpt(const GptConfig& config, Communicator* tensor_group = nullptr, bool sequence_parallel = false,
               PipelineStage stage = {}, Communicator* expert_group = nullptr);
  Tensor forward(Context& ctx, const Tensor& ids) override;
  const PipelineStage& stage() const { return stage_; }
  const GptConfig& config() const { return config_; }
  std::vector<Module*> checkpointable_layers() override {
    return std::vector<Module*>(blocks_.begin(), blocks_.end());
  }
  std::optional<VocabSlice> logits_vocab_slice() const override { return vocab_slice_; }
  bool sequence_parallel() const override { return sequence_group_ != nullptr; }
  int pipeline_stage_index() const override { return stage_.index; }
  int pipeline_stages() const override { return stage_.count; }
  // [B, S, C], or [B, S / T, C] with sequence parallelism.
  Shape stage_output_shape(const Shape& ids) const override;
  // wte.weight on the first and the last stage (when they differ).
  std::vector<Parameter*> parameters_tied_across_stages() override;
  int pipeline_chunks() const override { return stage_.chunks(); }
  Module* pipeline_chunk(int chunk) override;
  MoeLosses* moe_losses() override { return moe_losses_.get(); }
  // Chunk c of an interleaved stage (the whole stage when there is one): its
  // part of forward. `from` / `to`: its blocks, positions in blocks_.
  Tensor forward_chunk(Context& ctx, const Tensor& input, int chunk, size_t from, size_t to);

 private:
  GptConfig config_;
  PipelineStage stage_;
  std::optional<VocabSlice> vocab_slice_;  // tensor-parallel: this rank's logits
  Module* wte_ = nullptr;  // stage 0 (and the last stage's tied copy, never called)
  Module* embed_scale_ = nullptr;  // stage 0, embed_scale
  Module* wpe_ = nullptr;  // stage 0, learned positions
  Dropout* drop_ = nullptr;  // dropout > 0 only
  std::vector<TransformerBlock*> blocks_;
  Module* ln_f_ = nullptr;  // last stage
  Communicator* sequence_group_ = nullptr;  // sequence parallelism: the tensor group
  Module* lm_head_ = nullptr;  // last stage
  Module* softcap_ = nullptr;  // last stage, logit_softcap > 0
  std::unique_ptr<MoeLosses> moe_losses_;  // with MoE layers
  std::vector<std::unique_ptr<Module>> chunks_;  // interleaved: chunk c's forward (not children: no parameters)
};

// A plain MLP classifier for small tests: Linear(in, h) GELU ... Linear(h, classes).
// forward(x fp32 [B, in]) -> logits [B, classes].
std::unique_ptr<Sequential> make_mlp_classifier(int64_t in, const std::vector<int64_t>& hidden,
                                                int64_t classes, float init_std = 0.1f);

}  // namespace zero
