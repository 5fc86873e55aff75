// The safetensors format (an 8-byte little-endian header length, a JSON
// header naming each tensor's dtype, shape and byte range, then the data),
// for exporting a checkpoint as one model file and initialising a model from
// one. GPT models use GPT-2's conventional tensor names ("wte.weight",
// "h.0.attn.c_attn.weight", ...) and GPT-2's layout: the four Conv1D weights
// of each block (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) are stored
// [in, out], transposed from our Linear's [out, in]; the header's
// __metadata__ records it ("layout": "gpt2-conv1d").
#pragma once

#include <string>

#include "absl/status/status.h"
#include "core/dtype.h"
#include "runtime/engine/engine.h"

namespace zero {

// Writes the fp32 master weights of checkpoint <dir>/<tag> (tag empty:
// latest) as a safetensors file in `dtype` (fp32 or bf16), one tensor at a
// time (memory: the largest tensor), atomically. Segment checksums are
// verified on the way.
absl::Status consolidate_to_safetensors(const std::string& dir, const std::string& tag, const std::string& out,
                                        DType dtype);

// Sets the engine's weights (fp32 master, then the model-dtype parameters)
// from a safetensors file; every parameter must be there with its shape.
// A collective (every rank calls it).
absl::Status load_safetensors_weights(Engine& engine, const std::string& path);

// True for the GPT-2 Conv1D weights that safetensors stores transposed.
bool is_gpt2_conv1d_weight(const std::string& name);

}  // namespace zero
