// GPT-2 model and the MLP classifier; see gpt.h.
#include "graph/gpt.h"

#include <algorithm>
#include <cmath>

#include "core/status.h"
#include "core/strings.h"
#include "graph/sequence_parallel.h"
#include "graph/vocab_parallel.h"

namespace zero {

namespace {

// Chunk `chunk` of an interleaved stage: the Gpt's forward_chunk over its
// blocks [from, to), which are also its checkpointable layers.
class GptChunk final : public Module {
 public:
  GptChunk(std::string name, Gpt& gpt, int chunk, size_t from, size_t to, std::vector<Module*> layers)
      : Module(std::move(name)), gpt_(gpt), chunk_(chunk), from_(from), to_(to), layers_(std::move(layers)) {}
  Tensor forward(Context& ctx, const Tensor& x) override { return gpt_.forward_chunk(ctx, x, chunk_, from_, to_); }
  std::vector<Module*> checkpointable_layers() override { return layers_; }

 private:
  Gpt& gpt_;
  int chunk_;
  size_t from_, to_;
  std::vector<Module*> layers_;
};

}  // namespace

int64_t GptConfig::ffn_width() const {
  if (features().mlp == MlpKind::kGelu) return 4 * d_model;
  if (d_ff > 0) return d_ff;
  const int64_t h = 2 * (4 * d_model) / 3;  // Llama's rule: 2/3 of 4 d, up to a multiple of 256
  return (h + 255) / 256 * 256;
}

namespace {
// One norm's parameters over `width` features: LayerNorm's weight and bias, RMSNorm's weight.
int64_t norm_parameters(const ModelFeatures& f, int64_t width) {
  return f.norm == NormKind::kLayerNorm ? 2 * width : width;
}
}  // namespace

int64_t GptConfig::block_parameters() const {
  const ModelFeatures f = features();
  const int64_t c = d_model, ff = ffn_width(), a = attention_width(), kv = kv_heads() * head_dim();
  return 2 * norm_parameters(f, c)                   // ln_1 / input_layernorm, ln_2 / post_attention_layernorm
         + c * (a + 2 * kv) + (f.qkv_bias ? a + 2 * kv : 0)  // q, k, v (GPT-2's fused c_attn)
         + a * c + (f.o_bias ? c : 0)                // c_proj / o_proj
         + (f.qk_norm ? 2 * head_dim() : 0)         // q_norm, k_norm
         + (f.mlp == MlpKind::kGelu ? 2 : 3) * c * ff  // c_fc, c_proj / gate, up, down
         + (f.mlp_bias ? (f.mlp == MlpKind::kGelu ? 1 : 2) * ff + c : 0);
}

namespace {

// A sparse block's MLP: the router, the experts (all, or the `experts` a
// token uses) and the shared expert with its gate.
int64_t moe_mlp_parameters(const GptConfig& g, int64_t experts) {
  const int64_t c = g.d_model;
  const MoeConfig& m = g.moe;
  return m.num_experts * c + experts * 3 * c * m.expert_d_ff +
         (m.shared_expert_d_ff > 0 ? 3 * c * m.shared_expert_d_ff + c : 0);
}

}  // namespace

int64_t GptConfig::block_parameters(int64_t layer) const {
  if (!moe.sparse_layer(layer)) return block_parameters();
  const ModelFeatures f = features();
  const int64_t c = d_model, ff = ffn_width();
  const int64_t dense_mlp = (f.mlp == MlpKind::kGelu ? 2 : 3) * c * ff +
                            (f.mlp_bias ? (f.mlp == MlpKind::kGelu ? 1 : 2) * ff + c : 0);
  return block_parameters() - dense_mlp + moe_mlp_parameters(*this, moe.num_experts);
}

int64_t GptConfig::num_parameters() const {
  const ModelFeatures f = features();
  const int64_t c = d_model;
  int64_t blocks = 0;
  for (int64_t i = 0; i < n_layer; ++i) blocks += block_parameters(i);
  return vocab_size * c * (tied_head() ? 1 : 2) + (f.learned_positions ? positions() * c : 0) + blocks +
         norm_parameters(f, c) + lora_parameters();
}

int64_t GptConfig::active_parameters() const {
  int64_t n = num_parameters();
  for (int64_t i = 0; i < n_layer; ++i) {
    if (moe.sparse_layer(i)) n -= moe_mlp_parameters(*this, moe.num_experts) - moe_mlp_parameters(*this, moe.top_k);
  }
  return n;
}

std::vector<BlockLinear> block_linears(const GptConfig& config, int64_t layer) {
  const int64_t c = config.d_model, ff = config.ffn_width(), a = config.attention_width(),
                kv = config.kv_heads() * config.head_dim();
  if (config.features().gpt2_names) {
    const std::string b = cat("h.", layer, ".");
    return {{b + "attn.c_attn", c, 3 * c}, {b + "attn.c_proj", c, c}, {b + "mlp.c_fc", c, ff}, {b + "mlp.c_proj", ff, c}};
  }
  const std::string b = cat("layers.", layer, ".");
  return {{b + "self_attn.q_proj", c, a},  {b + "self_attn.k_proj", c, kv}, {b + "self_attn.v_proj", c, kv},
          {b + "self_attn.o_proj", a, c},  {b + "mlp.gate_proj", c, ff},    {b + "mlp.up_proj", c, ff},
          {b + "mlp.down_proj", ff, c}};
}

std::string_view hf_name_prefix(const GptConfig& config) {
  return config.features().gpt2_names ? "transformer." : "model.";
}

namespace {

// "layers.<i>." -> i, or -1.
int64_t layer_of(std::string_view name) {
  if (name.rfind("layers.", 0) != 0) return -1;
  int64_t i = 0;
  size_t p = 7;
  if (p >= name.size() || name[p] < '0' || name[p] > '9') return -1;
  for (; p < name.size() && name[p] >= '0' && name[p] <= '9'; ++p) i = i * 10 + (name[p] - '0');
  return p < name.size() && name[p] == '.' ? i : -1;
}

}  // namespace

bool fuses_qkv(const GptConfig& config, int64_t layer) {
  return !config.features().fused_qkv &&
         !config.lora.targets_any(cat(hf_name_prefix(config), "layers.", layer, ".self_attn."),
                                  {"q_proj", "k_proj", "v_proj"});
}

bool fuses_gate_up(const GptConfig& config, int64_t layer) {
  return config.features().mlp != MlpKind::kGelu &&
         !config.lora.targets_any(cat(hf_name_prefix(config), "layers.", layer, ".mlp."), {"gate_proj", "up_proj"});
}

std::vector<FusedPart> fused_parts(const GptConfig& config, const std::string& name) {
  const int64_t layer = layer_of(name);
  if (layer < 0 || layer >= config.n_layer) return {};
  const std::string b = cat("layers.", layer, ".");
  for (const char* kind : {"weight", "bias"}) {
    if (name == cat(b, "self_attn.qkv_proj.", kind)) {
      const int64_t kv = config.kv_heads() * config.head_dim();
      return {{cat(b, "self_attn.q_proj.", kind), config.attention_width()},
              {cat(b, "self_attn.k_proj.", kind), kv},
              {cat(b, "self_attn.v_proj.", kind), kv}};
    }
    if (name == cat(b, "mlp.gate_up_proj.", kind)) {
      return {{cat(b, "mlp.gate_proj.", kind), config.ffn_width()}, {cat(b, "mlp.up_proj.", kind), config.ffn_width()}};
    }
  }
  // A sparse block's experts and shared expert: gate_up_proj is their
  // gate_proj and up_proj (Mixtral's w1 and w3) by rows.
  if (config.moe.sparse_layer(layer)) {
    const std::string_view rest = std::string_view(name).substr(b.size());
    auto gate_up = [&](const std::string& module, int64_t rows) -> std::vector<FusedPart> {
      return {{cat(b, module, ".gate_proj.weight"), rows}, {cat(b, module, ".up_proj.weight"), rows}};
    };
    if (rest == "mlp.shared_expert.gate_up_proj.weight") {
      return gate_up("mlp.shared_expert", config.moe.shared_expert_d_ff);
    }
    const std::string_view experts = "mlp.experts.", tail = ".gate_up_proj.weight";
    if (rest.size() > experts.size() + tail.size() && rest.substr(0, experts.size()) == experts &&
        rest.substr(rest.size() - tail.size()) == tail) {
      const std::string_view index = rest.substr(experts.size(), rest.size() - experts.size() - tail.size());
      if (!index.empty() && std::all_of(index.begin(), index.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
        return gate_up(cat("mlp.experts.", index), config.moe.expert_d_ff);
      }
    }
  }
  return {};
}

int64_t GptConfig::lora_parameters() const {
  if (!lora.enabled()) return 0;
  int64_t n = 0;
  for (int64_t i = 0; i < n_layer; ++i) {
    for (const BlockLinear& l : block_linears(*this, i)) {
      if (lora.targets(cat(hf_name_prefix(*this), l.name))) n += lora.r * (l.in + l.out);
    }
  }
  return n;
}

absl::StatusOr<PipelineStage> gpt_pipeline_stage(const GptConfig& config, int index, int count,
                                                 PartitionMethod method, int64_t layers_per_virtual_stage) {
  if (layers_per_virtual_stage > 0) {
    ZE_ASSIGN_OR_RETURN(std::vector<SplitRange> chunks,
                        partition_virtual_stages(config.n_layer, count, index, layers_per_virtual_stage));
    PipelineStage stage{index, count};
    // One chunk (L = n_layer / P): the plain stage, its blocks the uniform split's.
    if (chunks.size() == 1) stage.layers = chunks[0];
    else stage.chunk_layers = std::move(chunks);
    return stage;
  }
  const int64_t c = config.d_model;
  const std::vector<int64_t> blocks(static_cast<size_t>(config.n_layer), config.block_parameters());
  // The first stage's embeddings; the last stage's final norm and its head
  // (GPT-2's and a tied Llama's: a copy of the token table).
  const ModelFeatures f = config.features();
  const int64_t first_extra = config.vocab_size * c + (f.learned_positions ? config.positions() * c : 0);
  const int64_t last_extra = config.vocab_size * c + norm_parameters(f, c);
  absl::StatusOr<std::vector<SplitRange>> parts = partition_layers(blocks, count, method, first_extra, last_extra);
  if (!parts.ok()) return parts.status();
  if (index < 0 || index >= count) return absl::InvalidArgumentError(cat("pipeline stage ", index, " of ", count));
  return PipelineStage{index, count, (*parts)[index]};
}

double GptConfig::flops_per_token(int64_t seq) const {
  // 6 FLOPs per parameter per token (forward multiply-add 2, backward 4; the
  // tied embedding does its multiplies in the LM head; an untied table does
  // none), plus attention's q k^T and P v: 2 T A multiply-adds per token per
  // layer forward (A = n_head head_dim, d_model unless head_dim is its own),
  // x3 with backward, counted unmasked as PaLM and llm.c do: 12 L A T.
  const int64_t lookup_only = tied_head() ? 0 : vocab_size * d_model;
  return 6.0 * static_cast<double>(active_parameters() - lookup_only) +
         12.0 * static_cast<double>(n_layer) * static_cast<double>(attention_width()) * static_cast<double>(seq);
}

absl::Status check_gpt_split(const GptConfig& c, int tensor, bool sequence_parallel) {
  // Messages start with the config key path, as the config's own errors do.
  auto bad = [](auto&&... parts) { return absl::InvalidArgumentError(cat(parts...)); };
  if (c.n_layer < 1 || c.n_head < 1 || c.d_model < 1 || c.vocab_size < 1 || c.seq_len < 1) {
    return bad("model: n_layer ", c.n_layer, ", n_head ", c.n_head, ", d_model ", c.d_model, ", vocab_size ",
               c.vocab_size, " and seq_len ", c.seq_len, " must all be at least 1");
  }
  if (c.d_head < 0) return bad("model.head_dim: ", c.d_head, " must be at least 1 (or 0: d_model / n_head)");
  if (!(c.logit_softcap >= 0.0f)) return bad("model.logit_softcap: ", c.logit_softcap, " must be >= 0 (0: none)");
  if (c.d_head == 0 && c.d_model % c.n_head != 0) {
    return bad("model.d_model: ", c.d_model, " is not divisible by n_head ", c.n_head,
               " (or set model.head_dim, when the family has heads of their own width)");
  }
  if (c.d_head > 0 && c.features().fused_qkv && c.d_head * c.n_head != c.d_model) {
    return bad("model.head_dim: ", c.d_head, " is not d_model / n_head (", c.d_model / c.n_head, "): ",
               c.family_name(), "'s fused q/k/v projection has heads of d_model / n_head");
  }
  if (c.kv_heads() < 1 || c.n_head % c.kv_heads() != 0) {
    return bad("model.n_kv_head: ", c.kv_heads(), " does not divide n_head ", c.n_head);
  }
  if (c.seq_len > c.positions()) {
    return bad("model.seq_len: ", c.seq_len, " is more than the model's ", c.positions(), " positions");
  }
  if (c.rope()) {
    absl::StatusOr<RopeFreqs> rope = rope_frequencies(c.head_dim(), c.rope_theta, c.rope_scaling);
    if (!rope.ok()) return bad("model: ", rope.status().message());
  }
  if (c.moe.enabled()) {
    const MoeConfig& m = c.moe;
    if (c.features().mlp != MlpKind::kSwiGlu) {
      return bad("model.num_experts: ", m.num_experts, " experts need a family with a SwiGLU MLP (", c.family_name(),
                 " has none; llama, mistral, qwen2, qwen3, mixtral, qwen2_moe and qwen3_moe have one)");
    }
    if (m.top_k < 1 || m.top_k > m.num_experts) {
      return bad("model.num_experts_per_tok: ", m.top_k, " must be between 1 and model.num_experts (", m.num_experts,
                 ")");
    }
    if (m.expert_d_ff < 1) return bad("model.moe_intermediate_size: ", m.expert_d_ff, " must be at least 1");
    if (m.shared_expert_d_ff < 0) {
      return bad("model.shared_expert_intermediate_size: ", m.shared_expert_d_ff, " must be >= 0 (0: none)");
    }
    if (m.decoder_sparse_step < 1) {
      return bad("model.decoder_sparse_step: ", m.decoder_sparse_step, " must be at least 1");
    }
    if (!(m.capacity_factor >= 0.0)) {
      return bad("model.capacity_factor: ", m.capacity_factor, " must be >= 0 (0: dropless routing)");
    }
    if (m.min_capacity < 0) return bad("model.min_capacity: ", m.min_capacity, " must be >= 0");
    if (!(m.aux_loss_coef >= 0.0f) || !(m.z_loss_coef >= 0.0f)) {
      return bad("model.router_aux_loss_coef and router_z_loss_coef: ", m.aux_loss_coef, " and ", m.z_loss_coef,
                 " must be >= 0");
    }
    if (c.lora.enabled()) return bad("model.num_experts: LoRA adapters on a mixture of experts are not implemented");
  }
  const std::string t = cat("tensor_parallel.autotp_size: ", tensor);
  if (tensor < 1) return bad(t, " must be at least 1");
  if (tensor == 1) return absl::OkStatus();
  // A sparse MLP runs whole on every tensor rank (the attention and the
  // dense MLPs split): on the sequence shards of sequence parallelism each
  // tensor rank would route other tokens, and the experts' gradients would
  // need a sum over the group that is not there yet.
  if (c.moe.enabled() && sequence_parallel) {
    return bad("tensor_parallel.sequence_parallel: a mixture of experts with sequence parallelism is not implemented "
               "yet (model.num_experts ", c.moe.num_experts, "); without it the experts run whole on every tensor "
               "rank");
  }
  if (c.features().fused_qkv && c.n_head % tensor != 0) {
    return bad(t, " does not divide model.n_head ", c.n_head, " (", c.family_name(),
               "'s fused q/k/v projection c_attn splits into n_head / autotp_size whole heads per tensor rank)");
  }
  if (c.kv_heads() < tensor) {
    return bad(t, " is more than the model's ", c.kv_heads(),
               " key/value heads (model.n_kv_head: each tensor rank computes at least one whole key/value head "
               "with its query heads; they are not replicated)");
  }
  if (c.ffn_width() < tensor) {
    return bad(t, " is more than the MLP width ", c.ffn_width(), " (each tensor rank computes at least one feature)");
  }
  if (c.vocab_size < tensor) {
    return bad(t, " is more than model.vocab_size ", c.vocab_size,
               " (each tensor rank holds at least one row of the vocabulary)");
  }
  if (sequence_parallel && c.seq_len % tensor != 0) {
    return bad("tensor_parallel.sequence_parallel: model.seq_len ", c.seq_len, " does not divide by autotp_size ",
               tensor, " (each tensor rank holds seq_len / autotp_size positions)");
  }
  return absl::OkStatus();
}

Gpt::Gpt(const GptConfig& config, Communicator* tensor_group, bool sequence_parallel, PipelineStage stage,
         Communicator* expert_group)
    : Module(""), config_(config), stage_(stage) {
  ZE_CHECK(stage.count >= 1 && stage.index >= 0 && stage.index < stage.count && stage.count <= config.n_layer)
      << "pipeline stage " << stage.index << " of " << stage.count << " for " << config.n_layer << " layers";
  ZE_CHECK(config.seq_len <= config.positions()) << "seq_len " << config.seq_len << " > " << config.positions();
  const ModelFeatures f = config.features();
  const float std = f.gpt2_init ? 0.02f : config.init_std;
  const bool split = tensor_group != nullptr && tensor_group->world_size() > 1;
  if (!split) tensor_group = nullptr;
  const bool sp = split && sequence_parallel;
  if (sp) sequence_group_ = tensor_group;

  BlockConfig block;
  block.features = f;
  block.d_model = config.d_model;
  block.n_head = config.n_head;
  block.n_kv_head = config.kv_heads();
  block.head_dim = config.head_dim();
  block.d_ff = config.ffn_width();
  block.norm_eps = f.norm == NormKind::kRmsNorm ? config.norm_eps : 1e-5f;
  block.init_std = std;
  // GPT-2 scales the residual projections by 1/sqrt(2 n_layer); HF's Llama does not.
  block.proj_std = f.gpt2_init ? std / std::sqrt(2.0f * static_cast<float>(config.n_layer)) : std;
  block.dropout = config.dropout;
  block.tensor_group = tensor_group;
  block.sequence_parallel = sp;
  block.lora = config.lora;
  block.hf_prefix = std::string(hf_name_prefix(config));
  if (config.moe.enabled()) {
    moe_losses_ = std::make_unique<MoeLosses>(config.moe);
    block.moe = config.moe;
    block.moe_losses = moe_losses_.get();
    if (expert_group != nullptr && expert_group->world_size() > 1) block.expert_group = expert_group;
  }
  if (config.rope()) {
    absl::StatusOr<RopeFreqs> rope = rope_frequencies(config.head_dim(), config.rope_theta, config.rope_scaling);
    ZE_CHECK(rope.ok()) << rope.status().message();  // the config's rules refuse these first
    block.rope = *rope;
  }
  const std::string table_name = f.gpt2_names ? "wte" : "embed_tokens";

  // The token table: on the first stage, and on the last as the tied head's copy.
  VocabParallelEmbedding* vocab_parallel = nullptr;
  auto add_table = [&](const std::string& name) -> Module* {
    if (split) {
      vocab_parallel = add_child<VocabParallelEmbedding>(name, config.vocab_size, config.d_model, std, *tensor_group, sp);
      return vocab_parallel;
    }
    return add_child<Embedding>(name, config.vocab_size, config.d_model, std);
  };
  if (stage.first() || (stage.last() && config.tied_head())) wte_ = add_table(table_name);
  if (stage.first() && f.embed_scale) {
    embed_scale_ = add_child<EmbeddingScale>("embed_scale", std::sqrt(static_cast<float>(config.d_model)));
  }
  if (stage.first() && f.learned_positions) {
    if (sp) {
      wpe_ = add_child<SequenceParallelPositionalEmbedding>("wpe", config.positions(), config.d_model, std,
                                                            *tensor_group);
    } else {
      wpe_ = add_child<PositionalEmbedding>("wpe", config.positions(), config.d_model, std);
    }
  }
  // Dropout sites, each its own mask stream: 0 the embeddings, 1 + 2i and
  // 2 + 2i block i's attention and MLP outputs.
  if (stage.first() && config.dropout > 0.0f) drop_ = add_child<Dropout>("drop", config.dropout, 0, sequence_group_);
  // The blocks of each chunk, in chunk order (the one chunk's without interleaving).
  const std::vector<SplitRange> chunk_layers =
      !stage.chunk_layers.empty()  ? stage.chunk_layers
      : stage.layers.size >= 0 ? std::vector<SplitRange>{stage.layers}
                               : std::vector<SplitRange>{even_split(config.n_layer, stage.count, stage.index)};
  std::vector<size_t> chunk_begin;
  for (const SplitRange& layers : chunk_layers) {
    ZE_CHECK(layers.size >= 1 && layers.offset >= 0 && layers.offset + layers.size <= config.n_layer)
        << "pipeline stage " << stage.index << ": blocks [" << layers.offset << ", " << layers.offset + layers.size
        << ") of " << config.n_layer;
    chunk_begin.push_back(blocks_.size());
    for (int64_t i = layers.offset; i < layers.offset + layers.size; ++i) {
      block.dropout_id = 1 + 2 * i;
      block.layer = i;
      blocks_.push_back(add_child<TransformerBlock>(cat(f.gpt2_names ? "h." : "layers.", i), block));
    }
  }
  if (stage.last()) {
    ln_f_ = adopt_child(make_norm(f.gpt2_names ? "ln_f" : "norm", block));
    if (config.tied_head()) {
      if (split) lm_head_ = add_child<VocabParallelLMHead>("lm_head", *vocab_parallel);
      else lm_head_ = add_child<TiedLMHead>("lm_head", static_cast<Embedding*>(wte_)->weight());
    } else if (split) {
      // Llama's own head: a vocabulary-parallel table "lm_head" (never looked
      // up) with the output layer over it.
      add_table("lm_head");
      lm_head_ = add_child<VocabParallelLMHead>("lm_head_out", *vocab_parallel);
    } else {
      lm_head_ = add_child<Linear>("lm_head", config.d_model, config.vocab_size, false, std);
    }
    if (split) vocab_slice_ = VocabSlice{tensor_group, vocab_parallel->rows().offset, config.vocab_size};
    if (config.logit_softcap > 0.0f) softcap_ = add_child<LogitSoftcap>("logit_softcap", config.logit_softcap);
  }
  // Interleaved: a module per chunk running its part of forward (not a
  // child: parameters and names stay the blocks' own).
  if (stage.chunks() > 1) {
    for (size_t c = 0; c < chunk_begin.size(); ++c) {
      const size_t to = c + 1 < chunk_begin.size() ? chunk_begin[c + 1] : blocks_.size();
      chunks_.push_back(std::make_unique<GptChunk>(
          cat("virtual_stage_", static_cast<int>(c) * stage.count + stage.index), *this, static_cast<int>(c),
          chunk_begin[c], to, std::vector<Module*>(blocks_.begin() + chunk_begin[c], blocks_.begin() + to)));
    }
  }
  // LoRA trains the adapters only (PEFT's bias "none": the biases stay too).
  if (config.lora.enabled()) {
    for (Parameter* p : parameters()) {
      if (!is_lora_parameter(p->name())) ZE_CHECK_OK(p->set_requires_grad(false));
    }
  }
}

Tensor Gpt::forward(Context& ctx, const Tensor& input) {
  ZE_CHECK(chunks_.empty()) << "an interleaved pipeline stage of " << chunks_.size()
                            << " chunks runs chunk by chunk (Model::pipeline_chunk), not as one module";
  return forward_chunk(ctx, input, 0, 0, blocks_.size());
}

Module* Gpt::pipeline_chunk(int chunk) {
  if (chunks_.empty()) return nullptr;
  ZE_CHECK(chunk >= 0 && static_cast<size_t>(chunk) < chunks_.size()) << "chunk " << chunk << " of " << chunks_.size();
  return chunks_[static_cast<size_t>(chunk)].get();
}

Tensor Gpt::forward_chunk(Context& ctx, const Tensor& input, int chunk, size_t from, size_t to) {
  Tensor x = input;
  if (stage_.first() && chunk == 0) {
    ZE_CHECK(input.ndim() == 2 && input.dim(1) <= config_.positions()) << input.debug_string();
    ZE_CHECK(sequence_group_ == nullptr || input.dim(1) % sequence_group_->world_size() == 0)
        << "sequence parallelism: a sequence of " << input.dim(1) << " tokens does not split over a tensor group of "
        << sequence_group_->world_size();
    x = ctx.forward(*wte_, input);
    if (embed_scale_ != nullptr) x = ctx.forward(*embed_scale_, x);
    if (wpe_ != nullptr) x = ctx.forward(*wpe_, x);
    if (drop_ != nullptr) x = ctx.forward(*drop_, x);
  }
  for (size_t i = from; i < to; ++i) x = ctx.forward(*blocks_[i], x);
  if (!stage_.last() || chunk != stage_.chunks() - 1) return x;
  Tensor logits = ctx.forward(*lm_head_, ctx.forward(*ln_f_, x));
  return softcap_ != nullptr ? ctx.forward(*softcap_, logits) : logits;
}

Shape Gpt::stage_output_shape(const Shape& ids) const {
  ZE_CHECK(ids.size() == 2) << "token ids [B, S], not rank " << ids.size();
  const int64_t shards = sequence_group_ != nullptr ? sequence_group_->world_size() : 1;
  return {ids[0], ids[1] / shards, config_.d_model};
}

std::vector<Parameter*> Gpt::parameters_tied_across_stages() {
  if (stage_.count == 1 || (!stage_.first() && !stage_.last()) || !config_.tied_head()) return {};
  for (Parameter* p : wte_->direct_parameters()) return {p};
  return {};
}

std::unique_ptr<Sequential> make_mlp_classifier(int64_t in, const std::vector<int64_t>& hidden,
                                                int64_t classes, float init_std) {
  auto model = std::make_unique<Sequential>("");
  int64_t width = in;
  for (size_t i = 0; i < hidden.size(); ++i) {
    model->add<Linear>(cat("fc", i), width, hidden[i], true, init_std);
    model->add<Gelu>(cat("act", i));
    width = hidden[i];
  }
  model->add<Linear>("out", width, classes, true, init_std);
  return model;
}

}  // namespace zero
