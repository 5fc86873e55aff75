// The stage factory; see model_state.h.
#include "zero/model_state.h"

#include <algorithm>

#include "runtime/base/status.h"
#include "runtime/base/strings.h"
#include "zero/flat_model_state.h"
#include "zero/stage3_model_state.h"

namespace zero {

absl::StatusOr<std::unique_ptr<ModelState>> ModelState::create(Module& model, const ModelStateOptions& options,
                                                               Backend& backend, Communicator& comm) {
  const int stage = options.zero.stage;
  if (stage < 0 || stage > 3) return absl::InvalidArgumentError(cat("ZeRO stage ", stage, " does not exist (0-3)"));
  if (stage == 3) {
    auto s = std::make_unique<Stage3ModelState>(model, options, backend, comm);
    ZE_RETURN_IF_ERROR(s->init());
    return std::unique_ptr<ModelState>(std::move(s));
  }
  auto s = std::make_unique<FlatModelState>(model, options, backend, comm);
  ZE_RETURN_IF_ERROR(s->init());
  return std::unique_ptr<ModelState>(std::move(s));
}

void ModelState::step_sub_groups(const Tensor& master, const Tensor& grads, const Tensor& param_out,
                                 const Optimizer::StepArgs& args) {
  const int64_t n = master.numel();
  const int64_t group = std::max<int64_t>(1, std::min(options_.zero.sub_group_size, n));
  for (int64_t o = 0; o < n; o += group) {
    const Shape s{std::min(group, n - o)};
    optimizer_->step(master.slice(o, s), grads.slice(o, s), param_out.defined() ? param_out.slice(o, s) : Tensor(),
                     args, o);
  }
}

}  // namespace zero
