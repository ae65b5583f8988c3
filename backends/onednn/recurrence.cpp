// The recurrence kernel of recurrence.hpp.
#include "recurrence.hpp"

#include "avx2_math.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace onednn_delegate::recurrence {

bool cpu_supported() {
  static const bool supported = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return supported;
}

void pack_state_weights(const float* weights, std::int64_t gates_hidden, std::int64_t hidden, float* into) {
  const std::int64_t columns = padded(gates_hidden);
  std::fill(into, into + columns * hidden, 0.0f);
  for (std::int64_t j = 0; j < gates_hidden; ++j)
    for (std::int64_t k = 0; k < hidden; ++k) into[(j / panel) * hidden * panel + k * panel + j % panel] = weights[j * hidden + k];
}

namespace {

constexpr std::int64_t most_rows = 4;

/// 1 / (1 + exp(-x)) for 8 values.
__attribute__((target("avx2,fma"))) inline __m256 sigmoid8(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_div_ps(one, _mm256_add_ps(one, avx2::exp8(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}
/// tanh(x) = 2 / (1 + exp(-2x)) - 1 for 8 values (absolute error about 1e-7).
__attribute__((target("avx2,fma"))) inline __m256 tanh8(__m256 x) {
  const __m256 two = _mm256_set1_ps(2.0f);
  return _mm256_fmsub_ps(two, sigmoid8(_mm256_mul_ps(two, x)), _mm256_set1_ps(1.0f));
}
inline float sigmoid1(float x) { return 1.0f / (1.0f + std::exp(-x)); }
/// a[at..at+8) + b[at..at+8).
__attribute__((target("avx2,fma"))) inline __m256 sum8(const float* a, const float* b, std::int64_t at) {
  return _mm256_add_ps(_mm256_loadu_ps(a + at), _mm256_loadu_ps(b + at));
}

/// out[r][0..columns) = sum over k of h[r][k] * packed[.., k, ..] for R rows: the state's part
/// of every gate. A pass takes panel / R columns of every row (8 accumulators), reading each
/// weight once for the R rows.
template <int R>
__attribute__((target("avx2,fma"))) void state_product(const float* packed, std::int64_t hidden, std::int64_t columns, const float* h,
                                                       float* out) {
  constexpr int vectors = 8 / R;  // per row
  constexpr std::int64_t width = vectors * 8;
  for (std::int64_t first = 0; first < columns; first += width) {
    const float* w = packed + (first / panel) * hidden * panel + first % panel;
    __m256 acc[R][vectors];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int v = 0; v < vectors; ++v) acc[r][v] = _mm256_setzero_ps();
    for (std::int64_t k = 0; k < hidden; ++k, w += panel) {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m256 x = _mm256_broadcast_ss(h + r * hidden + k);
#pragma GCC unroll 8
        for (int v = 0; v < vectors; ++v) acc[r][v] = _mm256_fmadd_ps(_mm256_loadu_ps(w + 8 * v), x, acc[r][v]);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int v = 0; v < vectors; ++v) _mm256_storeu_ps(out + r * columns + first + 8 * v, acc[r][v]);
  }
}

/// An LSTM cell for one row: gates = x (the input's part) + s (the state's); c and h updated in place.
__attribute__((target("avx2,fma"))) void lstm_cell(const float* x, const float* s, std::int64_t hidden, float* c, float* h) {
  std::int64_t j = 0;
  for (; j + 8 <= hidden; j += 8) {
    const __m256 i = sigmoid8(sum8(x, s, j)), f = sigmoid8(sum8(x, s, hidden + j)), candidate = tanh8(sum8(x, s, 2 * hidden + j)),
                 o = sigmoid8(sum8(x, s, 3 * hidden + j));
    const __m256 cell = _mm256_fmadd_ps(f, _mm256_loadu_ps(c + j), _mm256_mul_ps(i, candidate));
    _mm256_storeu_ps(c + j, cell);
    _mm256_storeu_ps(h + j, _mm256_mul_ps(o, tanh8(cell)));
  }
  for (; j < hidden; ++j) {
    const auto gate = [&](std::int64_t g) { return x[g * hidden + j] + s[g * hidden + j]; };
    const float i = sigmoid1(gate(0)), f = sigmoid1(gate(1)), candidate = std::tanh(gate(2)), o = sigmoid1(gate(3));
    c[j] = f * c[j] + i * candidate;
    h[j] = o * std::tanh(c[j]);
  }
}

/// A linear-before-reset GRU cell (PyTorch's): u = sigmoid(x_u + s_u), r = sigmoid(x_r + s_r),
/// n = tanh(x_n + r (s_n + b)), h = u h + (1 - u) n.
__attribute__((target("avx2,fma"))) void gru_cell(const float* x, const float* s, const float* b, std::int64_t hidden, float* h) {
  std::int64_t j = 0;
  for (; j + 8 <= hidden; j += 8) {
    const __m256 u = sigmoid8(sum8(x, s, j)), r = sigmoid8(sum8(x, s, hidden + j));
    const __m256 state = _mm256_add_ps(_mm256_loadu_ps(s + 2 * hidden + j), _mm256_loadu_ps(b + j));
    const __m256 n = tanh8(_mm256_fmadd_ps(r, state, _mm256_loadu_ps(x + 2 * hidden + j)));
    const __m256 previous = _mm256_loadu_ps(h + j);
    _mm256_storeu_ps(h + j, _mm256_fmadd_ps(u, _mm256_sub_ps(previous, n), n));  // n + u (h - n)
  }
  for (; j < hidden; ++j) {
    const float u = sigmoid1(x[j] + s[j]), r = sigmoid1(x[hidden + j] + s[hidden + j]);
    const float n = std::tanh(x[2 * hidden + j] + r * (s[2 * hidden + j] + b[j]));
    h[j] = n + u * (h[j] - n);
  }
}

/// An Elman RNN's cell: h = tanh(x + s), or max(x + s, 0).
__attribute__((target("avx2,fma"))) void elman_cell(const float* x, const float* s, std::int64_t hidden, bool relu, float* h) {
  std::int64_t j = 0;
  for (; j + 8 <= hidden; j += 8) {
    const __m256 sum = sum8(x, s, j);
    _mm256_storeu_ps(h + j, relu ? _mm256_max_ps(sum, _mm256_setzero_ps()) : tanh8(sum));
  }
  for (; j < hidden; ++j) h[j] = relu ? std::max(x[j] + s[j], 0.0f) : std::tanh(x[j] + s[j]);
}

template <int R>
void run_rows(const layer& l, std::int64_t direction, std::int64_t first_row) {
  const std::int64_t hidden = l.hidden, columns = gates(l.kind) * hidden;
  const float* packed = l.packed + direction * padded(columns) * hidden;
  std::vector<float> h(R * hidden), c(R * hidden), s(R * padded(columns));
  for (int r = 0; r < R; ++r) {
    const std::int64_t at = (direction * l.batch + first_row + r) * hidden;
    if (l.h0) std::memcpy(h.data() + r * hidden, l.h0 + at, hidden * sizeof(float));
    if (l.kind == cell::lstm && l.c0) std::memcpy(c.data() + r * hidden, l.c0 + at, hidden * sizeof(float));
  }
  const std::int64_t gate_width = l.directions * columns, out_width = l.directions * hidden;
  for (std::int64_t step = 0; step < l.steps; ++step) {
    const std::int64_t t = direction == 0 ? step : l.steps - 1 - step;
    state_product<R>(packed, hidden, padded(columns), h.data(), s.data());
    for (int r = 0; r < R; ++r) {
      const std::int64_t n = first_row + r;
      const std::int64_t row = l.batch_first ? n * l.steps + t : t * l.batch + n;
      const float* x = l.input_gates + row * gate_width + direction * columns;
      float* state = h.data() + r * hidden;
      const float* product = s.data() + r * padded(columns);
      if (l.kind == cell::lstm)
        lstm_cell(x, product, hidden, c.data() + r * hidden, state);
      else if (l.kind == cell::gru)
        gru_cell(x, product, l.new_gate_bias + direction * hidden, hidden, state);
      else
        elman_cell(x, product, hidden, l.kind == cell::relu, state);
      std::memcpy(l.out + row * out_width + direction * hidden, state, hidden * sizeof(float));
    }
  }
}

}  // namespace

std::int64_t tasks(const layer& l) { return l.directions * ((l.batch + most_rows - 1) / most_rows); }

void run_task(const layer& l, std::int64_t task) {
  const std::int64_t groups = (l.batch + most_rows - 1) / most_rows;
  const std::int64_t direction = task / groups, first = (task % groups) * most_rows;
  switch (std::min(most_rows, l.batch - first)) {
    case 1:
      return run_rows<1>(l, direction, first);
    case 2:
      return run_rows<2>(l, direction, first);
    case 3:
      return run_rows<3>(l, direction, first);
    default:
      return run_rows<4>(l, direction, first);
  }
}

}  // namespace onednn_delegate::recurrence
