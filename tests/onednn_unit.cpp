// Unit tests of the onednn backend's decisions, through its internal header: which steps fuse
// (fusion.cpp), where a plan's values live in a call's buffer (placement.cpp, planner.cpp), the
// bound of the plan-per-shape cache (backends/toolkit/plan_cache.hpp), version 1 payloads read as
// version 2, which regions it accepts. Each fails when a decision changes. The kernels of ours and
// the plans that use them: onednn_kernels.cpp.
#include "onednn_test_helpers.hpp"

#include <ATen/Parallel.h>

#include <algorithm>
#include <set>

using namespace onednn_delegate;
using namespace onednn_test;

TEST_CASE("fusion: conv + relu (BatchNorm folded at preprocess) is one convolution with its relu") {
  const std::vector<compiled_step> steps{step_of("convolution", {0}, 1), step_of("relu", {1}, 2)};
  const auto fusion = fusions_of(steps, 3, {2});
  CHECK(fusion[0].relu == std::optional<std::size_t>(1));
  CHECK(fusion[0].post_ops.empty());
  CHECK(fusion[1].absorbed);
}

TEST_CASE("fusion: conv + add (+ relu) is a sum post-op of the later convolution, the add keeping its relu") {
  // conv a (0 -> 1), relu (-> 2), conv b (2 -> 3), add(3, 2) (-> 4), relu (-> 5)
  const std::vector<compiled_step> steps{step_of("convolution", {0}, 1), step_of("relu", {1}, 2), step_of("convolution", {2}, 3),
                                         step_of("add", {3, 2}, 4), step_of("relu", {4}, 5)};
  const auto fusion = fusions_of(steps, 6, {5});
  CHECK(fusion[0].relu == std::optional<std::size_t>(1));
  CHECK(fusion[0].post_ops.empty());  // its value is read twice (conv b and the add): no post-op
  CHECK(fusion[2].post_ops == std::vector<std::size_t>{3});
  CHECK(fusion[3].relu == std::optional<std::size_t>(4));
  CHECK((fusion[1].absorbed && fusion[3].absorbed && fusion[4].absorbed));
  CHECK(!fusion[0].absorbed);
  CHECK(!fusion[2].absorbed);
  CHECK(finished_value([&] {
          auto decided = steps;
          for (std::size_t i = 0; i < decided.size(); ++i) decided[i].fusion = fusion[i];
          return decided;
        }(), 3) == 5);
}

TEST_CASE("fusion: of two convolutions added, the later one takes the add") {
  // conv a (0 -> 1), conv b (0 -> 2), add(1, 2) (-> 3): a's add partner is made after a.
  const std::vector<compiled_step> steps{step_of("convolution", {0}, 1), step_of("convolution", {0}, 2), step_of("add", {1, 2}, 3)};
  const auto fusion = fusions_of(steps, 4, {3});
  CHECK(fusion[0].post_ops.empty());
  CHECK(fusion[1].post_ops == std::vector<std::size_t>{2});
}

TEST_CASE("fusion: a matmul's scaled first operand is its first post-op (attention's query, (s q) k = s (q k))") {
  // scale_by (0 -> 2), matmul(2, 1) (-> 3)
  const std::vector<compiled_step> steps{step_of("scale_by", {0}, 2), step_of("matmul", {2, 1}, 3)};
  auto fusion = fusions_of(steps, 4, {3});
  CHECK(fusion[1].scaled_first == std::optional<std::size_t>(0));
  CHECK(fusion[0].absorbed);
  SUBCASE("not when the scaled value is also a result, or read otherwise") {
    fusion = fusions_of(steps, 4, {3, 2});
    CHECK_FALSE(fusion[1].scaled_first);
    CHECK_FALSE(fusion[0].absorbed);
    const std::vector<compiled_step> twice{step_of("scale_by", {0}, 2), step_of("matmul", {2, 2}, 3)};
    CHECK_FALSE(fusions_of(twice, 4, {3})[1].scaled_first);
  }
  SUBCASE("not as the second operand") {
    const std::vector<compiled_step> second{step_of("scale_by", {0}, 2), step_of("matmul", {1, 2}, 3)};
    CHECK_FALSE(fusions_of(second, 4, {3})[1].scaled_first);
  }
}

TEST_CASE("fusion: a squeeze-excitation's mul is a candidate for the convolution without groups that alone reads it as its input") {
  // mul(0, 1) (-> 2), conv (2 -> 3): the convolution may read 0 with its weights scaled by 1
  auto conv = step_of("convolution", {2}, 3);
  conv.record.convolution = convolution_parameters{};
  conv.record.convolution->groups = 1;
  conv.weight_sizes = {32, 16, 1, 1};
  std::vector<compiled_step> steps{step_of("mul", {0, 1}, 2), conv};
  CHECK(fusions_of(steps, 4, {3})[0].scales_weights_of == std::optional<std::size_t>(1));
  SUBCASE("not when the product is a result, or read by another step too") {
    CHECK_FALSE(fusions_of(steps, 4, {3, 2})[0].scales_weights_of);
    auto also = steps;
    also.push_back(step_of("relu", {2}, 4));
    CHECK_FALSE(fusions_of(also, 5, {3, 4})[0].scales_weights_of);
  }
  SUBCASE("not into a grouped convolution, or one that reads it as other than its input") {
    steps[1].weight_sizes = {32, 8, 1, 1};
    steps[1].record.convolution->groups = 2;
    CHECK_FALSE(fusions_of(steps, 4, {3})[0].scales_weights_of);
    std::vector<compiled_step> added{step_of("mul", {0, 1}, 2), step_of("add", {0, 2}, 3)};
    CHECK_FALSE(fusions_of(added, 4, {3})[0].scales_weights_of);
  }
}

TEST_CASE("fusion: a cat chain ends at the latest cat whose parts begin with a cat's parts (DenseNet's growing cats)") {
  // cat(0) (-> 1), conv (1 -> 2), cat(0, 2) (-> 3), conv (3 -> 4), cat(0, 2, 4) (-> 5), cat(0, 4) (-> 6)
  const std::vector<compiled_step> steps{step_of("cat", {0}, 1),         step_of("convolution", {1}, 2), step_of("cat", {0, 2}, 3),
                                         step_of("convolution", {3}, 4), step_of("cat", {0, 2, 4}, 5),   step_of("cat", {0, 4}, 6)};
  const auto fusion = fusions_of(steps, 7, {5, 6});
  CHECK(fusion[0].chain_end == std::optional<std::size_t>(5));  // the latest that begins with (0): cat(0, 4)
  CHECK(fusion[2].chain_end == std::optional<std::size_t>(4));
  CHECK_FALSE(fusion[4].chain_end);  // no later cat begins with (0, 2, 4)
  CHECK_FALSE(fusion[5].chain_end);
}

TEST_CASE("builders: the table has a builder for every step kind, in the enum's order") {
  static_assert(builders.size() == step_names.size());
  const auto of = [](step_kind kind) { return builders[static_cast<std::size_t>(kind)]; };
  for (const step_planner builder : builders) CHECK((builder != nullptr));
  CHECK((of(step_kind::relu) == of(step_kind::activation) && of(step_kind::relu) == of(step_kind::scale_by)));
  CHECK((of(step_kind::max_pool2d) == of(step_kind::max_pool3d)));
  CHECK((of(step_kind::convolution) != of(step_kind::linear)));
}

TEST_CASE("fusion: what is not fused, and why") {
  SUBCASE("a result is never fused away") {
    const std::vector<compiled_step> steps{step_of("convolution", {0}, 1), step_of("relu", {1}, 2)};
    const auto fusion = fusions_of(steps, 3, {1, 2});
    CHECK(!fusion[0].relu);
    CHECK(fusion[0].post_ops.empty());
  }
  SUBCASE("a value read twice keeps its readers apart") {
    const std::vector<compiled_step> steps{step_of("convolution", {0}, 1), step_of("relu", {1}, 2), step_of("activation", {1}, 3)};
    const auto fusion = fusions_of(steps, 4, {2, 3});
    CHECK(!fusion[0].relu);
    CHECK(fusion[0].post_ops.empty());
  }
  SUBCASE("a linear takes activations as post-ops, not an add, and folds no relu of its own") {
    const std::vector<compiled_step> steps{step_of("linear", {0}, 1), step_of("relu", {1}, 2), step_of("activation", {2}, 3),
                                           step_of("add", {3, 0}, 4)};
    const auto fusion = fusions_of(steps, 5, {4});
    CHECK(!fusion[0].relu);
    CHECK(fusion[0].post_ops == std::vector<std::size_t>{1, 2});
    CHECK(!fusion[3].absorbed);
  }
  SUBCASE("only convolutions and linears host post-ops; a pooling's activation runs on its own") {
    const std::vector<compiled_step> steps{step_of("max_pool2d", {0}, 1), step_of("activation", {1}, 2), step_of("relu", {2}, 3)};
    const auto fusion = fusions_of(steps, 4, {3});
    for (const step_fusion& each : fusion) CHECK((!each.absorbed && !each.relu && each.post_ops.empty()));
  }
  SUBCASE("an add of a value with itself") {
    const std::vector<compiled_step> steps{step_of("convolution", {0}, 1), step_of("add", {1, 1}, 2)};
    CHECK(fusions_of(steps, 3, {2})[0].post_ops.empty());
  }
}

TEST_CASE("fusion as planned: the residual block runs as two convolutions, nothing else before its views") {
  std::map<std::string, at::Tensor> weights;
  const compiled_region region = compile_region(residual_payload(weights), weights);
  const auto plan = make_plan(*region.region, region.plans->weights, {{1, 4, 8, 8}});
  const std::vector<std::string> kinds = kinds_of(*plan);
  CHECK(std::count_if(kinds.begin(), kinds.end(), [](const std::string& k) { return k.ends_with(" convolution"); }) == 2);
  for (const std::string& kind : kinds) {
    CHECK(!kind.ends_with(" eltwise"));
    CHECK(!kind.ends_with(" binary"));
  }
  const at::Tensor x = torch::rand({1, 4, 8, 8});
  compiled_region runnable = region;
  const std::vector<c10::IValue> inputs{x};
  const at::Tensor y = OnednnBackend().execute(runnable, torch_delegate::inputs(inputs))[0].toTensor();
  CHECK(equal_to_rounding(y, residual_reference(x, weights), residual_terms));
}

TEST_CASE("1x1 convolutions on our GEMM: where it was faster than oneDNN's AVX2 kernel") {
  CHECK(gemm_1x1_pays(49, 160, 960));     // 7 x 7, 96 channels or more
  CHECK(gemm_1x1_pays(64, 96, 96));
  CHECK(!gemm_1x1_pays(49, 88, 960));     // fewer than 96 in
  CHECK(!gemm_1x1_pays(49, 960, 88));     // or out
  CHECK(gemm_1x1_pays(196, 256, 1024));   // 14 x 14, 256 or more
  CHECK(gemm_1x1_pays(196, 1024, 1024));
  CHECK(!gemm_1x1_pays(196, 96, 576));    // 14 x 14 with fewer
  CHECK(!gemm_1x1_pays(784, 512, 512));   // 28 x 28
  CHECK(!gemm_1x1_pays(5, 2048, 2048));   // below one 6-row step
  CHECK(gemm_1x1_pays(6, 2048, 2048));
}

TEST_CASE("small steps are made and run on the calling thread; large ones on all; the thread count restored") {
  std::map<std::string, at::Tensor> weights;
  const compiled_region region = compile_region(residual_payload(weights), weights);
  // 4 -> 4 channels, 3x3: 9 k multiply-adds a convolution at 8x8 (below one_thread_work), 2.4 M at 128x128.
  for (const auto& [size, small] : {std::pair{8, true}, std::pair{128, false}}) {
    CAPTURE(size);
    const auto plan = make_plan(*region.region, region.plans->weights, {{1, 4, size, size}});
    int convolutions = 0;
    for (std::size_t i = 0; i < plan->calls.size(); ++i)
      if (plan->implementations[i].kind == "convolution") {
        ++convolutions;
        // A kernel of ours (the 1x1 one on our GEMM, at AVX2) splits its own work: never flagged.
        CHECK(plan->calls[i].one_thread == (small && !plan->calls[i].host));
      }
    CHECK(convolutions == 2);
    const int threads = at::get_num_threads();
    at::set_num_threads(2);  // a count the one-thread calls must give back (1 would hide a leak)
    const at::Tensor x = torch::rand({1, 4, size, size});
    compiled_region runnable = region;
    const std::vector<c10::IValue> inputs{x};
    const at::Tensor y = OnednnBackend().execute(runnable, torch_delegate::inputs(inputs))[0].toTensor();
    CHECK(at::get_num_threads() == 2);
    at::set_num_threads(threads);
    CHECK(equal_to_rounding(y, residual_reference(x, weights), residual_terms));
  }
}

TEST_CASE("placement: values alive at once never share bytes; dead ones do; 64-byte slots") {
  // a: calls 0-1, b: 1-2, c: 2-3 (100 bytes each), d: none (not in the buffer), e: 0-3 (10 bytes)
  const std::vector<buffer_slot> slots{{100, 0, 1}, {100, 1, 2}, {100, 2, 3}, {0, 0, 3}, {10, 0, 3}};
  const buffer_layout layout = lay_out_buffer(slots);
  CHECK(layout.offsets == std::vector<std::size_t>{0, 128, 0, 0, 256});
  CHECK(layout.bytes == 320);
  for (const std::size_t offset : layout.offsets) CHECK(offset % buffer_alignment == 0);
}

TEST_CASE("placement on a plan: no two live values overlap, views are in place, the scratchpad after the values") {
  std::map<std::string, at::Tensor> weights;
  const compiled_region region = compile_region(residual_payload(weights), weights);
  const auto plan = make_plan(*region.region, region.plans->weights, {{2, 4, 8, 8}});
  const auto& lives = plan->lives;
  REQUIRE(lives.size() == plan->slots.size());
  const auto rounded = [](std::size_t bytes) { return (bytes + buffer_alignment - 1) / buffer_alignment * buffer_alignment; };
  std::size_t placed = 0;
  for (std::size_t a = 0; a < lives.size(); ++a) {
    if (lives[a].bytes == 0) continue;
    ++placed;
    CHECK(plan->offsets[a] % buffer_alignment == 0);
    CHECK(lives[a].bytes == plan->slots[a].get_size());
    CHECK(plan->offsets[a] + rounded(lives[a].bytes) <= plan->scratchpad_offset);
    for (std::size_t b = a + 1; b < lives.size(); ++b) {
      if (lives[b].bytes == 0 || lives[a].last_use < lives[b].first_use || lives[b].last_use < lives[a].first_use) continue;
      CAPTURE(a);
      CAPTURE(b);
      CHECK((plan->offsets[a] + rounded(lives[a].bytes) <= plan->offsets[b] || plan->offsets[b] + rounded(lives[b].bytes) <= plan->offsets[a]));
    }
  }
  CHECK(placed >= 2);
  CHECK(plan->scratchpad_offset <= plan->buffer_bytes);
  // The input and the weights are not in the buffer; the permute and the flatten are views (in
  // place over their input's bytes: an alias, nothing placed for them).
  CHECK(lives[0].bytes == 0);
  std::size_t views = 0;
  for (std::size_t slot = 0; slot < plan->slots.size(); ++slot) {
    if (plan->aliases[slot] == no_slot) continue;
    ++views;
    CHECK(lives[slot].bytes == 0);
    CHECK(plan->aliases[plan->aliases[slot]] == no_slot);  // a view of bytes, never of a view
  }
  CHECK(views == 2);
}

TEST_CASE("plan cache: the (N+1)th shape evicts the least recently used") {
  torch_delegate::toolkit::plan_cache<int> cache(2);
  int made = 0;
  const auto make = [&] { return std::make_shared<const int>(++made); };
  CHECK(*cache.get_or_make({{1}}, make) == 1);
  CHECK(*cache.get_or_make({{2}}, make) == 2);
  CHECK(*cache.get_or_make({{1}}, make) == 1);  // found: now the most recently used
  CHECK(*cache.get_or_make({{3}}, make) == 3);  // evicts {2}
  CHECK(cache.size() == 2);
  CHECK(cache.contains({{1}}));
  CHECK(!cache.contains({{2}}));
  CHECK(*cache.get_or_make({{2}}, make) == 4);  // made again
}

TEST_CASE("plan cache in onednn: a region keeps OnednnBackend::max_plans plans, least recently used out") {
  std::map<std::string, at::Tensor> weights;
  compiled_region region = compile_region(residual_payload(weights), weights);
  const auto call = [&](std::int64_t size) {
    const std::vector<c10::IValue> inputs{torch::rand({1, 4, size, size})};
    return OnednnBackend().execute(region, torch_delegate::inputs(inputs))[0].toTensor();
  };
  for (std::int64_t size = 5; size < 5 + static_cast<std::int64_t>(OnednnBackend::max_plans); ++size) call(size);
  CHECK(region.plans->plans.size() == OnednnBackend::max_plans);
  call(5);                                                  // 6 is now the least recently used
  call(5 + static_cast<std::int64_t>(OnednnBackend::max_plans));  // the (N+1)th shape
  CHECK(region.plans->plans.size() == OnednnBackend::max_plans);
  CHECK(region.plans->plans.contains(plan_key{{{1, 4, 5, 5}}, planning_threads()}));
  CHECK(!region.plans->plans.contains(plan_key{{{1, 4, 6, 6}}, planning_threads()}));
  const at::Tensor x = torch::rand({1, 4, 6, 6});  // planned again, right
  const std::vector<c10::IValue> inputs{x};
  CHECK(equal_to_rounding(OnednnBackend().execute(region, torch_delegate::inputs(inputs))[0].toTensor(), residual_reference(x, weights), residual_terms));
}

TEST_CASE("plan cache in onednn: a plan per thread count, so torch.set_num_threads after the first call takes effect") {
  std::map<std::string, at::Tensor> weights;
  compiled_region region = compile_region(residual_payload(weights), weights);
  const int saved = at::get_num_threads();
  const at::Tensor x = torch::rand({1, 4, 7, 7});
  const std::vector<c10::IValue> inputs{x};
  for (const int threads : {1, 2, 1}) {
    at::set_num_threads(threads);
    CHECK(equal_to_rounding(OnednnBackend().execute(region, torch_delegate::inputs(inputs))[0].toTensor(), residual_reference(x, weights),
                            residual_terms));
  }
  at::set_num_threads(saved);
#ifdef _OPENMP
  CHECK(region.plans->plans.size() == 2);  // one thread's plan reused, not made again
  CHECK(region.plans->plans.contains(plan_key{{{1, 4, 7, 7}}, 1}));
  CHECK(region.plans->plans.contains(plan_key{{{1, 4, 7, 7}}, 2}));
#endif
}

TEST_CASE("payload: version 1's relu flags read as relu steps, which fusion folds back") {
  using c10::ivalue::Tuple;
  auto step = [](std::int64_t op, std::vector<std::int64_t> ints, const char* weight, const char* bias) {
    return c10::IValue(Tuple::create({c10::IValue(op), c10::IValue(c10::List<std::int64_t>(ints)), c10::IValue(weight), c10::IValue(bias)}));
  };
  c10::impl::GenericList steps(c10::AnyType::get());
  steps.push_back(step(0, {0, 1, 1, 1, 1, 1, 1, 1, 1, 1}, "w", "b"));  // convolution 0 -> 1, relu flagged
  steps.push_back(step(2, {1, 0, 2, 1}, "", ""));                      // add(1, 0) -> 2, relu flagged
  const c10::IValue v1 = Tuple::create({c10::IValue(std::int64_t{1}), c10::IValue(std::int64_t{3}), c10::IValue(steps),
                                        c10::IValue(c10::List<std::int64_t>({2}))});
  using caster = torch_delegate::ivalue_caster<region_payload>;
  REQUIRE(caster::check(v1));
  const region_payload payload = caster::load(v1);
  CHECK(payload.values == 5);
  REQUIRE(payload.steps.size() == 4);
  CHECK((payload.steps[0].op == "convolution" && payload.steps[0].output == 3));
  CHECK((payload.steps[1].op == "relu" && payload.steps[1].inputs == std::vector<std::int64_t>{3} && payload.steps[1].output == 1));
  CHECK((payload.steps[2].op == "add" && payload.steps[2].output == 4));
  CHECK((payload.steps[3].op == "relu" && payload.steps[3].output == 2));
  CHECK(payload.steps[0].convolution->groups == 1);
  const std::vector<compiled_step> decoded = decode_steps(payload, "forward");
  CHECK(decoded[0].fusion.relu == std::optional<std::size_t>(1));
  CHECK(decoded[0].fusion.post_ops == std::vector<std::size_t>{2});
  CHECK(decoded[2].fusion.relu == std::optional<std::size_t>(3));
  // Version 2 written and read back as itself.
  const c10::IValue v2 = caster::cast(payload);
  CHECK(caster::check(v2));
  CHECK(!is_format1(v2));
  CHECK(caster::load(v2).steps.size() == 4);
}

TEST_CASE("payload: a linear reads its bias as a second value exactly when it has no bias key") {
  region_payload payload;
  payload.inputs = 2;
  payload.values = 3;
  payload.outputs = {2};
  step_record& linear = payload.steps.emplace_back();
  linear.op = "linear";
  linear.output = 2;
  linear.weight = "w";
  linear.inputs = {0, 1};  // x and a bias computed in the call
  CHECK(decode_steps(payload, "forward").size() == 1);
  linear.inputs = {0};  // no bias key and no bias value
  CHECK(test_helpers::error_of([&] { decode_steps(payload, "forward"); }) == "onednn: region forward: step 0: a linear that reads 1 values");
  linear.bias = "b";  // a stored bias and a bias value
  linear.inputs = {0, 1};
  CHECK(test_helpers::error_of([&] { decode_steps(payload, "forward"); }) == "onednn: region forward: step 0: a linear that reads 2 values");
}

TEST_CASE("payload: 3-d steps take three values of each, 2-d ones two") {
  region_payload payload;
  payload.inputs = 1;
  payload.values = 3;
  payload.outputs = {2};
  step_record& conv = payload.steps.emplace_back();
  conv.op = "convolution";
  conv.inputs = {0};
  conv.output = 1;
  conv.weight = "w";
  conv.bias = "b";
  conv.convolution = convolution_parameters{{1, 1, 1}, {0, 1, 1}, {1, 1, 1}, 1};  // a 1x3x3 convolution's
  step_record& pool = payload.steps.emplace_back();
  pool.op = "max_pool3d";
  pool.inputs = {1};
  pool.output = 2;
  pool.pooling = pooling_parameters{{1, 3, 3}, {1, 2, 2}, {0, 1, 1}, false};
  const std::vector<compiled_step> decoded = decode_steps(payload, "forward");
  CHECK(decoded[1].kind == step_kind::max_pool3d);
  CHECK(name_of(step_kind::global_avg_pool3d) == "adaptive_avg_pool3d");
  payload.steps[1].pooling = pooling_parameters{{3, 3}, {2, 2}, {1, 1}, false};  // a max_pool2d's window
  CHECK(test_helpers::error_of([&] { decode_steps(payload, "forward"); }) == "onednn: region forward: step 1: a max_pool3d without its parameters");
  payload.steps[1].pooling = pooling_parameters{{1, 3, 3}, {1, 2, 2}, {0, 1, 1}, false};
  payload.steps[0].convolution->padding = {0, 1};  // two paddings for three strides
  CHECK(test_helpers::error_of([&] { decode_steps(payload, "forward"); }) == "onednn: region forward: step 0: a convolution without its parameters");
}

TEST_CASE("payload: a reduce needs its kind and dimensions, a resample its mode and sizes, a deconvolution its convolution's parameters") {
  region_payload payload;
  payload.inputs = 1;
  payload.values = 3;
  payload.outputs = {2};
  step_record& up = payload.steps.emplace_back();
  up.op = "deconvolution";
  up.inputs = {0};
  up.output = 1;
  up.weight = "w";
  up.bias = "b";
  up.convolution = convolution_parameters{{2, 2}, {0, 0}, {1, 1}, 1};
  step_record& max = payload.steps.emplace_back();
  max.op = "reduce";
  max.inputs = {1};
  max.output = 2;
  max.reduction = reduction_parameters{"max", {2, 3}, false};
  const std::vector<compiled_step> decoded = decode_steps(payload, "forward");
  CHECK(decoded[0].kind == step_kind::deconvolution);
  CHECK(decoded[1].kind == step_kind::reduce);
  payload.steps[1].reduction = reduction_parameters{"mean", {2}, false};  // a kind this build does not compute
  CHECK(test_helpers::error_of([&] { decode_steps(payload, "forward"); }) ==
        "onednn: region forward: step 1: a reduce without its parameters");
  payload.steps[1].reduction = reduction_parameters{"max", {}, false};
  CHECK(test_helpers::error_of([&] { decode_steps(payload, "forward"); }) ==
        "onednn: region forward: step 1: a reduce without its parameters");
  payload.steps[1].reduction.reset();
  CHECK(test_helpers::error_of([&] { decode_steps(payload, "forward"); }) ==
        "onednn: region forward: step 1: a reduce without its parameters");
  payload.steps[1].reduction = reduction_parameters{"max", {2}, true};
  payload.steps[1].op = "resample";  // an upsampling: a mode, and whole factors or sizes, not both
  payload.steps[1].resampling = resampling_parameters{"bilinear", {2, 2}, {}};
  CHECK(decode_steps(payload, "forward")[1].kind == step_kind::resample);
  payload.steps[1].resampling = resampling_parameters{"bicubic", {2, 2}, {}};
  CHECK(test_helpers::error_of([&] { decode_steps(payload, "forward"); }) ==
        "onednn: region forward: step 1: a resample without its parameters");
  payload.steps[1].resampling = resampling_parameters{"nearest", {2, 2}, {8, 8}};
  CHECK(test_helpers::error_of([&] { decode_steps(payload, "forward"); }) ==
        "onednn: region forward: step 1: a resample without its parameters");
  payload.steps[1].resampling = resampling_parameters{"nearest", {}, {8, 8}};
  payload.steps[0].output_padding = std::vector<std::int64_t>{1, 1};  // below the stride: PyTorch's rule
  CHECK(decode_steps(payload, "forward")[0].kind == step_kind::deconvolution);
  for (const std::vector<std::int64_t>& bad :
       {std::vector<std::int64_t>{2, 1}, std::vector<std::int64_t>{1}, std::vector<std::int64_t>{-1, 0}}) {
    payload.steps[0].output_padding = bad;
    CHECK(test_helpers::error_of([&] { decode_steps(payload, "forward"); }) ==
          "onednn: region forward: step 0: a deconvolution without its parameters");
  }
  payload.steps[0].output_padding.reset();
  payload.steps[0].convolution->stride = {0, 2};
  CHECK(test_helpers::error_of([&] { decode_steps(payload, "forward"); }) ==
        "onednn: region forward: step 0: a deconvolution without its parameters");
}

TEST_CASE("payload: a recurrent layer needs its kind, layer and hidden size, and reads its input with all its states or none") {
  region_payload payload;
  payload.inputs = 3;
  payload.values = 4;
  payload.outputs = {3};
  step_record& layer = payload.steps.emplace_back();
  layer.op = "recurrent";
  layer.inputs = {0, 1, 2};  // input, h0, c0
  layer.output = 3;
  layer.weight = "w";
  layer.bias = "b";
  layer.recurrent = recurrent_parameters{"lstm", 1, 2, 16, true};
  CHECK(decode_steps(payload, "forward")[0].kind == step_kind::recurrent);
  payload.steps[0].inputs = {0};  // no states: zeros
  CHECK(decode_steps(payload, "forward")[0].kind == step_kind::recurrent);
  payload.steps[0].inputs = {0, 1};  // an LSTM's h without its c
  CHECK(test_helpers::error_of([&] { decode_steps(payload, "forward"); }) ==
        "onednn: region forward: step 0: a recurrent that reads 2 values");
  payload.steps[0].recurrent->kind = "gru";  // a GRU's h
  CHECK(decode_steps(payload, "forward")[0].kind == step_kind::recurrent);
  for (const recurrent_parameters& bad :
       {recurrent_parameters{"peephole_lstm", 0, 1, 16, false}, recurrent_parameters{"gru", 2, 2, 16, false},
        recurrent_parameters{"gru", 0, 1, 0, false}, recurrent_parameters{"gru", -1, 1, 8, false}}) {
    payload.steps[0].recurrent = bad;
    CHECK(test_helpers::error_of([&] { decode_steps(payload, "forward"); }) ==
          "onednn: region forward: step 0: a recurrent without its parameters");
  }
  payload.steps[0].recurrent.reset();
  payload.steps[0].inputs = {0};
  CHECK(test_helpers::error_of([&] { decode_steps(payload, "forward"); }) ==
        "onednn: region forward: step 0: a recurrent without its parameters");
}

TEST_CASE("accepts_region: a region with no convolution or linear, or with part of F.normalize's pattern, is refused, saying why") {
  // F.normalize(y, dim=-1) as TorchScript scripts it: norm, clamp_min, expand_as, div.
  const torch::jit::Module module = test_helpers::script(R"(
def forward(self, x, w):
    y = torch.linear(x, w)
    d = y.norm(2.0, -1, True).clamp_min(1e-12).expand_as(y)
    return torch.relu(y / d)
)");
  std::vector<const torch::jit::Node*> nodes;
  for (torch::jit::Node* node : module.get_method("forward").graph()->nodes()) {
    if (node->kind() == c10::prim::Constant) continue;
    nodes.push_back(node);
    // The sizes example inputs would give (the pattern is matched on a float tensor of known sizes).
    if (node->kind() == c10::aten::linear) node->output()->setType(c10::TensorType::create(at::zeros({3, 5, 16})));
  }
  const auto without = [&](const char* kind) {
    std::vector<const torch::jit::Node*> kept;
    for (const torch::jit::Node* node : nodes)
      if (std::string(node->kind().toQualString()) != kind) kept.push_back(node);
    return kept;
  };
  const auto verdict = [](const std::vector<const torch::jit::Node*>& region) {
    return OnednnBackend::accepts_region(std::span<const torch::jit::Node* const>(region.data(), region.size()));
  };
  REQUIRE(nodes.size() >= 6);  // linear, norm, clamp_min, expand_as, div, relu (and the dims list)
  CHECK(verdict(nodes).accepted);
  const torch_delegate::region_verdict no_div = verdict(without("aten::div"));
  CHECK_FALSE(no_div.accepted);
  CHECK(no_div.reason == "part of F.normalize's pattern (norm, clamp_min, expand_as, div) is outside it");
  const torch_delegate::region_verdict no_linear = verdict(without("aten::linear"));
  CHECK_FALSE(no_linear.accepted);
  CHECK(no_linear.reason == "no convolution or linear: not worth a call");
}

TEST_CASE("plan cache in onednn: a region called in a loop over a feature pyramid keeps a plan per level") {
  // RetinaNet's and SSD's heads run one region per pyramid level (5 or 6 shapes each call): with
  // fewer plans than levels, the least recently used was always the next one needed, and every
  // call planned every level again (RetinaNet lowered: 1.13x slower than scripted).
  std::map<std::string, at::Tensor> weights;
  compiled_region region = compile_region(residual_payload(weights), weights);
  const std::vector<std::int64_t> levels{40, 20, 10, 5, 3, 2};
  REQUIRE(levels.size() <= OnednnBackend::max_plans);
  const auto call_levels = [&] {
    for (const std::int64_t size : levels) {
      const at::Tensor x = torch::rand({1, 4, size, size});
      const std::vector<c10::IValue> inputs{x};
      OnednnBackend().execute(region, torch_delegate::inputs(inputs));
    }
  };
  const auto plans = [&] {
    std::set<const void*> made;
    region.plans->plans.for_each([&](const auto&, const auto& plan) { made.insert(&plan); });
    return made;
  };
  call_levels();
  const std::set<const void*> first = plans();
  CHECK(first.size() == levels.size());
  call_levels();
  call_levels();
  CHECK(plans() == first);  // none planned again
}
