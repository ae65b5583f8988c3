// The onednn backend's runtime switches: one table (name, default, what it changes), declared to
// torch-delegate when the backend's code is loaded. docs/runtime-switches.md is generated from it
// (python -m torch_delegate switches), and the timing cache's machine key reads it.
#include "gemm.hpp"
#include "plan.hpp"

#include <torch_delegate/runtime_switches.hpp>

#include <array>
#include <cstdlib>
#include <string>

namespace onednn_delegate {
namespace {

constexpr std::array<torch_delegate::runtime_switch, 18> onednn_switches{{
    {"TD_ONEDNN_UNAVAILABLE", "unset", "set: is_available() is false, as in a LibTorch built without oneDNN (to try a fallback)", false},
    {"TD_ONEDNN_WINOGRAD", "1", "0: 3x3 convolutions never run as Winograd F(4x4, 3x3) kernels of ours"},
    {"TD_ONEDNN_RECURRENCE", "1",
     "0: LSTM and GRU layers run on oneDNN's RNN primitives, not on a matmul and a recurrence kernel of ours (AVX2)"},
    {"TD_ONEDNN_SILU", "1", "0: SiLU runs as oneDNN's swish post-op where oneDNN runs AVX2, not on a kernel of ours"},
    {"TD_ONEDNN_GEMM", "1", "0: where oneDNN runs AVX2, Linears and 1x1 convolutions run on oneDNN's kernels, not on our GEMM"},
    {"TD_ONEDNN_GEMM_1X1", "1", "0: 1x1 convolutions never run on our GEMM (Linears still may)"},
    {"TD_ONEDNN_GEMM_L2_BYTES", "the CPU's L2 size", "the L2 size (bytes) our GEMM slices its work for"},
    {"TD_ONEDNN_LINEAR_MATMUL", "1", "0: where oneDNN runs AVX-512, Linears run as inner products, not as matmuls"},
    {"TD_ONEDNN_SUM", "1", "0: a residual add after a convolution is a binary post-op, not oneDNN's in-place sum"},
    {"TD_ONEDNN_BRGCONV", "1", "0: wide direct convolutions keep oneDNN's first pick, not brgconv between reorders"},
    {"TD_ONEDNN_BRGCONV_RESIDUAL", "1", "0: a wide convolution with a residual add is not moved to brgconv in nhwc"},
    {"TD_ONEDNN_CAT_CHAIN", "1", "0: chains of cats (DenseNet's) are copied by concat primitives, not written in place"},
    {"TD_ONEDNN_DIRECT_OUTPUTS", "1", "0: a region's results are copied out of its buffer, not written into the returned tensors"},
    {"TD_ONEDNN_NHWC", "1", "0: where oneDNN runs AVX-512, regions stay in blocked layouts, never channels-last"},
    {"TD_ONEDNN_ONE_THREAD", "1", "0: small steps are split between threads like large ones"},
    {"TD_ONEDNN_SE_WEIGHTS", "1",
     "0: a squeeze-excitation's scale is a binary multiply, not folded into the next 1x1 convolution's weights"},
    {"TD_ONEDNN_CHANNEL_SCALE", "1", "0: a per-channel scale runs as oneDNN's binary, not on a kernel of ours"},
    {"TD_ONEDNN_SHUFFLE", "1", "0: a cat followed by a channel shuffle runs as concat and reorders, not as one copy of ours"},
}};

bool declare_table() {
  torch_delegate::declare_runtime_switches("onednn", onednn_switches);
  return true;
}

}  // namespace

void declare_runtime_switches() {
  static const bool declared = declare_table();
  (void)declared;
}

// Declared when the backend's code is loaded, so that the timing cache keys on them before any plan.
const bool switches_declared_at_load = (declare_runtime_switches(), true);

bool switched_off(const char* variable) {
  declare_runtime_switches();
  return torch_delegate::runtime_switch_off(variable);
}

std::string switch_value(const char* variable) {
  declare_runtime_switches();
  return torch_delegate::runtime_switch_value(variable);
}

std::string gemm::l2_bytes_switch() {
  declare_runtime_switches();
  const char* given = std::getenv("TD_ONEDNN_GEMM_L2_BYTES");  // declared above; its default is the CPU's
  return given ? given : "";
}

}  // namespace onednn_delegate
