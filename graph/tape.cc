// The per-call tape; see tape.h.
#include "graph/tape.h"

#include <cstdio>
#include <mutex>
#include <set>

#include "core/check.h"
#include "core/strings.h"
#include "graph/context.h"

namespace zero {

void Tape::begin(const Tensor& input) {
  values_.clear();
  nodes_.clear();
  output_ = kNotAValue;
  add_value(input, -1);
}

int Tape::add_value(const Tensor& t, int producer) {
  values_.push_back({t.storage(), t.storage() != nullptr, t.data(), t.numel(), t.shape(), producer});
  return static_cast<int>(values_.size()) - 1;
}

int Tape::find(const Tensor& t) const {
  if (!t.defined()) return kNotAValue;
  for (int i = static_cast<int>(values_.size()) - 1; i >= 0; --i) {
    const Value& v = values_[static_cast<size_t>(i)];
    if (v.data != t.data() || v.numel != t.numel()) continue;
    // Memory the value owned must still be that value's (not a new buffer
    // at the same address); wrapped memory (Tensor::wrap, no storage: a
    // batch's inputs) is matched by its address.
    if (!v.owned) {
      if (t.storage() == nullptr) return i;
      continue;
    }
    const std::shared_ptr<Storage> s = v.storage.lock();
    if (s != nullptr && s == t.storage()) return i;
  }
  return kNotAValue;
}

void Tape::note_unrecorded(const Tensor& t) { add_value(t, kUnrecorded); }

void Tape::record(std::string op, const std::vector<Tensor>& inputs, const Tensor& output, BackwardRule rule,
                  std::vector<Parameter*> params, Module* module) {
  Node node{std::move(op), {}, 0, std::move(rule), std::move(params), module};
  for (const Tensor& t : inputs) node.inputs.push_back(find(t));
  node.output = add_value(output, static_cast<int>(nodes_.size()));
  nodes_.push_back(std::move(node));
}

void Tape::end(const Tensor& output) { output_ = find(output); }

namespace {

bool shares(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.storage() != nullptr && a.storage() == b.storage();
}

}  // namespace

void Tape::warn_unreached(const Node& node, const std::string& module) {
  // A child call's hooks have not run yet (its backward comes after this),
  // so its gradients may not be placed: requires_grad alone decides there.
  std::vector<std::pair<Parameter*, std::string>> used;  // (parameter, the module using it)
  for (Parameter* p : node.params) {
    if (p->requires_grad() && p->grad.defined()) used.emplace_back(p, module);
  }
  if (node.module != nullptr) {
    for (Module* m : node.module->modules()) {
      for (Parameter* p : m->direct_parameters()) {
        if (p->requires_grad()) used.emplace_back(p, m->name().empty() ? "the model" : m->name());
      }
    }
  }
  static std::mutex mu;
  static std::set<std::string> warned;  // parameter names
  const std::lock_guard<std::mutex> lock(mu);
  for (const auto& [p, user] : used) {
    if (!warned.insert(p->name()).second) continue;
    std::fprintf(stderr,
                 "warning: parameter %s is used by %s (%s) but backward never reaches that use: its output gets no "
                 "gradient, so neither does the parameter from it\n",
                 p->name().c_str(), user.c_str(), node.op.c_str());
  }
}

Tensor Tape::replay(Context& ctx, const Tensor& dy, const std::string& module) {
  if (output_ == kNotAValue || values_[static_cast<size_t>(output_)].producer == kUnrecorded) {
    ctx.note(absl::InvalidArgumentError(cat(
        module, ": its forward's output was made by an op with no backward rule (a kernel called through "
                "ctx.ops() records none): build it from graph/functional.h's ops, or write ", module,
        "::backward")));
    return Tensor();
  }
  std::vector<Tensor> grads(values_.size());
  std::vector<bool> owned(values_.size(), false);  // ours to add into in place
  grads[static_cast<size_t>(output_)] = dy;
  for (int n = static_cast<int>(nodes_.size()) - 1; n >= 0; --n) {
    // Moved out: the rule runs child modules' backwards, and nothing may
    // hold into nodes_ meanwhile.
    const Node node = std::move(nodes_[static_cast<size_t>(n)]);
    Tensor g = std::move(grads[static_cast<size_t>(node.output)]);
    grads[static_cast<size_t>(node.output)] = Tensor();
    bool g_owned = owned[static_cast<size_t>(node.output)];
    if (!g.defined()) {  // nothing flows back through this op (its saved tensors go with `node`)
      if (!node.params.empty() || node.module != nullptr) warn_unreached(node, module);
      if (node.module == nullptr) continue;
      // A child call still runs its backward, from a zero gradient (as DDP's
      // find_unused_parameters marks such parameters ready): its frames are
      // consumed and its hooks run, a ZeRO gradient reduction that every
      // rank of the data group takes part in among them.
      g = ctx.backend().zeros(values_[static_cast<size_t>(node.output)].shape, DType::kF32,
                              MemCategory::kActivations);
      g_owned = true;
    }
    g = g.view(values_[static_cast<size_t>(node.output)].shape);
    ctx.set_writable_grad(g_owned ? g.data() : nullptr);
    std::vector<Tensor> in = node.rule(ctx, g);
    ctx.set_writable_grad(nullptr);
    ZE_CHECK_EQ(in.size(), node.inputs.size()) << module << ": the rule of " << node.op;
    for (size_t i = 0; i < in.size(); ++i) {
      const int v = node.inputs[i];
      if (v == kNotAValue || !in[i].defined()) continue;
      const size_t vi = static_cast<size_t>(v);
      in[i] = in[i].view(values_[vi].shape);
      if (values_[vi].producer == kUnrecorded) {
        ctx.note(absl::InvalidArgumentError(cat(
            module, ": input ", i, " of ", node.op, " was made inside the forward by an op with no backward rule (a "
            "kernel called through ctx.ops()), so no gradient can pass it: use graph/functional.h's ops, or write ",
            module, "::backward")));
        continue;
      }
      // May this gradient be added into in place? Not when it is dy or
      // shares memory with another gradient alive now.
      bool fresh = !shares(in[i], dy) && (g_owned || !shares(in[i], g));
      for (size_t j = 0; fresh && j < in.size(); ++j) fresh = j == i || !shares(in[i], in[j]);
      for (size_t j = 0; fresh && j < grads.size(); ++j) fresh = j == vi || !shares(in[i], grads[j]);
      Tensor& acc = grads[vi];
      if (!acc.defined()) {
        acc = in[i];
        owned[vi] = fresh;
      } else if (owned[vi]) {
        ctx.ops().add(acc, in[i], acc);
      } else if (fresh) {
        ctx.ops().add(in[i], acc, in[i]);
        acc = in[i];
        owned[vi] = true;
      } else {
        Tensor sum = ctx.activation(acc.shape(), acc.dtype());
        ctx.ops().add(acc, in[i], sum);
        acc = sum;
        owned[vi] = true;
      }
    }
  }
  nodes_.clear();
  return grads[0];
}

}  // namespace zero
