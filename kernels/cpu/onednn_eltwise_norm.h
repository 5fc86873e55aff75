// oneDNN's layer normalization and GELU (tanh form), forward and backward,
// with primitives cached per shape. Layer-norm scale/shift are fp32 in
// oneDNN, so 16-bit gamma/beta are converted in the workspace, and the
// parameter gradients (which oneDNN overwrites) are staged in fp32 and then
// accumulated into the gradient buffers, as the Ops contract requires.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include "absl/container/flat_hash_map.h"
#include "core/tensor.h"
#include "kernels/workspace_arena.h"

namespace zero::cpu {

class OneDnnLayerNorm {
 public:
  // dry_run: as OneDnnMatmul's (shapes checked, workspace carved, nothing run).
  explicit OneDnnLayerNorm(WorkspaceArena& workspace, bool dry_run = false)
      : workspace_(workspace), dry_run_(dry_run) {}
  void forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
               const Tensor& mean, const Tensor& var);
  void backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                const Tensor& var, float eps, const Tensor& dx, const Tensor& dgamma,
                const Tensor& dbeta);

 private:
  struct Entry {
    dnnl::layer_normalization_forward::primitive_desc fwd_pd;
    dnnl::layer_normalization_forward fwd;
    dnnl::layer_normalization_backward::primitive_desc bwd_pd;
    dnnl::layer_normalization_backward bwd;
  };
  Entry& lookup(int64_t rows, int64_t cols, float eps);

  WorkspaceArena& workspace_;
  bool dry_run_;
  absl::flat_hash_map<std::tuple<int64_t, int64_t, float>, Entry> cache_;
};

class OneDnnGelu {
 public:
  explicit OneDnnGelu(WorkspaceArena& workspace, bool dry_run = false)
      : workspace_(workspace), dry_run_(dry_run) {}
  void forward(const Tensor& x, const Tensor& y);
  void backward(const Tensor& x, const Tensor& dy, const Tensor& dx);

 private:
  struct Entry {
    dnnl::eltwise_forward::primitive_desc fwd_pd;
    dnnl::eltwise_forward fwd;
    dnnl::eltwise_backward::primitive_desc bwd_pd;
    dnnl::eltwise_backward bwd;
  };
  Entry& lookup(int64_t n);

  WorkspaceArena& workspace_;
  bool dry_run_;
  absl::flat_hash_map<int64_t, Entry> cache_;
};

}  // namespace zero::cpu
