// Hyper-parameters of one optimizer step (Adam/AdamW, SGD, Lion), shared by the Ops interface and the
// SIMD kernel tables (kept apart so ISA-specific files include nothing else).
#pragma once

#include <cstdint>

namespace zero {

struct AdamWHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int64_t step = 1;             // 1-based step count used for bias correction
  bool adamw_mode = true;       // decoupled decay (AdamW); false: L2 added to the gradient
  bool bias_correction = true;
  float grad_scale = 1.0f;      // gradients are multiplied by this first (unscale and clip)
};

// torch.optim.SGD semantics:
//   d = grad * grad_scale + weight_decay * p
//   momentum > 0: buf = first_step ? d : momentum * buf + (1 - dampening) * d
//                 d = nesterov ? d + momentum * buf : buf
//   p -= lr * d
struct SgdHyper {
  float lr = 1e-3f;
  float momentum = 0.0f;
  float dampening = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;
  bool first_step = true;  // the momentum buffer is initialised from d
  float grad_scale = 1.0f;
};

// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"), as
// DeepSpeed's FusedLion and lucidrains' lion-pytorch, with decoupled decay:
//   g = grad * grad_scale
//   c = beta1 * m + (1 - beta1) * g
//   p = p * (1 - lr * weight_decay) - lr * sign(c)      (sign(0) = 0, sign(NaN) = NaN)
//   m = beta2 * m + (1 - beta2) * g
struct LionHyper {
  float lr = 1e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.99f;
  float weight_decay = 0.0f;
  float grad_scale = 1.0f;  // gradients are multiplied by this first (unscale and clip)
};

}  // namespace zero
