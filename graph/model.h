// A model, as the engine sees it beyond its tree of modules: how the whole of
// it lies over a device mesh. A Module is a piece of computation (its
// parameters, its forward); a Model says what only a whole model knows:
// which pipeline stage of how many this rank's tree is, what it hands the
// next stage, which parameters it shares with another stage, whether its
// logits are a vocabulary slice over the tensor group, and whether the
// activations between its tensor-parallel layers are sequence shards.
//
// A root module that splits over a mesh implements both (class Gpt : public
// Module, public Model). Any other root module is a whole, unsplit model:
// model_of() gives it the defaults below, and the engine refuses it, naming
// its type, on a mesh with a tensor or pipeline size above 1.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "graph/module.h"

namespace zero {

class Communicator;
class MoeLosses;

// Logits split by vocabulary over a tensor group (Megatron's
// vocabulary-parallel output layer): this rank's logits are the columns
// [first, first + local) of a vocabulary of `vocab` entries, the other
// columns on the group's other ranks. The loss is then the
// vocabulary-parallel cross-entropy (graph/vocab_parallel.h).
struct VocabSlice {
  Communicator* group = nullptr;
  int64_t first = 0;
  int64_t vocab = 0;
};

class Model {
 public:
  virtual ~Model() = default;

  // Set when forward's logits are this rank's vocabulary slice.
  virtual std::optional<VocabSlice> logits_vocab_slice() const { return std::nullopt; }
  // Whether the activations between its tensor-parallel layers (and so its
  // checkpoint segments' inputs) are sequence shards, different on each
  // tensor rank (graph/sequence_parallel.h), rather than the same on all.
  virtual bool sequence_parallel() const { return false; }
  // ---- pipeline parallelism: a model built as one stage of several
  // This rank's stage and the number of stages (0 of 1: the whole model).
  virtual int pipeline_stage_index() const { return 0; }
  virtual int pipeline_stages() const { return 1; }
  // The activation (fp32) this stage hands the next for a micro-batch whose
  // inputs (the first stage's) have shape `inputs`; the next stage's input.
  virtual Shape stage_output_shape(const Shape& inputs) const { return inputs; }
  // Parameters this stage holds a copy of that another stage holds too (a
  // token table tied to the head on the last stage): their gradients are
  // summed between the stages holding them. The stage that owns the
  // original is the first; a later stage's are its copies.
  virtual std::vector<Parameter*> parameters_tied_across_stages() { return {}; }
  // Interleaved pipeline stages: this rank's v model chunks, chunk c being
  // virtual stage c P + s of v P (its input the previous virtual stage's
  // activation, the ids on virtual stage 0; its output the next one's input,
  // the logits on the last). pipeline_chunk(c) is the module whose forward
  // runs chunk c (a view over this tree's modules, owning no parameters);
  // nullptr when v is 1: the root module is the one chunk.
  virtual int pipeline_chunks() const { return 1; }
  virtual Module* pipeline_chunk(int chunk) { return nullptr; }
  // ---- mixture of experts (graph/moe.h): the routers' auxiliary losses of
  // the micro-batch in flight, which the engine finishes after the forward
  // (adding them to the loss) and backward reads; nullptr without MoE layers.
  virtual MoeLosses* moe_losses() { return nullptr; }
};

// `root` as a Model: itself when it implements one, else a whole model on one
// stage, unsplit (a shared instance of the defaults above).
Model& model_of(Module& root);
const Model& model_of(const Module& root);

// The root module's type for a message ("zero::Gpt", "MixerClassifier").
std::string model_type_name(const Module& root);

}  // namespace zero
