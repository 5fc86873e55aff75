// Automatic backward for one module call: the ops a module's forward calls
// through graph/functional.h (and the child modules it calls through
// Context::forward) are recorded here, in the call's frame, and the module's
// backward replays them in reverse. Each op's backward rule is written once,
// with the op, over the backends' kernels; a rule keeps what its backward
// needs (the saved tensors), and the frame frees them after the replay.
//
// Values. The frame's input is value 0; every recorded op's output is a new
// value. An op's input is matched to a value by its memory (the storage, the
// byte offset and the element count: a reshaped view of a value is that
// value), held weakly, so a value whose buffer is gone matches nothing. A
// tensor that is not a value (a parameter's data, a constant the module
// made) gets no gradient. A tensor an op with no backward rule produced
// inside the call (a kernel called directly through ctx.ops()) is recorded
// as such, and a gradient that would have to pass through it is an error
// naming the module and the op that consumed it.
//
// Replay: the gradient of the call's output starts at dy; each node, last
// first, turns its output's gradient into its inputs'; gradients meeting at
// one value add up, into the first one when it is not shared with another
// value (added in place, as a hand-written backward would), else into a new
// buffer. The result is the gradient of value 0, the module's dx. A node
// whose output got no gradient is skipped, and each parameter its op (or its
// child call) uses that wants a gradient is named in a warning on stderr,
// once per process: backward never reaches that use of it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/tensor.h"

namespace zero {

class Context;
class Module;
class Parameter;

// An op's backward rule: the gradients of its inputs (in the order they were
// recorded; an undefined tensor for an input that gets none) from the
// gradient of its output. Parameter gradients are accumulated by the rule.
// dy has the output's recorded shape. When Context::grad_writable(dy) holds
// (asked first thing: it is reset by the next rule), dy belongs to this rule
// alone and may be overwritten (an in-place backward, as the former hand-written
// layers did).
using BackwardRule = std::function<std::vector<Tensor>(Context& ctx, const Tensor& dy)>;

class Tape {
 public:
  // The call's input (value 0). Called once, before any op.
  void begin(const Tensor& input);
  // Records `op` with its inputs (any tensors; those that are values get
  // gradients), its output, the parameters it uses (named by the warning when
  // backward skips it) and, for a child module's call, that module (its
  // subtree's parameters are the ones it uses).
  void record(std::string op, const std::vector<Tensor>& inputs, const Tensor& output, BackwardRule rule,
              std::vector<Parameter*> params = {}, Module* module = nullptr);
  // Notes a buffer made inside the call by an op that records nothing.
  void note_unrecorded(const Tensor& t);
  // The call's output (after its forward returned).
  void end(const Tensor& output);
  // dx of the call from dy of its output, running the rules in reverse and
  // then dropping them; `module` names the errors (an input made by an op
  // with no rule, an output no recorded op made), which go to ctx.note().
  Tensor replay(Context& ctx, const Tensor& dy, const std::string& module);

 private:
  static constexpr int kNotAValue = -1;
  static constexpr int kUnrecorded = -2;  // made by an op with no rule

  struct Value {
    std::weak_ptr<Storage> storage;
    bool owned = false;  // it had a storage (else wrapped memory)
    const void* data = nullptr;
    int64_t numel = 0;
    Shape shape;  // as recorded: gradients reaching it are viewed so
    int producer = -1;  // node index; -1: the call's input; kUnrecorded
  };
  struct Node {
    std::string op;
    std::vector<int> inputs;  // value ids, or kNotAValue
    int output = 0;
    BackwardRule rule;
    std::vector<Parameter*> params;
    Module* module = nullptr;
  };
  // The warning for a node backward skips (see the top of this file).
  static void warn_unreached(const Node& node, const std::string& module);
  // The value `t` is, or kNotAValue.
  int find(const Tensor& t) const;
  int add_value(const Tensor& t, int producer);

  std::vector<Value> values_;
  std::vector<Node> nodes_;
  int output_ = kNotAValue;
};

}  // namespace zero
