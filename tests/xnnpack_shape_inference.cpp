// The xnnpack backend's shape inference (backends/xnnpack/shape_inference.cpp): the dims a
// re-planned region computes for new input sizes, op by op and for a whole payload. Where PyTorch
// has the op, its output size is the oracle (ATen runs it on a small tensor); dims are XNNPACK's
// (NHWC for 4-d values).
#include <xnnpack_internal.hpp>

#include <doctest/doctest.h>

#include <ATen/ATen.h>

#include <array>
#include <functional>
#include <string>
#include <vector>

using namespace xnnpack_delegate;
using dims_t = std::vector<std::int64_t>;

namespace {

window_2d square_window(std::int64_t kernel, std::int64_t stride, std::int64_t padding, std::int64_t dilation) {
  return {padding, padding, padding, padding, kernel, kernel, stride, stride, dilation, dilation};
}

std::string thrown_by(const std::function<void()>& run) {
  try {
    run();
  } catch (const std::exception& error) {
    return error.what();
  }
  return "";
}

/// A payload value with `dims`: an input (external < inputs), an output, or internal (-1).
value_record value(dims_t dims, std::int64_t external = -1, std::string key = "") { return {std::move(dims), external, std::move(key)}; }

torch_delegate::given_inputs float_input(dims_t nchw) { return {torch_delegate::tensor_spec{std::move(nchw)}}; }

}  // namespace

TEST_CASE("xnnpack shape inference: a convolution's output follows stride, padding and dilation as PyTorch's does") {
  for (const auto& [kernel, stride, padding, dilation] : std::vector<std::array<std::int64_t, 4>>{
           {3, 1, 1, 1}, {3, 2, 1, 1}, {7, 2, 3, 1}, {3, 1, 2, 2}, {5, 3, 0, 1}, {1, 1, 0, 1}, {3, 2, 4, 3}}) {
    for (const std::int64_t height : {7, 16, 33}) {
      for (const std::int64_t width : {9, 20}) {
        const std::string where = "kernel " + std::to_string(kernel) + ", stride " + std::to_string(stride) + ", padding " +
                                  std::to_string(padding) + ", dilation " + std::to_string(dilation) + ", input " +
                                  std::to_string(height) + "x" + std::to_string(width);
        INFO(where);
        const at::Tensor want = at::conv2d(at::zeros({2, 3, height, width}), at::zeros({5, 3, kernel, kernel}), {}, stride, padding,
                                           dilation);
        CHECK(window_output_dims({2, height, width, 3}, square_window(kernel, stride, padding, dilation), 5) ==
              dims_t{2, want.size(2), want.size(3), 5});
      }
    }
  }
  // Top and bottom, left and right apart (XNNPACK's padding is four numbers).
  const window_2d uneven{1, 0, 2, 3, 3, 3, 1, 1, 1, 1};
  CHECK(window_output_dims({1, 10, 10, 4}, uneven, 8) == dims_t{1, 11, 11, 8});
}

TEST_CASE("xnnpack shape inference: grouped and depthwise convolutions take their channels from the filter") {
  // conv2d, groups 2: filter [O, kh, kw, I/g]; depthwise: filter [1, kh, kw, C_out].
  region_payload payload{{value({1, 8, 8, 4}, 0), value({}, 1), value({6, 3, 3, 2}, -1, "w"), value({6}, -1, "b"),
                          value({1, 8, 8, 6}), value({1, 3, 3, 12}, -1, "dw"), value({12}, -1, "db")},
                         {node_record{conv2d, toolkit::record_ints(convolution_record{0, 2, 3, 4, 1, 1, 1, 1, 3, 3, 1, 1, 1, 1, 2, 2, 3}),
                                      {}},
                          node_record{depthwise_conv2d,
                                      toolkit::record_ints(depthwise_record{4, 5, 6, 1, 0, 0, 0, 0, 3, 3, 2, 2, 1, 1, 2, 6}), {}}},
                         {{1, 12, 3, 3}},
                         1};
  const region_payload replanned = replanned_payload(payload, float_input({3, 4, 21, 15}), "forward");
  CHECK(replanned.values[4].dims == dims_t{3, 21, 15, 6});
  CHECK(replanned.values[1].dims == dims_t{3, 10, 7, 12});
  CHECK(replanned.output_sizes == std::vector<dims_t>{{3, 12, 10, 7}});  // NCHW
  CHECK(replanned.values[2].dims == dims_t{6, 3, 3, 2});                   // weights keep theirs
}

TEST_CASE("xnnpack shape inference: max pooling in ceil mode as PyTorch computes it") {
  for (const auto& [kernel, stride, padding, dilation] :
       std::vector<std::array<std::int64_t, 4>>{{3, 2, 0, 1}, {3, 2, 1, 1}, {2, 2, 0, 1}, {3, 3, 1, 2}, {5, 2, 2, 1}}) {
    for (const std::int64_t size : {7, 8, 13, 14, 55}) {
      const std::string where = "kernel " + std::to_string(kernel) + ", stride " + std::to_string(stride) + ", padding " +
                                std::to_string(padding) + ", dilation " + std::to_string(dilation) + ", input " + std::to_string(size);
      INFO(where);
      const at::Tensor want = at::max_pool2d(at::zeros({1, 2, size, size + 1}), kernel, stride, padding, dilation, /*ceil_mode=*/true);
      max_pooling_record record{0, 1, padding, padding, padding, padding, kernel, kernel, stride, stride, dilation, dilation, 1};
      record = with_ceil_mode_padding(record, {1, size, size + 1, 2});
      CHECK(record.padding_top == padding);
      CHECK(record.padding_left == padding);
      CHECK(window_output_dims({1, size, size + 1, 2}, window_of(record), 2) == dims_t{1, want.size(2), want.size(3), 2});
    }
  }
  // Floor mode: the padding stays as it is.
  const max_pooling_record floor_mode{0, 1, 1, 1, 1, 1, 3, 3, 2, 2, 1, 1, 0};
  CHECK(with_ceil_mode_padding(floor_mode, {1, 8, 8, 1}).padding_bottom == 1);
  CHECK(window_output_dims({1, 8, 8, 1}, window_of(floor_mode), 1) == dims_t{1, 4, 4, 1});
}

TEST_CASE("xnnpack shape inference: a max-pooling record saved without ceil_mode reads it from its padding") {
  // 12 ints: the format before ceil_mode was appended. Bottom padding beyond top says ceil mode.
  const std::vector<std::int64_t> old_ceil{0, 1, 0, 1, 1, 0, 3, 3, 2, 2, 1, 1};
  const auto record = toolkit::read_record<max_pooling_record>(old_ceil);
  REQUIRE(record);
  CHECK(record->ceil_mode == -1);
  const at::Tensor want = at::max_pool2d(at::zeros({1, 1, 14, 14}), 3, 2, 0, 1, true);  // SqueezeNet's pooling
  const max_pooling_record replanned = with_ceil_mode_padding(*record, {1, 14, 14, 1});
  CHECK(window_output_dims({1, 14, 14, 1}, window_of(replanned), 1) == dims_t{1, want.size(2), want.size(3), 1});
  const std::vector<std::int64_t> old_floor{0, 1, 0, 0, 0, 0, 3, 3, 2, 2, 1, 1};
  CHECK(with_ceil_mode_padding(*toolkit::read_record<max_pooling_record>(old_floor), {1, 14, 14, 1}).padding_bottom == 0);
  CHECK_FALSE(toolkit::read_record<max_pooling_record>(std::vector<std::int64_t>{0, 1, 0}));  // too short: no record
}

TEST_CASE("xnnpack shape inference: average pooling, global pooling, linear and broadcasting") {
  const at::Tensor want = at::avg_pool2d(at::zeros({1, 1, 17, 12}), {3, 2}, {2, 2});
  const average_pooling_record average{0, 1, 0, 0, 0, 0, 3, 2, 2, 2};
  CHECK(window_output_dims({4, 17, 12, 5}, window_of(average), 5) == dims_t{4, want.size(2), want.size(3), 5});
  CHECK(global_pool_dims({3, 9, 11, 16}) == dims_t{3, 1, 1, 16});
  CHECK(fully_connected_dims({5, 16}, 10) == dims_t{5, 10});
  CHECK(fully_connected_dims({2, 7, 16}, 4) == dims_t{2, 7, 4});  // tokens: every leading dimension a batch
  CHECK(broadcast_dims({2, 5, 5, 8}, {2, 1, 1, 8}) == dims_t{2, 5, 5, 8});  // squeeze-excitation
  CHECK(broadcast_dims({8}, {3, 4, 4, 8}) == dims_t{3, 4, 4, 8});           // a per-channel constant
  CHECK(broadcast_dims({1}, {2, 3}) == dims_t{2, 3});
  CHECK(thrown_by([] { broadcast_dims({2, 5, 5, 8}, {2, 4, 5, 8}); }) == "operands of sizes that do not broadcast");
}

TEST_CASE("xnnpack shape inference: a flatten follows the batch size and keeps the features") {
  CHECK(reshape_dims({3, 1, 1, 16}, {1, 1, 1, 16}, {1, 16}) == dims_t{3, 16});
  CHECK(reshape_dims({1, 1, 1, 16}, {1, 1, 1, 16}, {1, 16}) == dims_t{1, 16});
  CHECK(thrown_by([] { reshape_dims({2, 2, 2, 16}, {1, 1, 1, 16}, {1, 16}); }) ==
        "its flatten was planned for 16 features per sample, these inputs give 64");
}

TEST_CASE("xnnpack shape inference: a window larger than the input is refused, naming the sizes") {
  CHECK(thrown_by([] { window_output_dims({1, 2, 2, 3}, square_window(5, 1, 0, 1), 3); }) ==
        "an input of 2 is too small for a window of 5");
}

TEST_CASE("xnnpack shape inference: a whole region re-planned (conv, ceil-mode pooling, clamp, global pool, flatten, linear)") {
  // [N, 3, H, W] -> conv 3x3 s2 p1 (8) -> max_pool 3 s2 ceil -> clamp -> global pool -> flatten -> linear (10)
  region_payload payload{
      {value({1, 32, 32, 3}, 0), value({}, 1), value({8, 3, 3, 3}, -1, "w"), value({8}, -1, "b"), value({1, 16, 16, 8}),
       value({1, 8, 8, 8}), value({1, 8, 8, 8}), value({1, 1, 1, 8}), value({1, 8}), value({10, 8}, -1, "fc"), value({10}, -1, "fb")},
      {node_record{conv2d, toolkit::record_ints(convolution_record{0, 2, 3, 4, 1, 1, 1, 1, 3, 3, 2, 2, 1, 1, 1, 3, 8}), {0.0, 6.0}},
       node_record{max_pool2d, toolkit::record_ints(max_pooling_record{4, 5, 0, 1, 1, 0, 3, 3, 2, 2, 1, 1, 1}), {}},
       node_record{clamp, toolkit::record_ints(unary_record{5, 6}), {-1.0, 1.0}},
       node_record{global_avg_pool2d, toolkit::record_ints(unary_record{6, 7}), {}},
       node_record{reshape, toolkit::record_ints(reshape_record{7, 8, {1, 8}}), {}},
       node_record{fully_connected, toolkit::record_ints(fully_connected_record{8, 9, 10, 1}), {}}},
      {{1, 10}},
      1};
  const at::Tensor stem = at::conv2d(at::zeros({2, 3, 45, 39}), at::zeros({8, 3, 3, 3}), {}, 2, 1);
  const at::Tensor pooled = at::max_pool2d(stem, 3, 2, 0, 1, true);
  const region_payload replanned = replanned_payload(payload, float_input({2, 3, 45, 39}), "forward_region_0");
  CHECK(replanned.values[0].dims == dims_t{2, 45, 39, 3});
  CHECK(replanned.values[4].dims == dims_t{2, stem.size(2), stem.size(3), 8});
  CHECK(replanned.values[5].dims == dims_t{2, pooled.size(2), pooled.size(3), 8});
  CHECK(replanned.values[6].dims == replanned.values[5].dims);
  CHECK(replanned.values[7].dims == dims_t{2, 1, 1, 8});
  CHECK(replanned.values[8].dims == dims_t{2, 8});
  CHECK(replanned.values[1].dims == dims_t{2, 10});
  CHECK(replanned.output_sizes == std::vector<dims_t>{{2, 10}});
  CHECK(toolkit::read_record<reshape_record>(replanned.nodes[4].ints)->shape == dims_t{2, 8});  // rewritten for the runtime
  CHECK(replanned.nodes[2].floats == std::vector<double>{-1.0, 1.0});                          // ranges kept
  CHECK(payload.values[4].dims == dims_t{1, 16, 16, 8});                                        // the recorded one untouched
}

TEST_CASE("xnnpack shape inference: inputs a region cannot take are refused naming the region and the reason") {
  region_payload payload{{value({1, 8, 8, 3}, 0), value({}, 1)}, {node_record{clamp, toolkit::record_ints(unary_record{0, 1}), {0.0, 1.0}}}, {{1, 3, 8, 8}}, 1};
  auto refused = [&](const torch_delegate::given_inputs& given) {
    return thrown_by([&] { replanned_payload(payload, given, "forward_region_0"); });
  };
  CHECK(refused(float_input({3, 8, 8})).find(
            "xnnpack: region forward_region_0 cannot be re-planned for these inputs: input 1 has 3 dimensions, the region was planned for 4") !=
        std::string::npos);
  CHECK(refused({}).find("it takes 1 inputs, got 0") != std::string::npos);
  CHECK(refused({torch_delegate::tensor_spec{{1, 3, 8, 8}, at::kHalf}}).find("input 1 is not a float tensor") != std::string::npos);
  CHECK(refused({std::nullopt}).find("input 1 is not a float tensor") != std::string::npos);
  const region_payload same = replanned_payload(payload, float_input({4, 3, 5, 7}), "forward_region_0");
  CHECK(same.values[1].dims == dims_t{4, 5, 7, 3});
  CHECK(same.output_sizes == std::vector<dims_t>{{4, 3, 5, 7}});
}
