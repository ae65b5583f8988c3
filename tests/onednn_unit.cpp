// Unit tests of the onednn backend's decisions, through its internal header: which steps fuse
// (fusion.cpp), where a plan's values live in a call's buffer (placement.cpp, planner.cpp), the
// bound of the plan-per-shape cache (backends/toolkit/plan_cache.hpp), version 1 payloads read as
// version 2, and the kernels of ours (Winograd's transforms, SiLU, the channel shuffle, the GEMM) against
// references. Each fails
// when a decision changes.
#include "helpers.hpp"

#include <onednn/channel_affine.hpp>
#include <onednn/gemm.hpp>
#include <onednn/internal.hpp>
#include <onednn/shuffle.hpp>
#include <onednn/silu.hpp>

#include <ATen/Parallel.h>

#include <torch_delegate/partition.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

using namespace onednn_delegate;

namespace {

compiled_step step_of(const char* op, std::vector<std::int64_t> inputs, std::int64_t output) {
  compiled_step step;
  step.record.op = op;
  step.record.inputs = std::move(inputs);
  step.record.output = output;
  step.kind = *step_kind_named(op);
  return step;
}

std::vector<step_fusion> fusions_of(const std::vector<compiled_step>& steps, std::int64_t values, std::vector<std::int64_t> outputs) {
  return decide_fusions(steps, values, outputs);
}

/// A region compiled from `payload`, its weights given as named data.
compiled_region compile_region(const region_payload& payload, const std::map<std::string, at::Tensor>& weights) {
  torch_delegate::named_data_map named("onednn");
  for (const auto& [key, tensor] : weights) named.insert(key, {tensor.contiguous(), 64});
  std::set<std::string> released;
  const auto context = torch_delegate::detail::compile_context_access::make("onednn", "forward", 2, &named, &released);
  OnednnBackend backend;
  return backend.compile(payload, context);
}

step_record record(const char* op, std::vector<std::int64_t> inputs, std::int64_t output) {
  step_record step;
  step.op = op;
  step.inputs = std::move(inputs);
  step.output = output;
  return step;
}

/// conv 3x3 (0 -> 1), relu (-> 2), conv 1x1 (-> 3), add of it and 2 (-> 4), relu (-> 5), permute
/// to NHWC (-> 6), flatten (-> 7): a residual block, then two views.
region_payload residual_payload(std::map<std::string, at::Tensor>& weights) {
  torch::manual_seed(5);
  weights = {{"w1", torch::randn({8, 4, 3, 3}) * 0.3}, {"b1", torch::randn({8}) * 0.1},
             {"w2", torch::randn({8, 8, 1, 1}) * 0.3}, {"b2", torch::randn({8}) * 0.1}};
  region_payload payload{1, 8, {}, {7}};
  step_record conv1 = record("convolution", {0}, 1), conv2 = record("convolution", {2}, 3);
  conv1.convolution = convolution_parameters{{1, 1}, {1, 1}, {1, 1}, 1};
  conv1.weight = "w1", conv1.bias = "b1";
  conv2.convolution = convolution_parameters{{1, 1}, {0, 0}, {1, 1}, 1};
  conv2.weight = "w2", conv2.bias = "b2";
  step_record permute = record("permute", {5}, 6), flatten = record("flatten", {6}, 7);
  permute.permute_dims = std::vector<std::int64_t>{0, 2, 3, 1};
  flatten.flatten = flatten_parameters{1, -1};
  payload.steps = {conv1, record("relu", {1}, 2), conv2, record("add", {3, 2}, 4), record("relu", {4}, 5), permute, flatten};
  return payload;
}

at::Tensor residual_reference(const at::Tensor& x, const std::map<std::string, at::Tensor>& w) {
  const at::Tensor y = at::relu(at::conv2d(x, w.at("w1"), w.at("b1"), 1, 1));
  return at::relu(at::conv2d(y, w.at("w2"), w.at("b2")) + y).permute({0, 2, 3, 1}).flatten(1);
}

/// Each call of a plan as "step: kind implementation" ("2 convolution: reorder jit:uni").
std::vector<std::string> kernels_of(const execution_plan& plan) {
  std::vector<std::string> kernels;
  for (const plan_implementation& each : plan.implementations) kernels.push_back(each.step + ": " + each.kind + " " + each.implementation);
  return kernels;
}

/// How many of `kernels` contain `part`.
std::ptrdiff_t count_named(const std::vector<std::string>& kernels, std::string_view part) {
  return std::count_if(kernels.begin(), kernels.end(), [&](const std::string& k) { return k.find(part) != std::string::npos; });
}

std::vector<std::string> kinds_of(const execution_plan& plan) {
  std::vector<std::string> kinds;
  for (const plan_implementation& each : plan.implementations) kinds.push_back(each.step + " " + each.kind);
  return kinds;
}

}  // namespace

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
  const auto plan = planner(*region.region, region.plans->weights, {{1, 4, 8, 8}}).build();
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
  CHECK(y.allclose(residual_reference(x, weights), 1e-4, 1e-5));
}

TEST_CASE("small steps are made and run on the calling thread; large ones on all; the thread count restored") {
  std::map<std::string, at::Tensor> weights;
  const compiled_region region = compile_region(residual_payload(weights), weights);
  // 4 -> 4 channels, 3x3: 9 k multiply-adds a convolution at 8x8 (below one_thread_work), 2.4 M at 128x128.
  for (const auto& [size, small] : {std::pair{8, true}, std::pair{128, false}}) {
    CAPTURE(size);
    const auto plan = planner(*region.region, region.plans->weights, {{1, 4, size, size}}).build();
    int convolutions = 0;
    for (std::size_t i = 0; i < plan->calls.size(); ++i)
      if (plan->implementations[i].kind == "convolution") {
        ++convolutions;
        CHECK(plan->calls[i].one_thread == small);
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
    CHECK(y.allclose(residual_reference(x, weights), 1e-4, 1e-5));
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
  const auto plan = planner(*region.region, region.plans->weights, {{2, 4, 8, 8}}).build();
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
  CHECK(region.plans->plans.contains({{1, 4, 5, 5}}));
  CHECK(!region.plans->plans.contains({{1, 4, 6, 6}}));
  const at::Tensor x = torch::rand({1, 4, 6, 6});  // planned again, right
  const std::vector<c10::IValue> inputs{x};
  CHECK(OnednnBackend().execute(region, torch_delegate::inputs(inputs))[0].toTensor().allclose(residual_reference(x, weights), 1e-4, 1e-5));
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
    const auto plan = planner(*region.region, region.plans->weights, {{1, 64, size, size}}).build();
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
  const auto plan = planner(*nhwc_region.region, nhwc_region.plans->weights, {{1, 64, 20, 20}}).build();
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
  const auto plan = planner(*region.region, region.plans->weights, {{1, 3, 24, 24}}).build();
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
  const auto plan = planner(*region.region, region.plans->weights, {{1, 3, 7, 7}}).build();
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
        const auto plan = planner(*region.region, region.plans->weights, {{batch, 16, 12, 12}, {batch, channels, 1, 1}}).build();
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
    const auto plan = planner(*region.region, region.plans->weights, {{batch, 64, 16, 16}}).build();
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
  const auto plan = planner(*region.region, region.plans->weights, {{1, 64, 14, 14}}).build();
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
      const auto plan = planner(*compiled->region, compiled->plans->weights, {sizes}).build();
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
  const auto plan = planner(*region.region, region.plans->weights, {{1, 16, 40, 40}}).build();
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
    const auto plan = planner(*region.region, region.plans->weights, {{1, 16, 8, 8}}).build();
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
      const auto plan = planner(*region.region, region.plans->weights, {{batch, 8, 6, 6}}).build();
      const std::vector<std::string> kinds = kinds_of(*plan);
      const auto concats = std::count_if(kinds.begin(), kinds.end(), [](const std::string& k) { return k.ends_with(" concat"); });
      const at::Tensor x = torch::rand({batch, 8, 6, 6});
      const std::vector<c10::IValue> inputs{x};
      const at::Tensor y = OnednnBackend().execute(region, torch_delegate::inputs(inputs))[0].toTensor();
      CHECK(y.allclose(at::cat({at::conv2d(x, weights["w1"], weights["b1"]), at::conv2d(x, weights["w2"], weights["b2"])}, 1), 1e-4, 1e-5));
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

namespace {

/// Value `v` of channel `c`, pixel `p`, image `n` in a [batch, channels, pixels] tensor laid out
/// channel-blocked by `block` (its last block padded).
float& blocked_at(std::vector<float>& t, const shuffle::geometry& g, std::int64_t channels, std::int64_t n, std::int64_t c,
                  std::int64_t p) {
  const std::int64_t blocks = (channels + g.block - 1) / g.block;
  return t[static_cast<std::size_t>(((n * blocks + c / g.block) * g.pixels + p) * g.block + c % g.block)];
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
        // The whole result, its halves (ShuffleNetV2's chunk), and an odd start.
        for (const auto& [first, count] : {std::pair{std::int64_t{0}, 2 * channels}, std::pair{std::int64_t{0}, channels},
                                           std::pair{channels, channels}, std::pair{std::int64_t{1}, 2 * channels - 1}}) {
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
      for (const auto& [first, count] : {std::pair{std::int64_t{0}, 2 * channels}, std::pair{std::int64_t{0}, channels},
                                         std::pair{channels, channels}, std::pair{std::int64_t{1}, 2 * channels - 1}}) {
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
        const auto plan = planner(*region.region, region.plans->weights, {{batch, 16, h, w}}).build();
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
          CHECK(y[1].toTensor().allclose(at::conv2d(parts[1], weights["w3"], weights["b3"]), 1e-4, 1e-5));
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
  const auto plan = planner(*region.region, region.plans->weights, {{1, 8, 3, 3}}).build();
  std::size_t ours = 0, concats = 0;
  for (const plan_implementation& each : plan->implementations) ours += each.implementation == "shuffle:sse", concats += each.kind == "concat";
  CHECK(ours == 0);
  CHECK(concats == 1);
  const at::Tensor x = torch::randn({1, 8, 3, 3});
  const std::vector<c10::IValue> inputs{x};
  const at::Tensor y = OnednnBackend().execute(region, torch_delegate::inputs(inputs))[0].toTensor();
  CHECK(y.allclose(at::cat({x, x}, 1).view({1, 2, 8, 3, 3}).transpose(3, 4).contiguous().view({1, 16, 3, 3})));
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
