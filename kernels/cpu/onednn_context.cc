// oneDNN engine singleton.
#include "kernels/cpu/onednn_context.h"

namespace zero::cpu {

OneDnn& OneDnn::get() {
  static OneDnn* ctx = new OneDnn();  // lives for the process; primitives may outlive statics
  return *ctx;
}

}  // namespace zero::cpu
