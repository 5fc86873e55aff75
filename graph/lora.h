// LoRA (Hu et al. 2021) with PEFT's names and meaning: a linear layer W
// [out, in] of the base model stays frozen and learns a low-rank update
//
//   y = x W^T + b + scaling * dropout(x) A^T B^T,   A [r, in], B [out, r],
//   scaling = lora_alpha / r   (use_rslora: lora_alpha / sqrt(r)),
//
// as PEFT's LoraLayer computes it. A starts as PEFT's default (Kaiming
// uniform with a = sqrt(5): U(-1/sqrt(in), 1/sqrt(in))), B as zeros, so the
// adapted model starts as the base model. With LoRA on, every parameter of
// the model but the adapters is frozen (PEFT's bias "none": biases too), so
// the engine keeps gradients, fp32 masters and optimizer state for A and B
// only (graph/freeze.h's contract), at any ZeRO stage.
//
// Which layers: PEFT's target_modules, matched against Hugging Face's module
// names ("model.layers.0.self_attn.q_proj", "transformer.h.0.attn.c_attn"):
// a name equal to an entry or ending in "." + the entry; "all-linear" is
// every linear layer of the blocks (PEFT's: all but the output layer). The
// layers that may be adapted are the blocks' projections: q/k/v/o_proj,
// gate/up/down_proj (GPT-2: attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj).
//
// Parameter names: the adapted layer's module keeps its name, so its weight
// stays "<module>.weight" (a base checkpoint loads as before), and the
// adapters are "<module>.lora_A.weight" and "<module>.lora_B.weight"; PEFT's
// adapter file names them "base_model.model.<HF module>.lora_A.weight".
//
// Tensor parallelism: for a column-parallel layer (its output features split
// over the group) B is split the same way by rows and A is whole on every
// rank; h = A x is the same on every rank, and its gradient (each rank's
// B_r^T dy_r) is summed over the group (copy_to_group), so A's gradient is
// the whole one everywhere. For a row-parallel layer (its input features
// split) A is split by columns and B is whole: the partial products A_r x_r
// are summed (reduce_from_group), an all-reduce of [B, T, r]. Either way the
// adapters' initial values are their slices of the unsplit ones, so any
// tensor size trains the same adapter. Not with sequence parallelism (the
// config refuses it).
#pragma once

#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.h"
#include "graph/context.h"
#include "graph/module.h"

namespace zero {

struct LoraConfig {
  int64_t r = 0;              // the rank; 0: no LoRA
  double alpha = 8.0;         // lora_alpha (PEFT's default)
  float dropout = 0.0f;       // lora_dropout, on the adapter's input only
  std::vector<std::string> target_modules;  // PEFT's suffix match, or {"all-linear"}
  bool use_rslora = false;    // scaling alpha / sqrt(r) (rank-stabilised LoRA)

  bool enabled() const { return r > 0; }
  float scaling() const;
  // Whether target_modules picks the layer of Hugging Face module name
  // `hf_module` (that must be one of the adaptable layers above).
  bool targets(std::string_view hf_module) const;
  // Whether it picks any of the layers hf_prefix + name ("model.layers.0.self_attn."
  // + "q_proj"): the Llama family's q/k/v (gate/up) projections then stay
  // separate layers, PEFT's modules, instead of one fused GEMM (transformer.h).
  bool targets_any(std::string_view hf_prefix, std::initializer_list<std::string_view> names) const;
};

// "<module>.lora_A.weight" / "<module>.lora_B.weight".
std::string lora_a_name(const std::string& module);
std::string lora_b_name(const std::string& module);
// Whether `name` is an adapter's parameter (its base module's name in *module).
bool is_lora_parameter(std::string_view name, std::string* module = nullptr);

// How the adapted layer is split over its tensor group.
enum class LoraSplit { kNone, kColumn, kRow };

class LoraLinear : public Module {
 public:
  // base: the layer adapted (a Linear, or a column- or row-parallel one,
  // named as the module it stands for; this module takes its name), whose
  // weight is `base_weight` [out, in] (this rank's slice). group: the tensor
  // group of a split layer. dropout_site: the adapter's dropout mask stream
  // (fn::dropout), distinct from every other site of the model.
  LoraLinear(std::unique_ptr<Module> base, const Parameter& base_weight, const LoraConfig& config, LoraSplit split,
             Communicator* group, int64_t dropout_site);
  Tensor forward(Context& ctx, const Tensor& x) override;
  Parameter* lora_a() const { return a_; }
  Parameter* lora_b() const { return b_; }

 private:
  Module* base_;
  Parameter* a_;
  Parameter* b_;
  float scaling_, dropout_;
  LoraSplit split_;
  Communicator* group_;
  int64_t dropout_site_;
  int64_t first_feature_ = 0;  // a row-parallel layer's: its input slice's first feature (the dropout mask's)
};

// The first mask stream of the adapters' dropout (kernels/dropout_mask.h):
// far above the model's own sites (0 .. 2 n_layer).
inline constexpr int64_t kLoraDropoutSites = int64_t{1} << 32;

}  // namespace zero
