// The fused-loop kernels of the pointwise_fusion backend: its instruction set and the one entry
// point that runs a compiled program over a range of elements. Plain C++, no LibTorch: the
// kernels are built once per instruction-set level (kernels.cpp, compiled with and without
// AVX2 / AVX-512 flags) and the best one for the running CPU is chosen when the library loads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace pointwise {

/// The operations of a fused program. Each computes one value per element from up to three
/// operands (`a`, `b`, `c`) and a number fixed at preprocess (`imm`).
enum class op : std::uint8_t {
  // unary
  neg, abs, relu, sigmoid, tanh, exp, log, sqrt, rsqrt, reciprocal, square, cube,
  pow,        // a ** imm, for any other constant exponent
  gelu_erf,   // F.gelu(a)
  gelu_tanh,  // F.gelu(a, approximate='tanh')
  silu,
  add_imm,  // a + imm: compile's form of an add or sub with a constant (one load less per element)
  mul_imm,  // a * imm
  copy,
  // binary
  add, sub, mul, div,
  add_scaled,  // a + imm * b (add / sub / rsub with alpha)
  minimum, maximum,  // NaN-propagating, like torch.minimum / torch.maximum / clamp
  lt, le, gt, ge, eq, ne,  // 1.0 or 0.0
  // ternary
  where,  // a != 0 ? b : c
};

inline constexpr int op_count = static_cast<int>(op::where) + 1;

/// The number of operands an op reads.
constexpr int arity(op code) {
  if (code <= op::copy) return 1;
  if (code <= op::ne) return 2;
  return 3;
}

/// The op's name in the payload text ("gelu_tanh").
std::string_view op_name(op code);

/// One step of a compiled program: `slot[dst] = code(slot[a], slot[b], slot[c]; imm)`, then, where
/// compile merged a following multiply or add by a constant into it (an affine epilogue),
/// `slot[dst] = slot[dst] * scale + shift` before the value is stored. 1 and -0.0 leave every
/// value as it is (NaN, infinities and the sign of zero included), so a step that only scales or
/// only shifts keeps the other part's identity.
struct step {
  op code;
  std::uint32_t dst = 0, a = 0, b = 0, c = 0;
  float imm = 0;
  bool scales = false, shifts = false;  // an epilogue multiplies by `scale`, adds `shift`
  float scale = 1.0f, shift = -0.0f;
};

/// Where a value (a slot) lives while a kernel runs.
enum class slot_kind : std::uint8_t {
  float_stream,  // float32 memory of the whole iteration range (an input or an output tensor)
  bool_input,    // a bool tensor, converted to 1.0 / 0.0 block by block
  bool_output,   // computed as 1.0 / 0.0, stored to a bool tensor block by block
  scalar,        // one number for every element
  scratch,       // an intermediate value: a block-sized buffer, reused once the value is dead
};

struct slot_binding {
  slot_kind kind = slot_kind::scratch;
  std::uint32_t scratch = 0;  // its block buffer (every kind but float_stream)
  void* base = nullptr;       // float_stream: float*; bool_input / bool_output: bool storage
  float scalar = 0;           // scalar: the value
};

/// One kernel call: the program, where each slot lives, and how many block buffers it needs.
struct kernel_call {
  const step* steps = nullptr;
  std::size_t step_count = 0;
  const slot_binding* slots = nullptr;
  std::size_t slot_count = 0;
  std::size_t scratch_count = 0;
};

/// Elements per block: every value of a block stays in the L1 cache between steps.
inline constexpr std::int64_t block_size = 512;

/// Runs the program on elements [begin, end) of the iteration range.
using kernel_function = void (*)(const kernel_call& call, std::int64_t begin, std::int64_t end);

/// One build of the kernels.
struct kernel_set {
  std::string_view isa;  // "avx512", "avx2" or "baseline" (SSE2)
  kernel_function run = nullptr;
};

/// The kernels for this CPU: AVX-512 (F, DQ, BW, VL) where present, else AVX2 + FMA, else the
/// baseline; the environment variable POINTWISE_FUSION_ISA=avx512|avx2|baseline caps the choice.
const kernel_set& selected_kernels();

/// A build by name, if this CPU can run it; else null.
const kernel_set* kernels_named(std::string_view isa);

/// Makes `isa` the build that selected_kernels() returns from now on, if this CPU runs it (tests
/// and benchmarks compare the levels in one process); false, and no change, if it does not.
bool select_kernels(std::string_view isa);

}  // namespace pointwise
