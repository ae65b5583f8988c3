// Unit tests of the onednn backend's kernels of ours against references: Winograd's transforms
// against a direct convolution, channel_affine, the GEMM and SiLU against formulas in double, the
// channel shuffle channel by channel. No plan here (their plans: onednn_plans.cpp). Each fails
// when a kernel's result changes.
#include "onednn_test_helpers.hpp"

#include <onednn/channel_affine.hpp>
#include <onednn/gemm.hpp>
#include <onednn/shuffle.hpp>
#include <onednn/silu.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

using namespace onednn_delegate;
using namespace onednn_test;

namespace {

/// Random values in nChw8c order (any order will do for the kernels' test: both read the same).
std::vector<float> random_floats(std::size_t count, unsigned seed) {
  std::vector<float> values(count);
  unsigned state = seed;
  for (float& v : values) {
    state = state * 1664525u + 1013904223u;
    v = static_cast<float>(state >> 8) / static_cast<float>(1u << 24) * 2.f - 1.f;
  }
  return values;
}

/// The Winograd kernels of `g` (transform, a plain matrix product per tile position, transform
/// back) against the direct reference, at a relative tolerance on the largest output.
void check_winograd_kernels(const winograd::geometry& g, const std::vector<winograd::epilogue_op>& ops) {
  const auto src = random_floats(static_cast<std::size_t>(g.n * g.c * g.h * g.w), 1);
  const auto weights = random_floats(static_cast<std::size_t>(g.k * g.c * 9), 2);
  const auto bias = random_floats(static_cast<std::size_t>(g.k), 3);
  const std::size_t outputs = static_cast<std::size_t>(g.n * g.k * g.oh * g.ow);
  const auto residual = random_floats(outputs, 4);
  std::vector<float> u(static_cast<std::size_t>(g.alpha() * g.alpha() * g.c * g.k)), v(g.input_floats()), m(g.product_floats());
  winograd::transform_weights(g, weights.data(), u.data());
  // In two parts split inside an nChw16c block (an odd item): the AVX-512 kernels take whole
  // blocks and leave a lone half to the AVX2 ones.
  const std::int64_t input_items = g.tiles() * (g.c / 8);
  winograd::transform_input(g, src.data(), v.data(), 0, input_items / 2 | 1);
  winograd::transform_input(g, src.data(), v.data(), input_items / 2 | 1, input_items);
  const std::int64_t tiles = g.tiles();
  for (int p = 0; p < g.alpha() * g.alpha(); ++p)
    for (std::int64_t t = 0; t < tiles; ++t)
      for (std::int64_t k = 0; k < g.k; ++k) {
        double sum = 0;
        for (std::int64_t c = 0; c < g.c; ++c) sum += double(v[(p * tiles + t) * g.c + c]) * u[(p * g.c + c) * g.k + k];
        m[(p * tiles + t) * g.k + k] = static_cast<float>(sum);
      }
  std::vector<float> got(outputs, std::nanf("")), want(outputs);
  // In two parts, split as the input's: the ranges the threads are given are independent.
  const std::int64_t items = tiles * (g.k / 8);
  winograd::transform_output(g, m.data(), bias.data(), ops, residual.data(), got.data(), 0, items / 2 | 1);
  winograd::transform_output(g, m.data(), bias.data(), ops, residual.data(), got.data(), items / 2 | 1, items);
  winograd::reference_convolution(g, src.data(), weights.data(), bias.data(), ops, residual.data(), want.data());
  float largest = 0, error = 0;
  for (std::size_t i = 0; i < outputs; ++i) {
    largest = std::max(largest, std::abs(want[i]));
    error = std::max(error, std::abs(got[i] - want[i]));  // a NaN left unwritten fails below
    REQUIRE(!std::isnan(got[i]));
  }
  CAPTURE(g.m);
  CAPTURE(g.oh);
  CHECK(error <= 2e-5f * largest);
}

}  // namespace

TEST_CASE("winograd kernels: F(4x4, 3x3) and F(2x2, 3x3) against a direct convolution, in nChw8c, nChw16c and nhwc") {
  if (!winograd::cpu_supported()) return;  // the kernels are AVX2's (and AVX-512's for 16 lanes); plans do not use them elsewhere
  MESSAGE("16 lanes on the AVX-512 kernels: ", winograd::avx512_supported());
  using op = winograd::epilogue_op;
  const float inf = std::numeric_limits<float>::infinity();
  // nChw8c (AVX2), nChw16c (AVX-512's layout), nhwc with 8 or 16 lanes (a channels-last region's).
  for (const auto& [block, channels_last] : {std::pair{8, false}, std::pair{16, false}, std::pair{8, true}, std::pair{16, true}})
  for (const int m : {4, 2})
    for (const auto& [size, pad] : {std::pair{13, 1}, std::pair{8, 1}, std::pair{7, 0}, std::pair{9, 2}}) {
      winograd::geometry g;
      g.m = m, g.n = 2, g.c = channels_last ? 48 : 16, g.k = block == 8 ? 24 : 32, g.h = size, g.w = size + 2, g.pad_top = pad,
      g.pad_left = pad;
      g.layout_block = block;
      g.channels_last = channels_last;
      g.oh = g.h + 2 * pad - 2, g.ow = g.w + 2 * pad - 2;
      CAPTURE(channels_last);
      check_winograd_kernels(g, {});
      check_winograd_kernels(g, {{op::clip, 0.f, inf}, {op::add}, {op::clip, 0.f, 6.f}});  // relu, residual, relu6
    }
}

TEST_CASE("channel_affine kernels: a scale and shift per channel of strided nhwc pixels, every tail, with and without relu") {
  MESSAGE("kernel: ", std::string(channel_affine::kernel_name()));
  for (const std::int64_t channels : {1, 5, 8, 16, 37, 64})
    for (const std::int64_t stride : {channels, channels + 3, 2 * channels + 16})
      for (const bool relu : {false, true}) {
        const std::int64_t pixels = 11;
        const auto in = random_floats(static_cast<std::size_t>(pixels * stride), 5);
        const auto scale = random_floats(static_cast<std::size_t>(channels), 6), shift = random_floats(static_cast<std::size_t>(channels), 7);
        for (const auto kernel : {&channel_affine::apply, &channel_affine::apply_portable}) {
          std::vector<float> out(static_cast<std::size_t>(pixels * channels + 1), std::nanf(""));
          kernel(in.data(), stride, out.data(), channels, scale.data(), shift.data(), relu, 0, 4);
          kernel(in.data(), stride, out.data(), channels, scale.data(), shift.data(), relu, 4, pixels);
          CAPTURE(channels);
          CAPTURE(stride);
          CAPTURE(relu);
          CAPTURE(kernel == &channel_affine::apply);
          for (std::int64_t p = 0; p < pixels; ++p)
            for (std::int64_t c = 0; c < channels; ++c) {
              const double want = double(in[static_cast<std::size_t>(p * stride + c)]) * scale[static_cast<std::size_t>(c)] + shift[static_cast<std::size_t>(c)];
              REQUIRE(std::abs(out[static_cast<std::size_t>(p * channels + c)] - (relu ? std::max(0.0, want) : want)) <= 1e-6);
            }
          CHECK(std::isnan(out.back()));  // nothing written past the pixels
        }
      }
}

TEST_CASE("channel_affine kernels without a shift: a scale alone (a squeeze-excitation's multiply), in place too") {
  for (const std::int64_t channels : {1, 8, 16, 37, 1152})
    for (const bool in_place : {false, true}) {
      const std::int64_t pixels = 7;
      const auto in = random_floats(static_cast<std::size_t>(pixels * channels), 8);
      const auto scale = random_floats(static_cast<std::size_t>(channels), 9);
      for (const auto kernel : {&channel_affine::apply, &channel_affine::apply_portable}) {
        std::vector<float> out(static_cast<std::size_t>(pixels * channels + 1), std::nanf(""));
        if (in_place) std::copy(in.begin(), in.end(), out.begin());
        const float* from = in_place ? out.data() : in.data();
        kernel(from, channels, out.data(), channels, scale.data(), nullptr, false, 0, 3);
        kernel(from, channels, out.data(), channels, scale.data(), nullptr, false, 3, pixels);
        CAPTURE(channels);
        CAPTURE(in_place);
        CAPTURE(kernel == &channel_affine::apply);
        for (std::int64_t p = 0; p < pixels; ++p)
          for (std::int64_t c = 0; c < channels; ++c) {
            const std::size_t at = static_cast<std::size_t>(p * channels + c);
            REQUIRE(out[at] == in[at] * scale[static_cast<std::size_t>(c)]);  // one rounding, as a product
          }
        CHECK(std::isnan(out.back()));
      }
    }
}

TEST_CASE("gemm kernel: bias + in x weights^T as a product in double, every row count and last panel, only its rows and panels written") {
  if (!winograd::cpu_supported()) return;  // AVX2's; plans do not use it elsewhere
  for (const std::int64_t features : {0, 1, 3, 17, 64})
    for (const std::int64_t outputs : {1, 15, 16, 17, 40})
      for (std::int64_t rows = 1; rows <= 13; ++rows) {
        CAPTURE(features);
        CAPTURE(outputs);
        CAPTURE(rows);
        std::vector<float> in(static_cast<std::size_t>(rows * features)), weights(static_cast<std::size_t>(outputs * features)),
            bias(static_cast<std::size_t>(outputs));
        for (std::size_t i = 0; i < in.size(); ++i) in[i] = std::sin(0.37f * static_cast<float>(i) + 0.1f);
        for (std::size_t i = 0; i < weights.size(); ++i) weights[i] = std::cos(0.71f * static_cast<float>(i));
        for (std::size_t i = 0; i < bias.size(); ++i) bias[i] = 0.25f * static_cast<float>(i) - 1.f;
        std::vector<float> packed(static_cast<std::size_t>(gemm::panels(outputs) * features * gemm::panel_width), 42.f);
        gemm::pack_weights(weights.data(), outputs, features, packed.data());
        const auto want = [&](std::int64_t r, std::int64_t o) {
          double sum = bias[o];
          for (std::int64_t k = 0; k < features; ++k) sum += static_cast<double>(in[r * features + k]) * weights[o * features + k];
          return sum;
        };
        // All of it in one call, then rows [1, rows - 1) of the last panel alone: nothing else written.
        std::vector<float> out(static_cast<std::size_t>(rows * outputs) + 1, 42.f);
        gemm::multiply(in.data(), features, packed.data(), bias.data(), out.data(), outputs, 0, rows, 0, gemm::panels(outputs));
        double worst = 0;
        for (std::int64_t r = 0; r < rows; ++r)
          for (std::int64_t o = 0; o < outputs; ++o) worst = std::max(worst, std::fabs(out[r * outputs + o] - want(r, o)));
        CHECK(worst <= 1e-5 * (1 + features));
        CHECK(out.back() == 42.f);
        for (const std::int64_t slice : {3, 8}) {  // the features a slice at a time: the same result
          CAPTURE(slice);
          std::vector<float> sliced(out.size(), 42.f);
          gemm::multiply(in.data(), features, packed.data(), bias.data(), sliced.data(), outputs, 0, rows, 0, gemm::panels(outputs),
                         gemm::activation::none, slice);
          double worst_sliced = 0;
          for (std::int64_t r = 0; r < rows; ++r)
            for (std::int64_t o = 0; o < outputs; ++o) worst_sliced = std::max(worst_sliced, std::fabs(sliced[r * outputs + o] - want(r, o)));
          CHECK(worst_sliced <= 1e-5 * (1 + features));
          CHECK(sliced.back() == 42.f);
        }
        const std::int64_t last = gemm::panels(outputs) - 1;
        for (const std::int64_t slice : {0, 3}) {  // whole, and in slices (each reads back only its own outputs)
          std::fill(out.begin(), out.end(), 42.f);
          gemm::multiply(in.data(), features, packed.data(), bias.data(), out.data(), outputs, 1, rows - 1, last, last + 1,
                         gemm::activation::none, slice);
          for (std::int64_t r = 0; r < rows; ++r)
            for (std::int64_t o = 0; o < outputs; ++o) {
              const bool written = r >= 1 && r < rows - 1 && o >= last * gemm::panel_width;
              if (written)
                CHECK(std::fabs(out[r * outputs + o] - want(r, o)) <= 1e-5 * (1 + features));
              else
                CHECK(out[r * outputs + o] == 42.f);
            }
        }
      }
}

TEST_CASE("gemm kernel in nChw8c strides (a 1x1 convolution): against double, with a residual apart or in place, a ReLU or clip, only its rows and panels written") {
  if (!winograd::cpu_supported()) return;
  // One image of C channels and P pixels in nChw8c: channel c of pixel p at (c / 8) * P * 8 + p * 8 + c % 8.
  const auto at = [](std::int64_t pixels, std::int64_t p, std::int64_t c) { return (c / 8) * pixels * 8 + p * 8 + c % 8; };
  for (const std::int64_t features : {8, 24, 40})
    for (const std::int64_t outputs : {8, 16, 24, 40})
      for (const std::int64_t pixels : {1, 5, 6, 7, 12, 13, 49}) {
        CAPTURE(features);
        CAPTURE(outputs);
        CAPTURE(pixels);
        std::vector<float> in(static_cast<std::size_t>(features * pixels)), weights(static_cast<std::size_t>(outputs * features)),
            bias(static_cast<std::size_t>(outputs)), residual(static_cast<std::size_t>(outputs * pixels));
        for (std::size_t i = 0; i < in.size(); ++i) in[i] = std::sin(0.37f * static_cast<float>(i) + 0.1f);
        for (std::size_t i = 0; i < weights.size(); ++i) weights[i] = std::cos(0.71f * static_cast<float>(i));
        for (std::size_t i = 0; i < bias.size(); ++i) bias[i] = 0.25f * static_cast<float>(i) - 1.f;
        for (std::size_t i = 0; i < residual.size(); ++i) residual[i] = std::cos(0.13f * static_cast<float>(i)) * 3.f;
        std::vector<float> packed(static_cast<std::size_t>(gemm::panels(outputs) * features * gemm::panel_width));
        gemm::pack_weights(weights.data(), outputs, features, packed.data());
        // With a residual: then a ReLU; without: a clip to [-0.5, 1.5] (ReLU6's kind).
        const auto want = [&](std::int64_t p, std::int64_t o, bool added, bool) {
          double sum = bias[o] + (added ? residual[at(pixels, p, o)] : 0.f);
          for (std::int64_t k = 0; k < features; ++k) sum += static_cast<double>(in[at(pixels, p, k)]) * weights[o * features + k];
          return added ? std::max(sum, 0.0) : std::clamp(sum, -0.5, 1.5);
        };
        const gemm::strides image{8, pixels * 8};
        const std::int64_t panels = gemm::panels(outputs);
        for (const bool added : {false, true})
          for (const bool in_place : {false, true}) {
            if (in_place && !added) continue;
            for (const std::int64_t slice : {0, 8}) {
              CAPTURE(added);
              CAPTURE(in_place);
              CAPTURE(slice);
              const gemm::activation then = added ? gemm::activation::relu : gemm::activation::clip;
              // All of it, then pixels [1, P - 1) of the last panel alone over 42s: nothing else written.
              std::vector<float> out(static_cast<std::size_t>(outputs * pixels) + 1, 42.f);
              if (in_place) std::copy(residual.begin(), residual.end(), out.begin());
              const float* addend = !added ? nullptr : in_place ? out.data() : residual.data();
              gemm::multiply(in.data(), image, features, packed.data(), bias.data(), addend, out.data(), image, outputs, 0, pixels, 0,
                             panels, then, slice, -0.5f, 1.5f);
              double worst = 0;
              for (std::int64_t p = 0; p < pixels; ++p)
                for (std::int64_t o = 0; o < outputs; ++o)
                  worst = std::max(worst, std::fabs(out[at(pixels, p, o)] - want(p, o, added, added)));
              CHECK(worst <= 1e-5 * (1 + features));
              CHECK(out.back() == 42.f);
              if (in_place || pixels < 3) continue;
              std::fill(out.begin(), out.end(), 42.f);
              gemm::multiply(in.data(), image, features, packed.data(), bias.data(), addend, out.data(), image, outputs, 1, pixels - 1,
                             panels - 1, panels, then, slice, -0.5f, 1.5f);
              for (std::int64_t p = 0; p < pixels; ++p)
                for (std::int64_t o = 0; o < outputs; ++o) {
                  const bool written = p >= 1 && p < pixels - 1 && o >= (panels - 1) * gemm::panel_width;
                  if (written)
                    CHECK(std::fabs(out[at(pixels, p, o)] - want(p, o, added, added)) <= 1e-5 * (1 + features));
                  else
                    CHECK(out[at(pixels, p, o)] == 42.f);
                }
            }
          }
      }
}

TEST_CASE("gemm kernel: work split into whole 6-row blocks, every row in one, units the threads share evenly where a few more blocks do it") {
  for (const std::int64_t threads : {1, 2, 3, 4})
    for (const std::int64_t panels : {1, 2, 3, 9, 13, 64})
      for (const std::int64_t rows : {1, 5, 6, 7, 49, 196, 197, 3136}) {
        CAPTURE(threads);
        CAPTURE(panels);
        CAPTURE(rows);
        const gemm::work_split split = gemm::split_work(rows, panels, threads);
        CHECK(split.block_rows % 6 == 0);
        CHECK(split.blocks >= 1);
        CHECK((split.blocks - 1) * split.block_rows < rows);  // no empty block
        CHECK(split.blocks * split.block_rows >= rows);       // every row in one
        if (panels == 1 && rows >= 3136) CHECK(split.blocks >= 4 * threads);  // rows enough: 4 units a thread
      }
  // 13 panels of 196 rows on 2 threads: 26 units, not 13 (7 and 6 a thread).
  CHECK(gemm::split_work(196, 13, 2).blocks * 13 % 2 == 0);
  CHECK(gemm::split_work(196, 13, 2).blocks == 2);
  CHECK(gemm::split_work(196, 64, 2).blocks == 1);  // 64 units already
  CHECK(gemm::split_work(3, 5, 2).blocks == 1);     // one 6-row step: no more blocks to be had
}

TEST_CASE("gemm kernel: the features a slice at a time where a panel and its rows would not fit the L2 cache") {
  CHECK(gemm::features_per_slice(3072, 1 << 20) == 3072);     // 264 KB: whole in 1 MB
  CHECK(gemm::features_per_slice(3072, 512 << 10) == 3072);   // and in 512 KB
  CHECK(gemm::features_per_slice(3072, 256 << 10) == 1536);   // 2 slices in 256 KB
  CHECK(gemm::features_per_slice(768, 256 << 10) == 768);
  CHECK(gemm::features_per_slice(10000, 256 << 10) == 1672);  // 6 slices, rounded up to 8
  CHECK(gemm::features_per_slice(4, 1) == 4);
  CHECK(gemm::features_per_slice(0, 1 << 20) == 1);
  CHECK(gemm::l2_cache_bytes() > 0);
  if (!winograd::cpu_supported()) return;
  // An activation after the last slice only: ReLU and GELU of 17 features in slices of 4.
  const std::int64_t features = 17, outputs = 20, rows = 7;
  std::vector<float> in(rows * features), weights(outputs * features), bias(outputs, -0.5f);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = std::sin(0.3f * static_cast<float>(i));
  for (std::size_t i = 0; i < weights.size(); ++i) weights[i] = std::cos(0.7f * static_cast<float>(i));
  std::vector<float> packed(static_cast<std::size_t>(gemm::panels(outputs) * features * gemm::panel_width));
  gemm::pack_weights(weights.data(), outputs, features, packed.data());
  for (const gemm::activation then : {gemm::activation::relu, gemm::activation::gelu_erf}) {
    std::vector<float> whole(rows * outputs), sliced(rows * outputs);
    gemm::multiply(in.data(), features, packed.data(), bias.data(), whole.data(), outputs, 0, rows, 0, 2, then);
    gemm::multiply(in.data(), features, packed.data(), bias.data(), sliced.data(), outputs, 0, rows, 0, 2, then, 4);
    for (std::size_t i = 0; i < whole.size(); ++i) CHECK(sliced[i] == doctest::Approx(whole[i]).epsilon(1e-5));
  }
}

TEST_CASE("gemm kernel: its ReLU and erf GELU as the results are written, against double") {
  if (!winograd::cpu_supported()) return;
  const std::int64_t features = 1, outputs = 16, rows = 6;
  std::vector<float> in(rows), weights(outputs, 1.f), bias(outputs), packed(outputs);
  gemm::pack_weights(weights.data(), outputs, features, packed.data());
  double worst_gelu = 0;
  for (int start = 0; start < 2000; start += rows * outputs) {  // x = in[r] + bias[o] from -10 to 10
    for (std::int64_t r = 0; r < rows; ++r) in[r] = -10.f + 0.01f * static_cast<float>(start + r * outputs);
    for (std::int64_t o = 0; o < outputs; ++o) bias[o] = 0.01f * static_cast<float>(o);
    std::vector<float> relu(rows * outputs), gelu(rows * outputs);
    gemm::multiply(in.data(), features, packed.data(), bias.data(), relu.data(), outputs, 0, rows, 0, 1, gemm::activation::relu);
    gemm::multiply(in.data(), features, packed.data(), bias.data(), gelu.data(), outputs, 0, rows, 0, 1, gemm::activation::gelu_erf);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t o = 0; o < outputs; ++o) {
        const double x = static_cast<double>(in[r] + bias[o]);
        CHECK(relu[r * outputs + o] == static_cast<float>(std::max(x, 0.0)));
        worst_gelu = std::max(worst_gelu, std::fabs(gelu[r * outputs + o] - 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)))) / (1 + std::fabs(x)));
      }
  }
  INFO("worst GELU error / (1 + |x|): " << worst_gelu);
  CHECK(worst_gelu < 3e-7);
}

TEST_CASE("silu kernel: x / (1 + exp(-x)) within 3e-7, every tail length, in place, the limits") {
  if (!winograd::cpu_supported()) return;  // AVX2's; plans do not use it elsewhere
  std::vector<float> in;
  for (int i = 0; i < 4001; ++i) in.push_back(-40.f + 80.f * static_cast<float>(i) / 4000.f);
  for (const float x : {0.f, -0.f, 1e-30f, -1e-30f, 86.9f, -86.9f, 87.5f, -87.5f, 100.f, -100.f, 1e30f, -1e30f}) in.push_back(x);
  const auto want = [](float x) { return static_cast<double>(x) / (1.0 + std::exp(-static_cast<double>(x))); };
  for (std::size_t count = 0; count <= 40; ++count) {  // every remainder of 16 and of 8
    std::vector<float> out(count + 1, 42.f);
    silu::apply(in.data() + 1000, out.data(), count);
    for (std::size_t i = 0; i < count; ++i) CHECK(std::fabs(out[i] - want(in[1000 + i])) <= 3e-7 * std::fabs(want(in[1000 + i])) + 1e-30);
    CHECK(out[count] == 42.f);  // nothing written past the end
  }
  std::vector<float> out = in;
  silu::apply(out.data(), out.data(), out.size());  // in place
  double worst = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const double w = want(in[i]);
    if (std::fabs(w) > 1e-30) worst = std::max(worst, std::fabs(out[i] - w) / std::fabs(w));
  }
  INFO("worst relative error " << worst);
  CHECK(worst < 3e-7);
  const auto at = [&](float x) { return out[static_cast<std::size_t>(std::find(in.begin(), in.end(), x) - in.begin())]; };
  CHECK(at(100.f) == doctest::Approx(100.f).epsilon(3e-7));
  CHECK(at(1e30f) == doctest::Approx(1e30f).epsilon(3e-7));
  CHECK(at(-100.f) == 0.f);  // exp(100) overflows the float reciprocal: 0, as the limit
  CHECK(at(-1e30f) == 0.f);
  CHECK(at(0.f) == 0.f);
  float nan = std::numeric_limits<float>::quiet_NaN();
  silu::apply(&nan, &nan, 1);
  CHECK(std::isnan(nan));
}

namespace {

/// Value `v` of channel `c`, pixel `p`, image `n` in a [batch, channels, pixels] tensor laid out
/// channel-blocked by `block` (its last block padded).
float& blocked_at(std::vector<float>& t, const shuffle::geometry& g, std::int64_t channels, std::int64_t n, std::int64_t c,
                  std::int64_t p) {
  const std::int64_t blocks = (channels + g.block - 1) / g.block;
  return t[static_cast<std::size_t>(((n * blocks + c / g.block) * g.pixels + p) * g.block + c % g.block)];
}

/// The ranges of a shuffle's result a test asks for, as (first channel, count): the whole result,
/// its halves (ShuffleNetV2's chunk), and an odd start.
std::vector<std::pair<std::int64_t, std::int64_t>> shuffle_ranges(std::int64_t channels) {
  return {{0, 2 * channels}, {0, channels}, {channels, channels}, {1, 2 * channels - 1}};
}

}  // namespace

TEST_CASE("shuffle kernel: channel j of the result is a's j / 2 (j even) or b's (j odd); whole or halves; padding 0") {
  for (const std::int64_t block : {8, 16})
    for (const std::int64_t channels : {3, 8, 29, 58, 64})
      for (const std::int64_t pixels : {1, 5, 49}) {
        const shuffle::geometry g{2, channels, pixels, block};
        const std::int64_t in_size = g.batch * ((channels + block - 1) / block) * block * pixels;
        std::vector<float> a(static_cast<std::size_t>(in_size)), b(a.size());
        for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i) + 0.25f, b[i] = -static_cast<float>(i) - 0.5f;
        for (const auto& [first, count] : shuffle_ranges(channels)) {
          CAPTURE(block);
          CAPTURE(channels);
          CAPTURE(pixels);
          CAPTURE(first);
          CAPTURE(count);
          const std::int64_t blocks = shuffle::output_blocks(g, count);
          std::vector<float> out(static_cast<std::size_t>(blocks * block * pixels), std::numeric_limits<float>::quiet_NaN());
          shuffle::interleave(a.data(), b.data(), g, first, count, out.data(), 0, blocks / 2);  // two ranges, as two threads
          shuffle::interleave(a.data(), b.data(), g, first, count, out.data(), blocks / 2, blocks);
          std::size_t wrong = 0, padding = 0;
          for (std::int64_t n = 0; n < g.batch; ++n)
            for (std::int64_t c = 0; c < (count + block - 1) / block * block; ++c)
              for (std::int64_t p = 0; p < pixels; ++p) {
                const float got = blocked_at(out, g, count, n, c, p);
                if (c >= count) {
                  padding += got != 0.f;
                  continue;
                }
                const std::int64_t j = first + c;
                const float want = blocked_at(j % 2 ? b : a, g, channels, n, j / 2, p);
                wrong += got != want;
              }
          CHECK(wrong == 0);
          CHECK(padding == 0);
        }
      }
}

TEST_CASE("shuffle kernel in nhwc (AVX-512's brgconv layout): each pixel a batch, one block of all the channels; nothing written past the result") {
  for (const std::int64_t channels : {3, 8, 29, 58, 64})
    for (const std::int64_t pixels : {1, 5, 49}) {
      const std::int64_t batch = 2;
      std::vector<float> a(static_cast<std::size_t>(batch * pixels * channels)), b(a.size());
      for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i) + 0.25f, b[i] = -static_cast<float>(i) - 0.5f;
      for (const auto& [first, count] : shuffle_ranges(channels)) {
        CAPTURE(channels);
        CAPTURE(pixels);
        CAPTURE(first);
        CAPTURE(count);
        const shuffle::geometry g{batch * pixels, channels, 1, channels, count};
        const std::int64_t blocks = shuffle::output_blocks(g, count);
        CHECK(blocks == batch * pixels);
        const std::size_t size = static_cast<std::size_t>(batch * pixels * count);
        std::vector<float> out(size + 16, std::numeric_limits<float>::quiet_NaN());  // 16 guard floats after the result
        shuffle::interleave(a.data(), b.data(), g, first, count, out.data(), 0, blocks / 2);
        shuffle::interleave(a.data(), b.data(), g, first, count, out.data(), blocks / 2, blocks);
        std::size_t wrong = 0;
        for (std::int64_t n = 0; n < batch; ++n)
          for (std::int64_t p = 0; p < pixels; ++p)
            for (std::int64_t c = 0; c < count; ++c) {
              const std::int64_t j = first + c;
              const float want = (j % 2 ? b : a)[static_cast<std::size_t>((n * pixels + p) * channels + j / 2)];
              wrong += out[static_cast<std::size_t>((n * pixels + p) * count + c)] != want;
            }
        CHECK(wrong == 0);
        CHECK(std::all_of(out.begin() + static_cast<std::ptrdiff_t>(size), out.end(), [](float v) { return std::isnan(v); }));
      }
    }
}

