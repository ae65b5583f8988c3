// Unit tests of the onednn backend's plans that run kernels of ours or pick oneDNN's (Winograd,
// brgconv between reorders and over a residual's copy, a squeeze-excitation's multiply, cats in
// place and in chains, residual sums, the GEMM, SiLU, the channel shuffle): which calls a plan
// makes, and its result against ATen's. Each fails when a choice changes.
#include "onednn_test_helpers.hpp"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

using namespace onednn_delegate;
using namespace onednn_test;

TEST_CASE("winograd in a plan: which convolutions, the kernels named, the result ATen's") {
  const convolution_parameters same{{1, 1}, {1, 1}, {1, 1}, 1};
  CHECK(winograd_eligible({64, 64, 3, 3}, same, {1, 64, 56, 56}, {1, 64, 56, 56})->g.m == 4);
  // F(2x2, 3x3) on small maps, but not where oneDNN runs AVX-512 (its direct kernels win there).
  const bool on_avx512 = onednn_runs_avx512();
  const auto small = winograd_eligible({64, 64, 3, 3}, same, {1, 64, 7, 7}, {1, 64, 7, 7});
  CHECK((on_avx512 ? !small : small && small->g.m == 2));
  CHECK(winograd_eligible({64, 64, 3, 3}, same, {1, 64, 56, 56}, {1, 64, 56, 56})->g.layout_block == (on_avx512 ? 16 : 8));
  // 16 to 48 input channels: Winograd on AVX2, not on AVX-512 (short matmuls, transforms that cost more than they save).
  CHECK(winograd_eligible({32, 16, 3, 3}, same, {1, 16, 56, 56}, {1, 32, 56, 56}).has_value() == !on_avx512);
  CHECK(winograd_eligible({64, 48, 3, 3}, same, {1, 48, 56, 56}, {1, 64, 56, 56}).has_value() == !on_avx512);
  CHECK(winograd_eligible({32, 64, 3, 3}, same, {1, 64, 56, 56}, {1, 32, 56, 56}).has_value());
  CHECK(!winograd_eligible({32, 16, 3, 3}, same, {1, 16, 3, 3}, {1, 32, 3, 3}));              // smaller than a tile
  CHECK(!winograd_eligible({32, 12, 3, 3}, same, {1, 12, 56, 56}, {1, 32, 56, 56}));          // channels not in blocks of 8
  CHECK(!winograd_eligible({32, 16, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 1}, {1, 16, 56, 56}, {1, 32, 28, 28}));  // stride 2
  CHECK(!winograd_eligible({32, 8, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 2}, {1, 16, 56, 56}, {1, 32, 56, 56}));   // groups
  CHECK(!winograd_eligible({32, 16, 5, 5}, {{1, 1}, {2, 2}, {1, 1}, 1}, {1, 16, 56, 56}, {1, 32, 56, 56}));  // 5x5
  if (!winograd_enabled()) return;
  // conv 3x3 64 -> 64 (0 -> 1), relu (-> 2), conv 3x3 (-> 3), add of it and 2 (-> 4), relu (-> 5):
  // both convolutions as Winograd, the second with the residual and relu in its output transform.
  torch::manual_seed(7);
  std::map<std::string, at::Tensor> weights{{"w1", torch::randn({64, 64, 3, 3}) * 0.1}, {"b1", torch::randn({64}) * 0.1},
                                            {"w2", torch::randn({64, 64, 3, 3}) * 0.1}, {"b2", torch::randn({64}) * 0.1}};
  region_payload payload{1, 6, {}, {5}};
  step_record conv1 = record("convolution", {0}, 1), conv2 = record("convolution", {2}, 3);
  conv1.convolution = conv2.convolution = same;
  conv1.weight = "w1", conv1.bias = "b1", conv2.weight = "w2", conv2.bias = "b2";
  payload.steps = {conv1, record("relu", {1}, 2), conv2, record("add", {3, 2}, 4), record("relu", {4}, 5)};
  compiled_region region = compile_region(payload, weights);
  for (const std::int64_t size : {20, 9}) {  // F(4x4, 3x3), then a second plan with F(2x2, 3x3)
    const auto plan = make_plan(*region.region, region.plans->weights, {{1, 64, size, size}});
    std::size_t transforms = 0;
    for (const plan_implementation& each : plan->implementations)
      transforms += std::string(each.implementation).starts_with(size == 20 ? "winograd_f4x4_" : "winograd_f2x2_");
    CHECK(transforms == (size == 9 && on_avx512 ? 0 : 4));  // input and output, per convolution
    const at::Tensor x = torch::rand({1, 64, size, size});
    const std::vector<c10::IValue> inputs{x};
    const at::Tensor y = OnednnBackend().execute(region, torch_delegate::inputs(inputs))[0].toTensor();
    const at::Tensor first = at::relu(at::conv2d(x, weights["w1"], weights["b1"], 1, 1));
    const at::Tensor want = at::relu(at::conv2d(first, weights["w2"], weights["b2"], 1, 1) + first);
    CHECK(y.allclose(want, 1e-4, 1e-4));
  }
  // In a channels-last region (a depthwise convolution in it: on AVX-512 its convolutions run in
  // nhwc), the transforms read and write nhwc: no reorder around them.
  weights["wd"] = torch::randn({64, 1, 3, 3}) * 0.3, weights["bd"] = torch::randn({64}) * 0.1;
  region_payload nhwc_payload{1, 4, {}, {3}};
  step_record depthwise = record("convolution", {0}, 1), dense = record("convolution", {1}, 2);
  depthwise.convolution = convolution_parameters{{1, 1}, {1, 1}, {1, 1}, 64};
  dense.convolution = same;
  depthwise.weight = "wd", depthwise.bias = "bd", dense.weight = "w1", dense.bias = "b1";
  nhwc_payload.steps = {depthwise, dense, record("relu", {2}, 3)};
  compiled_region nhwc_region = compile_region(nhwc_payload, weights);
  const auto plan = make_plan(*nhwc_region.region, nhwc_region.plans->weights, {{1, 64, 20, 20}});
  const std::vector<std::string> kernels = kernels_of(*plan);
  CAPTURE(kernels);
  const auto named = [&](std::string_view part) { return count_named(kernels, part); };
  CHECK(named("winograd_f4x4_") == 2);
  CHECK(named("_nhwc") == (on_avx512 ? 2 : 0));
  if (on_avx512) CHECK(named("1 convolution: reorder") == 0);
  const at::Tensor x = torch::rand({1, 64, 20, 20});
  const std::vector<c10::IValue> inputs{x};
  const at::Tensor y = OnednnBackend().execute(nhwc_region, torch_delegate::inputs(inputs))[0].toTensor();
  const at::Tensor want = at::relu(at::conv2d(at::conv2d(x, weights["wd"], weights["bd"], 1, 1, 1, 64), weights["w1"], weights["b1"], 1, 1));
  CHECK(y.allclose(want, 1e-4, 1e-4));
}

TEST_CASE("a wide direct convolution of an nChw16c region runs on brgconv in nhwc between two reorders (AVX-512); a narrow one stays") {
  // conv 3x3 3 -> 128 (0 -> 1), relu (-> 2), conv 3x3 stride 2 128 -> 32 (-> 3), relu (-> 4),
  // conv 3x3 32 -> 32 (-> 5), relu (-> 6). The first makes nChw16c from the plain input; the
  // second (128 input channels) is wide; the third (32) is not, and reads nChw16c again.
  torch::manual_seed(11);
  std::map<std::string, at::Tensor> weights{{"w1", torch::randn({128, 3, 3, 3}) * 0.3}, {"b1", torch::randn({128}) * 0.1},
                                            {"w2", torch::randn({32, 128, 3, 3}) * 0.05}, {"b2", torch::randn({32}) * 0.1},
                                            {"w3", torch::randn({32, 32, 3, 3}) * 0.1}, {"b3", torch::randn({32}) * 0.1}};
  region_payload payload{1, 7, {}, {6}};
  step_record conv1 = record("convolution", {0}, 1), conv2 = record("convolution", {2}, 3), conv3 = record("convolution", {4}, 5);
  conv1.convolution = conv3.convolution = convolution_parameters{{1, 1}, {1, 1}, {1, 1}, 1};
  conv2.convolution = convolution_parameters{{2, 2}, {1, 1}, {1, 1}, 1};
  conv1.weight = "w1", conv1.bias = "b1", conv2.weight = "w2", conv2.bias = "b2", conv3.weight = "w3", conv3.bias = "b3";
  payload.steps = {conv1, record("relu", {1}, 2), conv2, record("relu", {3}, 4), conv3, record("relu", {5}, 6)};
  compiled_region region = compile_region(payload, weights);
  const auto plan = make_plan(*region.region, region.plans->weights, {{1, 3, 24, 24}});
  const std::vector<std::string> kernels = kernels_of(*plan);
  CAPTURE(kernels);
  const auto named = [&](std::string_view part) { return count_named(kernels, part); };
  const bool brgconv = onednn_runs_avx512() && brgconv_between_reorders_enabled();
  CHECK(named("2 convolution: convolution brgconv:") == (brgconv ? 1 : 0));
  CHECK(named("2 convolution: reorder") == (brgconv ? 2 : 0));  // its input into nhwc, its result back
  CHECK(named("4 convolution: reorder") == 0);                   // the narrow one reads the region's layout
  CHECK(named("4 convolution: convolution brgconv") == 0);
  const at::Tensor x = torch::rand({1, 3, 24, 24});
  const std::vector<c10::IValue> inputs{x};
  const at::Tensor y = OnednnBackend().execute(region, torch_delegate::inputs(inputs))[0].toTensor();
  const at::Tensor first = at::relu(at::conv2d(x, weights["w1"], weights["b1"], 1, 1));
  const at::Tensor second = at::relu(at::conv2d(first, weights["w2"], weights["b2"], 2, 1));
  CHECK(y.allclose(at::relu(at::conv2d(second, weights["w3"], weights["b3"], 1, 1)), 1e-4, 1e-4));
}

TEST_CASE("a wide convolution with a residual add runs on brgconv in nhwc over a copy of the residual (AVX-512); the residual stays as it is") {
  // conv 3x3 3 -> 128 (0 -> 1), relu (-> 2), conv 3x3 128 -> 128 at 7x7 (-> 3; no Winograd: too
  // small a map on AVX-512), add of 3 and 2 (-> 4), relu (-> 5); results 5 and 2 (the residual,
  // which the sum must not write over).
  torch::manual_seed(12);
  std::map<std::string, at::Tensor> weights{{"w1", torch::randn({128, 3, 3, 3}) * 0.3}, {"b1", torch::randn({128}) * 0.1},
                                            {"w2", torch::randn({128, 128, 3, 3}) * 0.03}, {"b2", torch::randn({128}) * 0.1}};
  region_payload payload{1, 6, {}, {5, 2}};
  step_record conv1 = record("convolution", {0}, 1), conv2 = record("convolution", {2}, 3);
  conv1.convolution = conv2.convolution = convolution_parameters{{1, 1}, {1, 1}, {1, 1}, 1};
  conv1.weight = "w1", conv1.bias = "b1", conv2.weight = "w2", conv2.bias = "b2";
  payload.steps = {conv1, record("relu", {1}, 2), conv2, record("add", {3, 2}, 4), record("relu", {4}, 5)};
  compiled_region region = compile_region(payload, weights);
  const auto plan = make_plan(*region.region, region.plans->weights, {{1, 3, 7, 7}});
  const std::vector<std::string> kernels = kernels_of(*plan);
  CAPTURE(kernels);
  const auto named = [&](std::string_view part) { return count_named(kernels, part); };
  const bool brgconv = onednn_runs_avx512() && brgconv_between_reorders_enabled() && sum_post_op_enabled() && brgconv_with_residual_enabled();
  CHECK(named("2 convolution: convolution brgconv:") == (brgconv ? 1 : 0));
  CHECK(named("2 convolution: reorder") == (brgconv ? 3 : 0));  // its input and the residual into nhwc, its result back
  const at::Tensor x = torch::rand({1, 3, 7, 7});
  const std::vector<c10::IValue> inputs{x};
  const std::vector<c10::IValue> out = OnednnBackend().execute(region, torch_delegate::inputs(inputs));
  const at::Tensor first = at::relu(at::conv2d(x, weights["w1"], weights["b1"], 1, 1));
  CHECK(out[0].toTensor().allclose(at::relu(at::conv2d(first, weights["w2"], weights["b2"], 1, 1) + first), 1e-4, 1e-4));
  CHECK(out[1].toTensor().allclose(first, 1e-5, 1e-5));
}

TEST_CASE("a squeeze-excitation's multiply in a plan: our kernel where oneDNN runs AVX-512, over nhwc or whole channel blocks; the result ATen's") {
  // x (0), s (1) of [N, C, 1, 1]: conv 3x3 16 -> C (-> 2), with `depthwise` a 3x3 depthwise
  // convolution after it (-> 3: the region runs in nhwc), then the multiply by s (-> 4). The
  // product is the region's result: no 1x1 convolution takes it as scaled weights.
  for (const bool depthwise : {false, true})
    for (const std::int64_t channels : {32, 40})
      for (const std::int64_t batch : {1, 2}) {
        torch::manual_seed(13);
        std::map<std::string, at::Tensor> weights{{"w", torch::randn({channels, 16, 3, 3}) * 0.2}, {"b", torch::randn({channels}) * 0.1},
                                                  {"d", torch::randn({channels, 1, 3, 3}) * 0.3}, {"e", torch::randn({channels}) * 0.1}};
        region_payload payload{2, 5, {}, {4}};
        step_record conv = record("convolution", {0}, 2), dw = record("convolution", {2}, 3);
        conv.convolution = convolution_parameters{{1, 1}, {1, 1}, {1, 1}, 1};
        conv.weight = "w", conv.bias = "b";
        dw.convolution = convolution_parameters{{1, 1}, {1, 1}, {1, 1}, channels};
        dw.weight = "d", dw.bias = "e";
        payload.steps = {conv};
        if (depthwise) payload.steps.push_back(dw);
        payload.steps.push_back(record("mul", {depthwise ? 3 : 2, 1}, 4));
        compiled_region region = compile_region(payload, weights);
        const auto plan = make_plan(*region.region, region.plans->weights, {{batch, 16, 12, 12}, {batch, channels, 1, 1}});
        const std::vector<std::string> kernels = kernels_of(*plan);
        CAPTURE(depthwise);
        CAPTURE(channels);
        CAPTURE(batch);
        CAPTURE(kernels);
        const std::ptrdiff_t ours = count_named(kernels, "channel_scale:avx512"), binaries = count_named(kernels, ": binary jit");
        CHECK(ours + binaries == 1);
        const bool expected = onednn_runs_avx512() && (depthwise || channels % 16 == 0);
        if (expected) CHECK(ours == 1);
        if (!onednn_runs_avx512()) CHECK(ours == 0);
        const at::Tensor x = torch::randn({batch, 16, 12, 12}), s = torch::rand({batch, channels, 1, 1});
        const std::vector<c10::IValue> inputs{x, s};
        const at::Tensor y = OnednnBackend().execute(region, torch_delegate::inputs(inputs))[0].toTensor();
        at::Tensor made = at::conv2d(x, weights["w"], weights["b"], 1, 1);
        if (depthwise) made = at::conv2d(made, weights["d"], weights["e"], 1, 1, 1, channels);
        CHECK(y.allclose(made * s, 1e-4, 1e-4));  // Winograd (AVX2) rounds differently from ATen's direct convolution
      }
}

TEST_CASE("cat chain: DenseNet's growing cats as views of one buffer, its batch norms on the views, the result ATen's") {
  // On AVX-512 the region is channels-last (nhwc views, our kernel for the batch norms); on AVX2
  // (or under ONEDNN_MAX_CPU_ISA=AVX2) nChw8c at batch 1, a concat at batch 2.
  // x (0); cat(x) (1); batch norm as a depthwise 1x1 convolution (2), relu (3); conv 3x3 64 -> 32
  // (4); cat(x, 4) (5); batch norm (6), relu (7); conv 3x3 96 -> 32 (8); cat(x, 4, 8) (9): the
  // block's result, and 7 as a second one (a view's reader that is a region output).
  torch::manual_seed(11);
  std::map<std::string, at::Tensor> weights{{"s1", torch::rand({64, 1, 1, 1}) + 0.5}, {"t1", torch::randn({64}) * 0.1},
                                            {"w1", torch::randn({32, 64, 3, 3}) * 0.1}, {"b1", torch::randn({32}) * 0.1},
                                            {"s2", torch::rand({96, 1, 1, 1}) + 0.5}, {"t2", torch::randn({96}) * 0.1},
                                            {"w2", torch::randn({32, 96, 3, 3}) * 0.1}, {"b2", torch::randn({32}) * 0.1}};
  region_payload payload{1, 10, {}, {9, 7}};
  step_record norm1 = record("convolution", {1}, 2), conv1 = record("convolution", {3}, 4), norm2 = record("convolution", {5}, 6),
              conv2 = record("convolution", {7}, 8);
  norm1.convolution = convolution_parameters{{1, 1}, {0, 0}, {1, 1}, 64};
  norm2.convolution = convolution_parameters{{1, 1}, {0, 0}, {1, 1}, 96};
  conv1.convolution = conv2.convolution = convolution_parameters{{1, 1}, {1, 1}, {1, 1}, 1};
  norm1.weight = "s1", norm1.bias = "t1", conv1.weight = "w1", conv1.bias = "b1";
  norm2.weight = "s2", norm2.bias = "t2", conv2.weight = "w2", conv2.bias = "b2";
  payload.steps = {record("cat", {0}, 1), norm1, record("relu", {2}, 3), conv1, record("cat", {0, 4}, 5),
                   norm2, record("relu", {6}, 7), conv2, record("cat", {0, 4, 8}, 9)};
  compiled_region region = compile_region(payload, weights);
  for (const std::int64_t batch : {1, 2}) {
    const auto plan = make_plan(*region.region, region.plans->weights, {{batch, 64, 16, 16}});
    const std::vector<std::string> kernels = kernels_of(*plan);
    CAPTURE(kernels);
    const auto named = [&](std::string_view part) { return count_named(kernels, part); };
    if (onednn_runs_avx512()) {  // channels-last regions: there the cats are views, strided ones
      CHECK(named("concat") == 0);
      CHECK(named("channel_affine:") == 2);
      CHECK(named("cat: reorder") == 3);  // x, then each convolution's result, copied into the buffer once
    } else if (batch == 1) {  // nChw8c: the first blocks of the buffer are a dense value
      CHECK(named("concat") == 0);
      CHECK(named("channel_affine:") == 0);
      CHECK(named("cat: reorder") == 3);
    } else {  // a blocked prefix is dense at batch 1 only
      CHECK(named("concat") == 3);  // cat(x) too
    }
    const at::Tensor x = torch::rand({batch, 64, 16, 16});
    const std::vector<c10::IValue> inputs{x};
    const auto got = OnednnBackend().execute(region, torch_delegate::inputs(inputs));
    const auto norm = [&](const at::Tensor& v, const char* s, const char* t) {
      return at::relu(v * weights[s].view({1, -1, 1, 1}) + weights[t].view({1, -1, 1, 1}));
    };
    const at::Tensor x1 = at::conv2d(norm(x, "s1", "t1"), weights["w1"], weights["b1"], 1, 1);
    const at::Tensor n2 = norm(at::cat({x, x1}, 1), "s2", "t2");
    const at::Tensor x2 = at::conv2d(n2, weights["w2"], weights["b2"], 1, 1);
    CHECK(got[0].toTensor().allclose(at::cat({x, x1, x2}, 1), 1e-4, 1e-4));
    CHECK(at::equal(got[0].toTensor().slice(1, 0, 64), x));  // the part copied, not computed
    CHECK(got[1].toTensor().allclose(n2, 1e-4, 1e-4));  // Winograd's rounding: 2e-5 of values up to 6
  }
}

TEST_CASE("cat chain: a sibling cat and a residual add over a cat's view leave the chain's parts as they are") {
  // Siblings: f = cat(x, a), g1 = cat(x, a, c), g2 = cat(x, a, d), both g1 and g2 results: d
  // must not be copied where c is (g2 gets a concat of its own). A residual add: c1 = cat(x, a),
  // z = conv(x) + c1, c2 = cat(x, a, z): the add must not be a sum written over c1's bytes, which
  // hold the parts c2 reads.
  torch::manual_seed(12);
  std::map<std::string, at::Tensor> weights{{"wa", torch::randn({16, 16, 1, 1}) * 0.2}, {"ba", torch::randn({16}) * 0.1},
                                            {"wc", torch::randn({16, 32, 1, 1}) * 0.2}, {"bc", torch::randn({16}) * 0.1},
                                            {"wd", torch::randn({16, 32, 1, 1}) * 0.2}, {"bd", torch::randn({16}) * 0.1},
                                            {"wt", torch::randn({32, 16, 1, 1}) * 0.2}, {"bt", torch::randn({32}) * 0.1}};
  const auto conv = [](const char* w, std::int64_t from, std::int64_t to) {
    step_record made = record("convolution", {from}, to);
    made.convolution = convolution_parameters{{1, 1}, {0, 0}, {1, 1}, 1};
    made.weight = std::string("w") + w, made.bias = std::string("b") + w;
    return made;
  };
  const at::Tensor x = torch::rand({1, 16, 8, 8});
  const std::vector<c10::IValue> inputs{x};
  const auto aten = [&](const char* w, const at::Tensor& from) {
    return at::conv2d(from, weights[std::string("w") + w], weights[std::string("b") + w]);
  };
  const at::Tensor a = aten("a", x), f = at::cat({x, a}, 1);
  SUBCASE("siblings") {
    region_payload payload{1, 7, {}, {4, 6}};
    payload.steps = {conv("a", 0, 1), record("cat", {0, 1}, 2), conv("c", 2, 3), record("cat", {0, 1, 3}, 4),
                     conv("d", 2, 5), record("cat", {0, 1, 5}, 6)};
    compiled_region region = compile_region(payload, weights);
    const auto got = OnednnBackend().execute(region, torch_delegate::inputs(inputs));
    CHECK(got[0].toTensor().allclose(at::cat({x, a, aten("c", f)}, 1), 1e-4, 1e-4));
    CHECK(got[1].toTensor().allclose(at::cat({x, a, aten("d", f)}, 1), 1e-4, 1e-4));
  }
  SUBCASE("a residual add over a cat") {
    region_payload payload{1, 6, {}, {5}};
    payload.steps = {conv("a", 0, 1), record("cat", {0, 1}, 2), conv("t", 0, 3), record("add", {3, 2}, 4),
                     record("cat", {0, 1, 4}, 5)};
    compiled_region region = compile_region(payload, weights);
    const auto got = OnednnBackend().execute(region, torch_delegate::inputs(inputs));
    CHECK(got[0].toTensor().allclose(at::cat({x, a, aten("t", x) + f}, 1), 1e-4, 1e-4));
  }
}

TEST_CASE("residual adds as sum post-ops written over the residual, only where nothing reads it after") {
  // Three blocks of two 1x1 convolutions, each with a relu but the last, the second's result
  // added to the block's input (x: a relu of a first convolution). The first block's input is
  // read last by its add: the sum is written over it; so is the second's, which shares the first
  // one's bytes. The third block's input is also added after the block (and twice in its
  // convolution's post-ops): binary post-ops, the result in bytes of its own.
  torch::manual_seed(13);
  std::map<std::string, at::Tensor> weights;
  std::vector<step_record> steps;
  std::int64_t next_id = 1;
  const auto conv = [&](std::int64_t from) {
    const std::string k = std::to_string(weights.size() / 2);
    weights["w" + k] = torch::randn({64, 64, 1, 1}) * 0.1, weights["b" + k] = torch::randn({64}) * 0.1;
    step_record made = record("convolution", {from}, next_id++);
    made.convolution = convolution_parameters{{1, 1}, {0, 0}, {1, 1}, 1};
    made.weight = "w" + k, made.bias = "b" + k;
    steps.push_back(made);
    return made.output;
  };
  const auto op = [&](const char* kind, std::vector<std::int64_t> from) {
    steps.push_back(record(kind, std::move(from), next_id++));
    return steps.back().output;
  };
  std::int64_t x = op("relu", {conv(0)});
  for (int block = 0; block < 2; ++block) x = op("relu", {op("add", {conv(op("relu", {conv(x)})), x})});
  const std::int64_t last = op("add", {op("add", {conv(op("relu", {conv(x)})), x}), x});
  region_payload payload{1, next_id, {}, {last}};
  payload.steps = steps;
  compiled_region region = compile_region(payload, weights);
  const auto plan = make_plan(*region.region, region.plans->weights, {{1, 64, 14, 14}});
  const auto root = [&](std::size_t slot) { return plan->aliases[slot] == no_slot ? slot : plan->aliases[slot]; };
  std::vector<const plan_call*> calls;  // the convolutions, in order
  for (std::size_t i = 0; i < plan->calls.size(); ++i)
    if (plan->implementations[i].kind == "convolution") calls.push_back(&plan->calls[i]);
  REQUIRE(calls.size() == 7);
  const auto argument = [](const plan_call* c, int which) -> std::optional<std::size_t> {
    for (const auto& [arg, slot] : c->arguments)
      if (arg == which) return slot;
    return std::nullopt;
  };
  const int addend = DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1;
  const std::size_t first = root(*argument(calls[0], DNNL_ARG_DST));
  CHECK(root(*argument(calls[2], DNNL_ARG_DST)) == first);  // over the first block's input
  CHECK(root(*argument(calls[4], DNNL_ARG_DST)) == first);  // over the second's, in the same bytes
  CHECK(!argument(calls[2], addend));
  CHECK(!argument(calls[4], addend));
  CHECK(root(*argument(calls[6], DNNL_ARG_DST)) != first);  // read after: not written over (binary post-ops, or adds after it)
  const at::Tensor input = torch::rand({1, 64, 14, 14});
  const std::vector<c10::IValue> inputs{input};
  const at::Tensor y = OnednnBackend().execute(region, torch_delegate::inputs(inputs))[0].toTensor();
  int k = 0;
  const auto convolve = [&](const at::Tensor& v) {
    const std::string name = std::to_string(k++);
    return at::conv2d(v, weights["w" + name], weights["b" + name]);
  };
  at::Tensor want = at::relu(convolve(input));
  for (int block = 0; block < 2; ++block) want = at::relu(convolve(at::relu(convolve(want))) + want);
  want = convolve(at::relu(convolve(want))) + want + want;
  CHECK(y.allclose(want, 1e-5, 1e-5));
}

TEST_CASE("gemm in a plan: a linear and its ReLU or GELU on our GEMM where own_gemm_enabled(), its sigmoid on oneDNN's, the result ATen's") {
  // On by itself wherever it may be: AVX2 and FMA, oneDNN at AVX2 (not AVX-512, not capped below), no switch.
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa()), avx2 = static_cast<unsigned>(dnnl::cpu_isa::avx2);
  if (winograd::cpu_supported() && (isa & avx2) == avx2 && !onednn_runs_avx512() && !std::getenv("TD_ONEDNN_GEMM"))
    CHECK(own_gemm_enabled());
  // linear 37 -> 21 (0 -> 1) over [3, 7, 37] or [2000, 37], then relu or gelu (-> 2): 21 outputs,
  // a last panel of 5; the activation applied as the GEMM writes, no step of its own. A sigmoid,
  // which our GEMM does not apply: oneDNN's inner product with it as a post-op.
  torch::manual_seed(13);
  std::map<std::string, at::Tensor> weights{{"w", torch::randn({21, 37})}, {"b", torch::randn({21})}};
  for (const std::string then : {"relu", "gelu_erf", "sigmoid"}) {
    CAPTURE(then);
    region_payload payload{1, 3, {}, {2}};
    step_record fc = record("linear", {0}, 1);
    fc.weight = "w", fc.bias = "b";
    step_record after = record(then == "relu" ? "relu" : "activation", {1}, 2);
    if (then != "relu") after.activation = activation_parameters{then};
    payload.steps = {fc, after};
    // Plans of one region in turn: ours packs the weights the store held, a later one reuses them,
    // oneDNN's unpacks them; then the other way round (ours from oneDNN's layout).
    compiled_region region = compile_region(payload, weights);
    compiled_region other = compile_region(payload, weights);
    using sizes_of = std::vector<std::int64_t>;
    for (const auto& [sizes, compiled] : {std::pair{sizes_of{3, 7, 37}, &region}, std::pair{sizes_of{2000, 37}, &region},
                                          std::pair{sizes_of{5, 37}, &region}, std::pair{sizes_of{5, 37}, &other},
                                          std::pair{sizes_of{3, 7, 37}, &other}}) {
      CAPTURE(sizes);
      const bool on_ours = own_gemm_enabled() && sizes[0] != 5 && then != "sigmoid";  // 5 rows: oneDNN's (below one block of 6)
      const auto plan = make_plan(*compiled->region, compiled->plans->weights, {sizes});
      std::size_t ours = 0;
      for (const plan_implementation& each : plan->implementations) ours += each.implementation == "gemm:avx2";
      CHECK(ours == (on_ours ? 1 : 0));
      if (on_ours || then == "sigmoid") CHECK(plan->calls.size() == 1);
      const int threads_before = at::get_num_threads();
      for (const int threads : {1, 2}) {  // [2000, 37] x 21: above one_thread_work, split between threads at 2
        at::set_num_threads(threads);
        const at::Tensor x = torch::randn(sizes);
        const std::vector<c10::IValue> inputs{x};
        const at::Tensor y = OnednnBackend().execute(*compiled, torch_delegate::inputs(inputs))[0].toTensor();
        const at::Tensor made = at::linear(x, weights["w"], weights["b"]);
        CHECK(y.allclose(then == "gelu_erf" ? at::gelu(made) : then == "relu" ? at::relu(made) : at::sigmoid(made), 1e-5, 1e-5));
      }
      at::set_num_threads(threads_before);
    }
  }
}

TEST_CASE("1x1 convolutions in a plan: on our GEMM in nChw8c where own_pointwise_conv_enabled() and gemm_1x1_pays; the result ATen's") {
  // x [N, 96, H, W] (0); conv0 96 -> 104 (-> 1: a last panel of 8), relu (-> 2); conv1 104 -> 104
  // (-> 3), clip to [0, 6] (-> 4: ReLU6); conv2 104 -> 104 (-> 5), add of 5 and 2 (-> 6), relu
  // (-> 7): a residual the add reads last, written over; conv3 104 -> 96 (-> 8), silu (-> 9);
  // conv4 96 -> 16 at stride 2 (-> 10): oneDNN's (a stride). conv0 to conv3 on our GEMM, their
  // ReLUs, the residual and the SiLU (ours, in place) with them.
  torch::manual_seed(17);
  const std::vector<std::pair<std::int64_t, std::int64_t>> shapes{{104, 96}, {104, 104}, {104, 104}, {96, 104}, {16, 96}};
  std::map<std::string, at::Tensor> weights;
  std::vector<step_record> steps;
  for (std::size_t k = 0; k < shapes.size(); ++k) {
    const std::string name = std::to_string(k);
    weights["w" + name] = torch::randn({shapes[k].first, shapes[k].second, 1, 1}) * 0.3;
    weights["b" + name] = torch::randn({shapes[k].first}) * 0.1;
  }
  const auto conv = [&](std::size_t k, std::int64_t from, std::int64_t to, std::int64_t stride = 1) {
    step_record made = record("convolution", {from}, to);
    made.convolution = convolution_parameters{{stride, stride}, {0, 0}, {1, 1}, 1};
    made.weight = "w" + std::to_string(k), made.bias = "b" + std::to_string(k);
    return made;
  };
  step_record silu = record("activation", {8}, 9), relu6 = record("activation", {3}, 4);
  silu.activation = activation_parameters{"silu"};
  relu6.activation = activation_parameters{"clip"};
  relu6.activation->low = 0, relu6.activation->high = 6;
  region_payload payload{1, 11, {}, {10}};
  payload.steps = {conv(0, 0, 1), record("relu", {1}, 2), conv(1, 2, 3), relu6, conv(2, 4, 5),
                   record("add", {5, 2}, 6),  record("relu", {6}, 7), conv(3, 7, 8), silu, conv(4, 9, 10, 2)};
  compiled_region region = compile_region(payload, weights);
  const auto reference = [&](const at::Tensor& x) {
    const auto c = [&](int k, const at::Tensor& v, std::int64_t stride = 1) {
      return at::conv2d(v, weights["w" + std::to_string(k)], weights["b" + std::to_string(k)], stride);
    };
    const at::Tensor a = at::relu(c(0, x));
    const at::Tensor b = at::relu(c(2, at::clamp(c(1, a), 0, 6)) + a);
    return c(4, at::silu(c(3, b)), 2);
  };
  // Plans of one region in turn: ours packs the weights, oneDNN's (14 x 14: below 256 channels)
  // unpacks them, ours at batch 2 packs them again from oneDNN's layout, oneDNN's below 6 pixels.
  using sizes_of = std::vector<std::int64_t>;
  for (const sizes_of& sizes : {sizes_of{1, 96, 7, 7}, sizes_of{1, 96, 14, 14}, sizes_of{2, 96, 8, 8}, sizes_of{1, 96, 2, 2}}) {
    CAPTURE(sizes);
    const std::int64_t pixels = sizes[2] * sizes[3];
    const bool on_ours = own_pointwise_conv_enabled() && pixels >= 6 && pixels <= 64;
    const auto plan = make_plan(*region.region, region.plans->weights, {sizes});
    std::vector<std::size_t> ours;
    for (std::size_t i = 0; i < plan->implementations.size(); ++i)
      if (plan->implementations[i].implementation == "gemm_1x1:avx2") ours.push_back(i);
    CHECK(ours.size() == (on_ours ? 4 : 0));
    if (on_ours) {
      // conv2's sum over the residual's bytes (value 2, read last by the add); each call's steps
      // made with it: no relu, add or SiLU of oneDNN's but the stride-2 convolution.
      const plan_call& residual_call = plan->calls[ours[2]];
      std::optional<std::size_t> addend, result;
      for (const auto& [argument, slot] : residual_call.arguments) {
        if (argument == DNNL_ARG_SRC_1) addend = slot;
        if (argument == DNNL_ARG_DST) result = slot;
      }
      REQUIRE(addend);
      REQUIRE(result);
      const auto root = [&](std::size_t slot) { return plan->aliases[slot] == no_slot ? slot : plan->aliases[slot]; };
      CHECK(root(*addend) == root(*result));
      for (const std::string& kernel : kernels_of(*plan)) {
        CAPTURE(kernel);
        CHECK((kernel.find("eltwise") == std::string::npos || kernel.ends_with("eltwise silu:avx2")));
        CHECK(kernel.find("binary") == std::string::npos);
      }
    }
    const int threads_before = at::get_num_threads();
    for (const int threads : {1, 2}) {
      at::set_num_threads(threads);
      const at::Tensor x = torch::randn(sizes);
      const std::vector<c10::IValue> inputs{x};
      const at::Tensor y = OnednnBackend().execute(region, torch_delegate::inputs(inputs))[0].toTensor();
      CHECK(equal_to_rounding(y, reference(x), 96, 5));  // five 1x1 convolutions of 96 channels in a chain
    }
    at::set_num_threads(threads_before);
  }
}

TEST_CASE("a 1-d convolution of 1 output and 16 taps keeps its weights, whose descriptor is the GEMM's packed one; the result ATen's") {
  // Its dense [1, 8, 16] weights (oiw) have the descriptor of our GEMM's packed [1 panel, 8, 16]
  // (abc): a plan must not take them for packed ones (and unpack them).
  torch::manual_seed(19);
  std::map<std::string, at::Tensor> weights{{"w", torch::randn({1, 8, 16})}, {"b", torch::randn({1})}};
  CHECK(md({1, 8, 16}, f32, tag::oiw) == packed_weights_desc(1, 8));
  region_payload payload{1, 2, {}, {1}};
  step_record conv = record("convolution", {0}, 1);
  conv.convolution = convolution_parameters{{1}, {0}, {1}, 1};
  conv.weight = "w", conv.bias = "b";
  payload.steps = {conv};
  compiled_region region = compile_region(payload, weights);
  for (const std::int64_t length : {40, 64, 40}) {  // plans in turn, each from the last one's weights
    CAPTURE(length);
    const at::Tensor x = torch::randn({1, 8, length});
    const std::vector<c10::IValue> inputs{x};
    const at::Tensor y = OnednnBackend().execute(region, torch_delegate::inputs(inputs))[0].toTensor();
    CHECK(equal_to_rounding(y, at::conv1d(x, weights["w"], weights["b"]), 8 * 16));
  }
}

TEST_CASE("silu in a plan: a convolution's SiLU runs on our kernel in place; a SiLU of its own, out of place; the result ATen's") {
  // conv 1x1 16 -> 24 (0 -> 1), silu (-> 2): the SiLU ends the convolution's post-ops; add of 2 and
  // 2 (-> 3), silu (-> 4): a SiLU after an add, a step of its own.
  torch::manual_seed(11);
  std::map<std::string, at::Tensor> weights{{"w", torch::randn({24, 16, 1, 1}) * 0.5}, {"b", torch::randn({24}) * 0.1}};
  region_payload payload{1, 5, {}, {4}};
  step_record conv = record("convolution", {0}, 1);
  conv.convolution = convolution_parameters{{1, 1}, {0, 0}, {1, 1}, 1};
  conv.weight = "w", conv.bias = "b";
  step_record first = record("activation", {1}, 2), second = record("activation", {3}, 4);
  first.activation = second.activation = activation_parameters{"silu"};
  payload.steps = {conv, first, record("add", {2, 2}, 3), second};
  compiled_region region = compile_region(payload, weights);
  const auto plan = make_plan(*region.region, region.plans->weights, {{1, 16, 40, 40}});
  std::size_t ours = 0;
  for (const plan_implementation& each : plan->implementations) ours += each.implementation == "silu:avx2";
  CHECK(ours == (own_silu_enabled() ? 2 : 0));
  if (own_silu_enabled()) {
    // In place: the first SiLU's result views its input's bytes; the second's has its own.
    std::size_t views = 0;
    for (std::size_t slot = 0; slot < plan->slots.size(); ++slot) views += plan->aliases[slot] != no_slot;
    CHECK(views >= 1);
  }
  const int threads_before = at::get_num_threads();
  for (const int threads : {1, 2}) {  // 25600 values a SiLU: split between threads at 2
    at::set_num_threads(threads);
    const at::Tensor x = torch::randn({1, 16, 40, 40});
    const std::vector<c10::IValue> inputs{x};
    const at::Tensor y = OnednnBackend().execute(region, torch_delegate::inputs(inputs))[0].toTensor();
    const at::Tensor made = at::silu(at::conv2d(x, weights["w"], weights["b"]));
    CHECK(y.allclose(at::silu(made + made), 1e-5, 1e-5));
  }
  at::set_num_threads(threads_before);
}

TEST_CASE("silu in a plan after a slice: a view that starts inside its value is copied first; the result ATen's") {
  // slice (0 -> 1) of an input [1, 16, 8, 8], silu (-> 2). An eltwise's result takes its input's
  // memory descriptor: with the slice's offset it was written past its own bytes (a crash).
  for (const auto& [dim, start, copied] : {std::tuple{std::int64_t{1}, std::int64_t{8}, true},     // channels 8..15: an offset
                                           std::tuple{std::int64_t{2}, std::int64_t{0}, false}}) {  // rows 0..3: strided, from the start
    region_payload payload{1, 3, {}, {2}};
    step_record sliced = record("slice", {0}, 1), act = record("activation", {1}, 2);
    sliced.slice = slice_parameters{dim, start, dim == 1 ? 8 : 4};
    act.activation = activation_parameters{"silu"};
    payload.steps = {sliced, act};
    compiled_region region = compile_region(payload, {});
    const auto plan = make_plan(*region.region, region.plans->weights, {{1, 16, 8, 8}});
    std::size_t own = 0, reorders = 0;
    for (const plan_implementation& each : plan->implementations) {
      own += each.implementation == "silu:avx2";
      reorders += each.kind == "reorder" && each.step.rfind("output", 0) != 0;
    }
    CHECK(own == (own_silu_enabled() ? 1 : 0));
    if (own_silu_enabled() || copied)
      CHECK(reorders == (copied ? 1 : 0));
    else  // oneDNN's swish (AVX-512): a strided view is copied dense first where its kernel is the reference one
      CHECK(reorders <= 1);
    const at::Tensor x = torch::randn({1, 16, 8, 8});
    const std::vector<c10::IValue> inputs{x};
    const at::Tensor y = OnednnBackend().execute(region, torch_delegate::inputs(inputs))[0].toTensor();
    CHECK(y.allclose(at::silu(x.narrow(dim, start, dim == 1 ? 8 : 4)), 1e-5, 1e-5));
  }
}

TEST_CASE("cat in place: at batch 1 each part is made in its range of the result, no concat runs") {
  // conv 1x1 8 -> C1 (0 -> 1), conv 1x1 8 -> C2 (0 -> 2), cat of 1 and 2 (-> 4; value 3 unused).
  // oneDNN makes these convolutions channel-blocked: nChw8c on AVX2, nChw16c on AVX-512. A part
  // whose channels are not whole blocks (8 of nChw16c) cannot be a range of the result: a concat.
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa()), avx2 = static_cast<unsigned>(dnnl::cpu_isa::avx2);
  const std::int64_t block = onednn_runs_avx512() ? 16 : (isa & avx2) == avx2 ? 8 : 0;
  if (block == 0) return;  // below AVX2 oneDNN's 1x1 convolutions are not channel-blocked
  for (const auto& [c1, c2] : {std::pair<std::int64_t, std::int64_t>{16, 8}, std::pair<std::int64_t, std::int64_t>{32, 16}}) {
    CAPTURE(c1);
    CAPTURE(c2);
    torch::manual_seed(9);
    std::map<std::string, at::Tensor> weights{{"w1", torch::randn({c1, 8, 1, 1})}, {"b1", torch::randn({c1})},
                                              {"w2", torch::randn({c2, 8, 1, 1})}, {"b2", torch::randn({c2})}};
    region_payload payload{1, 5, {}, {4}};
    step_record conv1 = record("convolution", {0}, 1), conv2 = record("convolution", {0}, 2);
    conv1.convolution = conv2.convolution = convolution_parameters{{1, 1}, {0, 0}, {1, 1}, 1};
    conv1.weight = "w1", conv1.bias = "b1", conv2.weight = "w2", conv2.bias = "b2";
    payload.steps = {conv1, conv2, record("cat", {1, 2}, 4)};
    compiled_region region = compile_region(payload, weights);
    for (const std::int64_t batch : {1, 2}) {  // batch 2: a concat primitive
      CAPTURE(batch);
      const auto plan = make_plan(*region.region, region.plans->weights, {{batch, 8, 6, 6}});
      const std::vector<std::string> kinds = kinds_of(*plan);
      const auto concats = std::count_if(kinds.begin(), kinds.end(), [](const std::string& k) { return k.ends_with(" concat"); });
      const at::Tensor x = torch::rand({batch, 8, 6, 6});
      const std::vector<c10::IValue> inputs{x};
      const at::Tensor y = OnednnBackend().execute(region, torch_delegate::inputs(inputs))[0].toTensor();
      CHECK(equal_to_rounding(y, at::cat({at::conv2d(x, weights["w1"], weights["b1"]), at::conv2d(x, weights["w2"], weights["b2"])}, 1), 8));
      if (batch == 2 || c2 % block != 0) {
        CHECK(concats == 1);
      } else {
        CHECK(concats == 0);
        std::vector<std::size_t> parts;  // the slots viewing the result, in the order the cat lists them
        for (std::size_t slot = 0; slot < plan->slots.size(); ++slot)
          if (plan->aliases[slot] != no_slot) parts.push_back(slot);
        REQUIRE(parts.size() == 2);
        CHECK(plan->aliases[parts[0]] == plan->aliases[parts[1]]);
        CHECK(plan->slots[parts[0]].dims() == dims{1, c1, 6, 6});
        CHECK(plan->alias_offsets[parts[0]] == 0);
        CHECK(plan->alias_offsets[parts[1]] == plan->slots[parts[0]].get_size());
      }
    }
  }
}

TEST_CASE("shuffle in a plan: cat, view, transpose, contiguous, view is one call of our kernel; a chunk's halves are its results") {
  // conv 1x1 16 -> C (0 -> 1), conv 1x1 16 -> C (0 -> 2), cat (-> 3), reshape [N, 2, C, H, W] (-> 4),
  // permute [0, 2, 1, 3, 4] (-> 5), contiguous (-> 6), reshape [N, 2C, H, W] (-> 7); then either
  // the result itself, or its halves (-> 8, 9) and a conv 1x1 C -> C of the second (-> 10).
  for (const std::int64_t channels : {16, 58})
    for (const std::int64_t batch : {1, 2})
      for (const bool halves : {false, true}) {
        CAPTURE(channels);
        CAPTURE(batch);
        CAPTURE(halves);
        torch::manual_seed(13);
        std::map<std::string, at::Tensor> weights{
            {"w1", torch::randn({channels, 16, 1, 1}) * 0.3}, {"b1", torch::randn({channels}) * 0.1},
            {"w2", torch::randn({channels, 16, 1, 1}) * 0.3}, {"b2", torch::randn({channels}) * 0.1},
            {"w3", torch::randn({channels, channels, 1, 1}) * 0.2}, {"b3", torch::randn({channels}) * 0.1}};
        const std::int64_t h = 7, w = 5;
        region_payload payload{1, halves ? 11 : 8, {}, {}};
        step_record conv1 = record("convolution", {0}, 1), conv2 = record("convolution", {0}, 2), conv3 = record("convolution", {9}, 10);
        conv1.convolution = conv2.convolution = conv3.convolution = convolution_parameters{{1, 1}, {0, 0}, {1, 1}, 1};
        conv1.weight = "w1", conv1.bias = "b1", conv2.weight = "w2", conv2.bias = "b2", conv3.weight = "w3", conv3.bias = "b3";
        step_record split = record("reshape", {3}, 4), swapped = record("permute", {4}, 5), merged = record("reshape", {6}, 7);
        split.reshape_sizes = std::vector<std::int64_t>{batch, 2, channels, h, w};
        swapped.permute_dims = std::vector<std::int64_t>{0, 2, 1, 3, 4};
        merged.reshape_sizes = std::vector<std::int64_t>{batch, 2 * channels, h, w};
        payload.steps = {conv1, conv2, record("cat", {1, 2}, 3), split, swapped, record("contiguous", {5}, 6), merged};
        if (halves) {
          step_record low = record("slice", {7}, 8), high = record("slice", {7}, 9);
          low.slice = slice_parameters{1, 0, channels};
          high.slice = slice_parameters{1, channels, channels};
          payload.steps.insert(payload.steps.end(), {low, high, conv3});
          payload.outputs = {8, 10};
        } else {
          payload.outputs = {7};
        }
        compiled_region region = compile_region(payload, weights);
        const auto plan = make_plan(*region.region, region.plans->weights, {{batch, 16, h, w}});
        std::size_t ours = 0, concats = 0, copies = 0;
        for (const plan_implementation& each : plan->implementations) {
          ours += each.implementation == "shuffle:sse";
          concats += each.kind == "concat";
          // the input's reorder into the convolutions' layout aside
          copies += each.kind == "reorder" && each.step.rfind("output", 0) != 0 && each.step.rfind("0 ", 0) != 0;
        }
        CHECK(ours == 1);
        CHECK(concats == 0);
        // The convolutions write and read the blocked layout the kernel uses; below AVX2 (a
        // cap) oneDNN's convolutions are not channel-blocked, and the kernel's inputs are copied.
        const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa()), avx2 = static_cast<unsigned>(dnnl::cpu_isa::avx2);
        if ((isa & avx2) == avx2) CHECK(copies == 0);
        const at::Tensor x = torch::randn({batch, 16, h, w});
        const std::vector<c10::IValue> inputs{x};
        const auto y = OnednnBackend().execute(region, torch_delegate::inputs(inputs));
        const at::Tensor joined = at::cat({at::conv2d(x, weights["w1"], weights["b1"]), at::conv2d(x, weights["w2"], weights["b2"])}, 1);
        const at::Tensor shuffled = joined.view({batch, 2, channels, h, w}).transpose(1, 2).contiguous().view({batch, 2 * channels, h, w});
        if (halves) {
          const auto parts = shuffled.chunk(2, 1);
          CHECK(y[0].toTensor().allclose(parts[0], 1e-5, 1e-5));
          CHECK(equal_to_rounding(y[1].toTensor(), at::conv2d(parts[1], weights["w3"], weights["b3"]), 16 + channels));  // 16 then `channels` terms
        } else {
          CHECK(y[0].toTensor().allclose(shuffled, 1e-5, 1e-5));
        }
      }
}

TEST_CASE("shuffle: what is not a channel shuffle of a cat runs as oneDNN's concat") {
  // cat (0, 0 -> 1), reshape [1, 2, 8, 3, 3] (-> 2), permute [0, 1, 2, 4, 3] (-> 3: not the
  // groups' transpose), contiguous (-> 4), reshape [1, 16, 3, 3] (-> 5).
  region_payload payload{1, 6, {}, {5}};
  step_record split = record("reshape", {1}, 2), swapped = record("permute", {2}, 3), merged = record("reshape", {4}, 5);
  split.reshape_sizes = std::vector<std::int64_t>{1, 2, 8, 3, 3};
  swapped.permute_dims = std::vector<std::int64_t>{0, 1, 2, 4, 3};
  merged.reshape_sizes = std::vector<std::int64_t>{1, 16, 3, 3};
  payload.steps = {record("cat", {0, 0}, 1), split, swapped, record("contiguous", {3}, 4), merged};
  compiled_region region = compile_region(payload, {});
  const auto plan = make_plan(*region.region, region.plans->weights, {{1, 8, 3, 3}});
  std::size_t ours = 0, concats = 0;
  for (const plan_implementation& each : plan->implementations) ours += each.implementation == "shuffle:sse", concats += each.kind == "concat";
  CHECK(ours == 0);
  CHECK(concats == 1);
  const at::Tensor x = torch::randn({1, 8, 3, 3});
  const std::vector<c10::IValue> inputs{x};
  const at::Tensor y = OnednnBackend().execute(region, torch_delegate::inputs(inputs))[0].toTensor();
  CHECK(y.allclose(at::cat({x, x}, 1).view({1, 2, 8, 3, 3}).transpose(3, 4).contiguous().view({1, 16, 3, 3})));
}

