// The fused loop, built once per instruction-set level: meson compiles this file three times,
// with POINTWISE_ISA=baseline (x86-64's SSE2), avx2 (-mavx2 -mfma) and avx512 (-mavx512f/dq/bw/vl),
// and kernel_dispatch.cpp picks one at run time. Nothing here needs -march=native.
//
// How it runs: the iteration range is cut into blocks of block_size elements; for each block
// every step runs one loop over the block, reading and writing block buffers that stay in L1.
// Memory is touched once per input and once per output: no intermediate tensor exists. Each
// step's loop is plain C++ that GCC vectorizes at the width of the ISA it is compiled for;
// transcendental functions are written here as polynomials with selects instead of branches
// (libm calls do not vectorize). Compiled with -fno-math-errno (so that sqrt is one
// instruction), and without -ffast-math: NaN and infinities follow IEEE rules.
//
// Everything is in a namespace named after the ISA: the three builds define the same inline
// functions, and with one shared name the linker could keep the AVX-512 copy for all of them.
#include "kernels.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <algorithm>
#include <cstdlib>
#include <limits>
#include <memory>
#include <vector>

#ifndef POINTWISE_ISA
#error "compile with -DPOINTWISE_ISA=baseline|avx2|avx512"
#endif
#define POINTWISE_CONCAT2(a, b) a##b
#define POINTWISE_CONCAT(a, b) POINTWISE_CONCAT2(a, b)
#define POINTWISE_STRING2(a) #a
#define POINTWISE_STRING(a) POINTWISE_STRING2(a)

namespace pointwise::POINTWISE_CONCAT(isa_, POINTWISE_ISA) {
namespace {

constexpr float inf = std::numeric_limits<float>::infinity();
constexpr float nan = std::numeric_limits<float>::quiet_NaN();

/// condition ? if_true : if_false, as bit operations: GCC 12 does not if-convert the three-way
/// joins that its jump threading makes of chained ?: (GCC 13 does), and a loop with a branch
/// left in it is not vectorized.
inline float select(bool condition, float if_true, float if_false) {
  const std::uint32_t mask = 0u - static_cast<std::uint32_t>(condition);
  return std::bit_cast<float>((std::bit_cast<std::uint32_t>(if_true) & mask) |
                              (std::bit_cast<std::uint32_t>(if_false) & ~mask));
}

/// 2^n for n in [-150, 128] as two factors (each a normal float), so that the product rounds
/// to a subnormal or overflows to infinity where the exact result does.
inline float scale_by_power_of_two(float value, std::int32_t n) {
  const std::int32_t half = n >> 1;
  const float first = std::bit_cast<float>((half + 127) << 23);
  const float second = std::bit_cast<float>((n - half + 127) << 23);
  return value * first * second;
}

/// Cephes' expf core: e^z = p * 2^n for |z| < 104, n = round(z / ln 2) by the 1.5 * 2^23 shift
/// (no conversions), p the polynomial of the remainder.
inline float exp_reduced(float z, std::int32_t& n) {
  constexpr float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float shifted = z * 1.44269504088896341f + shifter;
  const float fn = shifted - shifter;
  n = std::bit_cast<std::int32_t>(shifted) - std::bit_cast<std::int32_t>(shifter);
  float r = z - fn * 0.693359375f;
  r = r - fn * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return p * (r * r) + r + 1.0f;
}

/// e^x, relative error ~2 ulp; exact 0, inf and NaN behaviour, subnormal results.
inline float exp_(float x) {
  const bool is_nan = x != x;
  float clamped = select(x < -104.0f, -104.0f, x);
  clamped = select(clamped > 88.8f, 88.8f, clamped);
  clamped = select(is_nan, 0.0f, clamped);
  std::int32_t n = 0;
  const float p = exp_reduced(clamped, n);  // before n is read: argument order is unspecified
  float result = scale_by_power_of_two(p, n);
  result = select(x < -104.0f, 0.0f, result);
  result = select(x > 88.72283935546875f, inf, result);
  return select(is_nan, x, result);
}

/// ln x, relative error ~2 ulp (Cephes' logf polynomial); subnormals, 0, negatives, inf, NaN.
inline float log_(float x) {
  const bool subnormal = x < 1.17549435e-38f;
  const float normal = select(subnormal, x * 8388608.0f, x);
  const std::int32_t bits = std::bit_cast<std::int32_t>(normal);
  const std::int32_t exponent = ((bits >> 23) & 0xff) - 126 - 23 * static_cast<std::int32_t>(subnormal);
  float m = std::bit_cast<float>((bits & 0x007fffff) | 0x3f000000);  // in [0.5, 1)
  float e = static_cast<float>(exponent);
  const bool below = m < 0.707106781186547524f;
  e = select(below, e - 1.0f, e);
  m = select(below, m + m - 1.0f, m - 1.0f);
  const float z = m * m;
  float y = 7.0376836292e-2f;
  y = y * m - 1.1514610310e-1f;
  y = y * m + 1.1676998740e-1f;
  y = y * m - 1.2420140846e-1f;
  y = y * m + 1.4249322787e-1f;
  y = y * m - 1.6668057665e-1f;
  y = y * m + 2.0000714765e-1f;
  y = y * m - 2.4999993993e-1f;
  y = y * m + 3.3333331174e-1f;
  y = y * m * z;
  y = y + e * -2.12194440e-4f;
  y = y - 0.5f * z;
  float result = m + y + e * 0.693359375f;
  result = select(x == inf, inf, result);
  result = select(x == 0.0f, -inf, result);
  result = select(x < 0.0f, nan, result);
  return select(x != x, x, result);
}

/// e^z for z in [0, 40] or NaN (tanh's argument): no clamping, no subnormal or overflow paths.
inline float exp_bounded(float z) {
  std::int32_t n = 0;
  const float p = exp_reduced(z, n);
  return p * std::bit_cast<float>((n + 127) << 23);
}

/// tanh x: Cephes' tanhf polynomial below 0.625, 1 - 2 / (e^2|x| + 1) above (2|x| capped at
/// 40, where the result is 1 in float).
inline float tanh_(float x) {
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397044842e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = p * z * x + x;
  const float magnitude = std::abs(x);
  const float doubled = magnitude + magnitude;
  const float large_magnitude = 1.0f - 2.0f / (exp_bounded(select(doubled > 40.0f, 40.0f, doubled)) + 1.0f);
  const float large = select(x < 0.0f, -large_magnitude, large_magnitude);
  return select(magnitude < 0.625f, small, large);  // NaN: the comparison fails, large is NaN
}

inline float sigmoid_(float x) { return 1.0f / (1.0f + exp_(-x)); }

/// erfc z for z >= 0, fractional error < 1.2e-7 (Numerical Recipes' erfcc): the negative side
/// of the exact GELU keeps its relative accuracy where 1 + erf(x) cancels.
inline float erfc_nonnegative(float z) {
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  return t * exp_(-z * z + p);
}

/// x * Phi(x) = x/2 * erfc(-x / sqrt 2).
inline float gelu_erf_(float x) {
  const float z = std::abs(x) * 0.707106781186547524f;
  const float tail = erfc_nonnegative(z);
  const float erfc_of_minus = select(x < 0.0f, tail, 2.0f - tail);
  return 0.5f * x * erfc_of_minus;  // -inf: -inf * 0 = NaN, as torch gives
}

inline float gelu_tanh_(float x) {
  const float inner = 0.797884560802865355f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanh_(inner));
}

/// a ** e for a constant exponent other than +-0.5, +-1, +-2, 3 (preprocess uses other ops for those):
/// e^(e ln|a|), with the sign of a for odd integer exponents and NaN for negative a otherwise.
struct power {
  float exponent;
  bool integral, odd;
  explicit power(float e)
      : exponent(e), integral(std::nearbyint(e) == e), odd(integral && std::fmod(std::abs(e), 2.0f) == 1.0f) {}
  float operator()(float a) const {
    const float magnitude = exp_(exponent * log_(std::abs(a)));
    const bool sign = std::bit_cast<std::uint32_t>(a) >> 31;  // -0 too: (-0) ** -3 is -inf
    float result = select(sign && odd, -magnitude, magnitude);
    result = select(a < 0.0f && a != -inf && !integral, nan, result);  // (-inf) ** 2.5 is inf
    result = select(a == 1.0f || exponent == 0.0f, 1.0f, result);  // 1 ** y and x ** 0 are 1, NaN included
    return result;
  }
};

inline float minimum_(float a, float b) {
  float r = select(a < b, a, b);
  r = select(b != b, b, r);
  return select(a != a, a, r);
}
inline float maximum_(float a, float b) {
  float r = select(a > b, a, b);
  r = select(b != b, b, r);
  return select(a != a, a, r);
}

// -- one loop per op: GCC vectorizes each over the block --------------------------------------
// E is the step's epilogue, applied to each value before it is stored: none, or compile's merged
// multiply and add by constants (with FMA, where the ISA has it, one rounding instead of two).
struct no_epilogue {
  float operator()(float v) const { return v; }
};
struct affine_epilogue {
  float scale, shift;
  float operator()(float v) const { return v * scale + shift; }
};

template <class E, class F>
inline void unary(float* __restrict dst, const float* __restrict a, std::int64_t n, E e, F f) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = e(f(a[i]));
}
template <class E, class F>
inline void binary(float* __restrict dst, const float* __restrict a, const float* __restrict b, std::int64_t n, E e, F f) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = e(f(a[i], b[i]));
}

template <class E>
inline void run_step(const step& s, float* const* at, std::int64_t n, E e) {
  float* __restrict d = at[s.dst];
  const float* a = at[s.a];
  const float* b = at[s.b];
  const float* c = at[s.c];
  const float k = s.imm;
  switch (s.code) {
    case op::neg: return unary(d, a, n, e, [](float x) { return -x; });
    case op::abs: return unary(d, a, n, e, [](float x) { return std::abs(x); });
    case op::relu: return unary(d, a, n, e, [](float x) { return select(x < 0.0f, 0.0f, x); });
    case op::sigmoid: return unary(d, a, n, e, [](float x) { return sigmoid_(x); });
    case op::tanh: return unary(d, a, n, e, [](float x) { return tanh_(x); });
    case op::exp: return unary(d, a, n, e, [](float x) { return exp_(x); });
    case op::log: return unary(d, a, n, e, [](float x) { return log_(x); });
    case op::sqrt: return unary(d, a, n, e, [](float x) { return std::sqrt(x); });
    case op::rsqrt: return unary(d, a, n, e, [](float x) { return 1.0f / std::sqrt(x); });
    case op::reciprocal: return unary(d, a, n, e, [](float x) { return 1.0f / x; });
    case op::square: return unary(d, a, n, e, [](float x) { return x * x; });
    case op::cube: return unary(d, a, n, e, [](float x) { return x * x * x; });
    case op::pow: return unary(d, a, n, e, power(k));
    case op::gelu_erf: return unary(d, a, n, e, [](float x) { return gelu_erf_(x); });
    case op::gelu_tanh: return unary(d, a, n, e, [](float x) { return gelu_tanh_(x); });
    case op::silu: return unary(d, a, n, e, [](float x) { return x / (1.0f + exp_(-x)); });
    case op::add_imm: return unary(d, a, n, e, [k](float x) { return x + k; });
    case op::mul_imm: return unary(d, a, n, e, [k](float x) { return x * k; });
    case op::copy: return unary(d, a, n, e, [](float x) { return x; });
    case op::add: return binary(d, a, b, n, e, [](float x, float y) { return x + y; });
    case op::sub: return binary(d, a, b, n, e, [](float x, float y) { return x - y; });
    case op::mul: return binary(d, a, b, n, e, [](float x, float y) { return x * y; });
    case op::div: return binary(d, a, b, n, e, [](float x, float y) { return x / y; });
    case op::add_scaled: return binary(d, a, b, n, e, [k](float x, float y) { return x + k * y; });
    case op::minimum: return binary(d, a, b, n, e, [](float x, float y) { return minimum_(x, y); });
    case op::maximum: return binary(d, a, b, n, e, [](float x, float y) { return maximum_(x, y); });
    case op::lt: return binary(d, a, b, n, e, [](float x, float y) { return select(x < y, 1.0f, 0.0f); });
    case op::le: return binary(d, a, b, n, e, [](float x, float y) { return select(x <= y, 1.0f, 0.0f); });
    case op::gt: return binary(d, a, b, n, e, [](float x, float y) { return select(x > y, 1.0f, 0.0f); });
    case op::ge: return binary(d, a, b, n, e, [](float x, float y) { return select(x >= y, 1.0f, 0.0f); });
    case op::eq: return binary(d, a, b, n, e, [](float x, float y) { return select(x == y, 1.0f, 0.0f); });
    case op::ne: return binary(d, a, b, n, e, [](float x, float y) { return select(x != y, 1.0f, 0.0f); });
    case op::where:
      for (std::int64_t i = 0; i < n; ++i) d[i] = e(select(a[i] != 0.0f, b[i], c[i]));
      return;
  }
}

/// Block buffers of the calling thread, aligned for the widest vectors; kept between calls.
float* thread_scratch(std::size_t floats) {
  struct aligned_free {
    void operator()(float* p) const { std::free(p); }
  };
  thread_local std::unique_ptr<float, aligned_free> buffer;
  thread_local std::size_t capacity = 0;
  if (floats > capacity) {
    buffer.reset(static_cast<float*>(std::aligned_alloc(64, floats * sizeof(float))));
    if (!buffer) throw std::bad_alloc();
    capacity = floats;
  }
  return buffer.get();
}

/// Runs one step with its epilogue, if it has one.
inline void run_with_epilogue(const step& s, float* const* at, std::int64_t n) {
  if (s.scales || s.shifts)
    run_step(s, at, n, affine_epilogue{s.scale, s.shift});
  else
    run_step(s, at, n, no_epilogue{});
}

/// For a program of one step whose operands and result are all float tensors in memory (a lone
/// op, perhaps with its epilogue): points `at` at them from `begin` and returns true; it then needs
/// no block buffers. Otherwise false, and `at` is left to the blocks.
bool bind_streams_only(const kernel_call& call, std::int64_t begin, float** at) {
  if (call.step_count != 1) return false;
  const step& s = call.steps[0];
  const std::uint32_t used[4] = {s.dst, s.a, s.b, s.c};
  for (int i = 0; i <= arity(s.code); ++i)
    if (call.slots[used[i]].kind != slot_kind::float_stream) return false;
  for (int i = 0; i <= arity(s.code); ++i) at[used[i]] = static_cast<float*>(call.slots[used[i]].base) + begin;
  return true;
}

void run(const kernel_call& call, std::int64_t begin, std::int64_t end) {
  thread_local std::vector<float*> at;
  at.resize(call.slot_count);
  if (bind_streams_only(call, begin, at.data())) {  // one loop over the whole range, no blocks' set-up
    run_with_epilogue(call.steps[0], at.data(), end - begin);
    return;
  }
  float* scratch = thread_scratch((call.scratch_count + 1) * block_size);
  const std::int64_t filled = std::min(block_size, end - begin);  // a small call fills little
  for (std::size_t i = 0; i < call.slot_count; ++i) {
    const slot_binding& slot = call.slots[i];
    at[i] = scratch + slot.scratch * block_size;
    if (slot.kind == slot_kind::scalar)
      for (std::int64_t j = 0; j < filled; ++j) at[i][j] = slot.scalar;
  }
  for (std::int64_t offset = begin; offset < end; offset += block_size) {
    const std::int64_t n = std::min(block_size, end - offset);
    for (std::size_t i = 0; i < call.slot_count; ++i) {
      const slot_binding& slot = call.slots[i];
      if (slot.kind == slot_kind::float_stream) {
        at[i] = static_cast<float*>(slot.base) + offset;
      } else if (slot.kind == slot_kind::bool_input) {
        const bool* source = static_cast<const bool*>(slot.base) + offset;
        for (std::int64_t j = 0; j < n; ++j) at[i][j] = source[j] ? 1.0f : 0.0f;
      }
    }
    for (std::size_t s = 0; s < call.step_count; ++s) run_with_epilogue(call.steps[s], at.data(), n);
    for (std::size_t i = 0; i < call.slot_count; ++i) {
      const slot_binding& slot = call.slots[i];
      if (slot.kind != slot_kind::bool_output) continue;
      bool* target = static_cast<bool*>(slot.base) + offset;
      for (std::int64_t j = 0; j < n; ++j) target[j] = at[i][j] != 0.0f;
    }
  }
}

}  // namespace

extern const kernel_set kernels{POINTWISE_STRING(POINTWISE_ISA), &run};

}  // namespace pointwise::POINTWISE_CONCAT(isa_, POINTWISE_ISA)
