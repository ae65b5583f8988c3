// The backends and helpers of the partial-lowering tests (tests/test_partition_*.cpp), in one
// place: each backend exercises one part of partitioning (what it supports, its region checks,
// its signatures, options, availability, layout, re-planning, speed).
#pragma once

#include "backends.hpp"
#include "helpers.hpp"

#include <backend_with_compiler_demo/demo_backend.hpp>
#include <torch_delegate/partition.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace partition_backends {

using demo::DemoBackend;

/// Runs each region's own graph (generic execute: any boundary type); supports add, sub, mul.
struct ReferenceBackend : test_backends::GenericBackend {
  static constexpr std::string_view name = "td_partition_reference";
  static bool supports(const torch::jit::Node* node) {
    return node->kind() == c10::aten::add || node->kind() == c10::aten::sub || node->kind() == c10::aten::mul ||
           node->kind() == c10::prim::Constant;
  }
};

/// ReferenceBackend that re-plans (other_shapes::replan): each replan counted, with the shapes asked for.
struct ReplanningBackend : ReferenceBackend {
  static constexpr std::string_view name = "td_partition_replanning";
  static inline std::atomic<int> replans{0};
  static inline std::vector<std::int64_t> last_sizes;
  test_backends::graph_handle replan(test_backends::graph_handle& compiled, const torch_delegate::given_inputs& given) {
    ++replans;
    if (given.at(0)->sizes.at(0) == 13) throw std::runtime_error("no plan for 13 rows");
    last_sizes = given.at(0)->sizes;
    return compiled;
  }
};

/// Refuses any region that multiplies (its own check on a whole candidate region).
struct NoMulRegions : ReferenceBackend {
  static constexpr std::string_view name = "td_partition_no_mul_regions";
  static bool accepts_region(std::span<const torch::jit::Node* const> region) {
    return std::none_of(region.begin(), region.end(), [](const torch::jit::Node* node) { return node->kind() == c10::aten::mul; });
  }
};

/// The same, saying why (a region_verdict): the report gives the reason.
struct NoMulRegionsSaysWhy : ReferenceBackend {
  static constexpr std::string_view name = "td_partition_no_mul_regions_says_why";
  static torch_delegate::region_verdict accepts_region(std::span<const torch::jit::Node* const> region) {
    for (const torch::jit::Node* node : region)
      if (node->kind() == c10::aten::mul) return torch_delegate::region_verdict::refuse("it multiplies");
    return true;
  }
};

/// Takes regions of add and sub, but its preprocess rejects sub (as a compiler that finds a
/// problem only when it compiles the region).
struct RejectsSubInPreprocess : ReferenceBackend {
  static constexpr std::string_view name = "td_partition_rejects_sub";
  static std::string preprocess(const torch_delegate::method_to_lower& method) {
    for (const torch::jit::Node* node : method.graph()->nodes())
      if (node->kind() == c10::aten::sub) method.reject(node, "sub is not compiled here.");
    return ReferenceBackend::preprocess(method);
  }
};

/// Typed options (a required target, a scale) and typed signatures; takes regions of adds.
struct TypedOptionsAdd : test_backends::TypedBackend {
  static constexpr std::string_view name = "td_partition_typed_options";
  static bool supports(const torch::jit::Node* node) {
    return node->kind() == c10::aten::add || node->kind() == c10::prim::Constant;
  }
};

/// Availability from test_backends::toggle_available; counts its execute calls.
inline std::atomic<int> fallback_add_calls{0};
struct FallbackAdd {
  static constexpr std::string_view name = "td_partition_fallback";
  static bool supports(const torch::jit::Node* node) {
    return node->kind() == c10::aten::add || node->kind() == c10::prim::Constant;
  }
  static std::string preprocess(const torch_delegate::method_to_lower& method) { return method.name(); }
  static bool is_available() { return test_backends::toggle_available.load(); }
  static std::string compile(const std::string& payload) { return payload; }
  static at::Tensor execute(std::string&, const at::Tensor& x, const at::Tensor& h) {
    ++fallback_add_calls;
    return x + h;
  }
};

/// Sets toggle_available for a scope.
struct availability {
  explicit availability(bool value) : before(test_backends::toggle_available.exchange(value)) {}
  ~availability() { test_backends::toggle_available = before; }
  bool before;
};

/// Convolutions and what surrounds them (generic execute: any boundary type).
struct ConvLikeBackend : test_backends::GenericBackend {
  static constexpr std::string_view name = "td_partition_conv_like";
  static bool supports(const torch::jit::Node* node) {
    static const std::set<std::string> kinds{"aten::conv2d", "aten::relu", "aten::relu_", "aten::clamp", "aten::add", "aten::mean", "aten::sigmoid", "aten::gt_", "aten::gt", "aten::add_",
                                             "aten::mul", "aten::view", "prim::ListConstruct", "prim::Constant"};
    return kinds.count(node->kind().toQualString()) > 0;
  }
};

/// The same without prim::ListConstruct: conv's lists must be constants to join a region.
struct ConvOnlyBackend : test_backends::GenericBackend {
  static constexpr std::string_view name = "td_partition_conv_only";
  static bool supports(const torch::jit::Node* node) {
    return node->kind() == c10::aten::conv2d || node->kind() == c10::aten::relu || node->kind() == c10::prim::Constant;
  }
};

/// ConvLikeBackend whose regions own their parameters (as xnnpack's and onednn's do).
struct OwningConvLikeBackend : ConvLikeBackend {
  static constexpr std::string_view name = "td_partition_owning_conv_like";
  static constexpr bool owns_parameters = true;
};

/// A typed conv: execute(x, weight, optional bias).
inline std::atomic<int> typed_conv_calls{0};
struct TypedConv {
  static constexpr std::string_view name = "td_partition_typed_conv";
  static bool supports(const torch::jit::Node* node) {
    return node->kind() == c10::aten::conv2d || node->kind() == c10::prim::Constant;
  }
  static std::string preprocess(const torch_delegate::method_to_lower& method) { return method.name(); }
  static bool is_available() { return true; }
  static std::string compile(const std::string& payload) { return payload; }
  static at::Tensor execute(std::string&, const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
    ++typed_conv_calls;
    return at::conv2d(x, weight, bias ? *bias : at::Tensor(), 1, 1);
  }
};

/// A typed conv whose bias must be a Tensor: a region with an Optional[Tensor] bias is refused.
struct TypedConvTensorBias : TypedConv {
  static constexpr std::string_view name = "td_partition_typed_conv_tensor_bias";
  static at::Tensor execute(std::string&, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
    return at::conv2d(x, weight, bias, 1, 1);
  }
};

/// Typed signatures only: (Tensor, Tensor) -> Tensor among them, nothing for three Tensors.
struct TypedAdd : test_backends::TypedBackend {
  static constexpr std::string_view name = "td_partition_typed";
  static bool supports(const torch::jit::Node* node) {
    return node->kind() == c10::aten::add || node->kind() == c10::prim::Constant;
  }
};

/// Lowers partially, checks the outputs equal the original's for a few inputs, and returns the
/// lowered module.
template <class Backend = DemoBackend>
torch::jit::Module lowered_equal(torch::jit::Module module, const torch_delegate::partition_options& options = {},
                                 int inputs = 2) {
  torch::jit::Module lowered = torch_delegate::lower_partially<Backend>(module, options);
  for (int trial = 0; trial < 3; ++trial) {
    std::vector<c10::IValue> arguments;
    for (int i = 0; i < inputs; ++i) arguments.emplace_back(torch::randn({3, 4}));
    const at::Tensor expected = module.forward(arguments).toTensor();
    const at::Tensor got = lowered.forward(arguments).toTensor();
    CHECK(got.allclose(expected, 1e-5, 1e-6));
  }
  return lowered;
}

inline std::size_t count_kind(const torch::jit::Module& module, const std::string& kind) {
  std::size_t count = 0;
  auto graph = module.get_method("forward").graph();
  std::vector<torch::jit::Block*> blocks{graph->block()};
  while (!blocks.empty()) {
    torch::jit::Block* block = blocks.back();
    blocks.pop_back();
    for (torch::jit::Node* node : block->nodes()) {
      count += node->kind().toQualString() == kind;
      for (torch::jit::Block* nested : node->blocks()) blocks.push_back(nested);
    }
  }
  return count;
}

/// Parent.forward = encoder.forward(x, h) + h; Encoder.forward = block.forward(x, h) - x;
/// Inner.forward = `block_body` (the submodules of a model, by path: "encoder", "encoder.block").
inline torch::jit::Module nested_modules(const std::string& block_body) {
  torch::jit::Module inner("Inner");
  inner.define("def forward(self, x, h):\n    return " + block_body + "\n");
  torch::jit::Module encoder("Encoder");
  encoder.register_module("block", inner);
  encoder.define("def forward(self, x, h):\n    return self.block.forward(x, h) - x\n");
  torch::jit::Module parent("Parent");
  parent.register_module("encoder", encoder);
  parent.define("def forward(self, x, h):\n    return self.encoder.forward(x, h) + h\n");
  return parent;
}

/// ReferenceBackend that takes only adds (the first of a priority list in the tests below).
struct AddsOnly : ReferenceBackend {
  static constexpr std::string_view name = "td_partition_adds_only";
  static bool supports(const torch::jit::Node* node) {
    return node->kind() == c10::aten::add || node->kind() == c10::prim::Constant;
  }
};

/// Takes multiplications, in regions of 2 nodes or more (a third reason for the tests below).
struct MulsInPairs : ReferenceBackend {
  static constexpr std::string_view name = "td_partition_muls_in_pairs";
  static constexpr std::size_t min_region_size = 2;
  static bool supports(const torch::jit::Node* node) {
    return node->kind() == c10::aten::mul || node->kind() == c10::prim::Constant;
  }
};
/// The same in regions of 3 nodes or more.
struct MulsInThrees : MulsInPairs {
  static constexpr std::string_view name = "td_partition_muls_in_threes";
  static constexpr std::size_t min_region_size = 3;
};

/// ReferenceBackend that takes 6 ms more per call: measured, it always loses to TorchScript.
struct SlowReference : ReferenceBackend {
  static constexpr std::string_view name = "td_partition_slow_reference";
  static std::vector<c10::IValue> execute(test_backends::graph_handle& handle, torch_delegate::inputs inputs) {
    std::this_thread::sleep_for(std::chrono::milliseconds(6));
    return ReferenceBackend::execute(handle, inputs);
  }
};

/// Whether a td_test_partition op runs on a backend (at no cost) rather than in TorchScript.
inline thread_local bool on_switching_backend = false;

/// A region run on a test backend: the custom ops (slow_add, sleepy) at no cost, as an
/// accelerator runs an op the CPU runs slowly.
inline std::vector<c10::IValue> run_free(test_backends::graph_handle& handle, torch_delegate::inputs inputs) {
  on_switching_backend = true;
  auto outputs = test_backends::GenericBackend::execute(handle, inputs);
  on_switching_backend = false;
  return outputs;
}

/// A backend fast alone and slow in a method: each region runs slow_add at no cost, but a call
/// of another region than the last one pays 30 ms (as a device that reloads its program or its
/// weights when it switches regions). Timed alone, each region wins; in a method with two of
/// them, every call switches. Deterministic: sleeps, not speeds.
struct SwitchingBackend : test_backends::GenericBackend {
  static constexpr std::string_view name = "td_partition_switching";
  static inline thread_local const void* last = nullptr;
  static inline std::atomic<int> switches{0};
  static bool supports(const torch::jit::Node* node) {
    return node->kind().toQualString() == std::string("td_test_partition::slow_add") || node->kind() == c10::prim::Constant;
  }
  static std::vector<c10::IValue> execute(test_backends::graph_handle& handle, torch_delegate::inputs inputs) {
    if (last != handle.function.get()) {
      last = handle.function.get();
      ++switches;
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
    }
    return run_free(handle, inputs);
  }
};

/// Two backends that run slow_add (8 ms in TorchScript): one in 6 ms, one at no cost.
struct SlowerAdds : test_backends::GenericBackend {
  static constexpr std::string_view name = "td_partition_slower_adds";
  static bool supports(const torch::jit::Node* node) { return SwitchingBackend::supports(node); }
  static std::vector<c10::IValue> execute(test_backends::graph_handle& handle, torch_delegate::inputs inputs) {
    std::this_thread::sleep_for(std::chrono::milliseconds(6));
    return run_free(handle, inputs);
  }
};
/// Runs slow_add in the 8 ms TorchScript takes: the two do not separate.
struct EqualAdds : test_backends::GenericBackend {
  static constexpr std::string_view name = "td_partition_equal_adds";
  static bool supports(const torch::jit::Node* node) { return SwitchingBackend::supports(node); }
  static std::vector<c10::IValue> execute(test_backends::graph_handle& handle, torch_delegate::inputs inputs) {
    std::this_thread::sleep_for(std::chrono::milliseconds(8));
    return run_free(handle, inputs);
  }
};
/// The same, under another name.
struct OtherEqualAdds : EqualAdds {
  static constexpr std::string_view name = "td_partition_other_equal_adds";
};
inline thread_local bool after_faster_adds = false;
/// How many times FasterAdds preprocessed a region (timed alone, or built into a lowering).
inline std::atomic<int> faster_adds_preprocessed{0};
struct FasterAdds : test_backends::GenericBackend {
  static constexpr std::string_view name = "td_partition_faster_adds";
  static bool supports(const torch::jit::Node* node) { return SwitchingBackend::supports(node); }
  static std::string preprocess(const torch_delegate::method_to_lower& method) {
    ++faster_adds_preprocessed;
    return GenericBackend::preprocess(method);
  }
  static std::vector<c10::IValue> execute(test_backends::graph_handle& handle, torch_delegate::inputs inputs) {
    auto outputs = run_free(handle, inputs);
    after_faster_adds = true;
    return outputs;
  }
};
/// Runs sleepy (20 ms in TorchScript) at no cost, but in 24 ms right after FasterAdds ran: as one
/// backend's threads wait while another's spin down. Each region is faster than TorchScript alone,
/// and both in one method (24 ms) are slower than SleepyTaker alone (8 ms: slow_add in TorchScript).
struct SleepyTaker : test_backends::GenericBackend {
  static constexpr std::string_view name = "td_partition_sleepy_taker";
  static bool supports(const torch::jit::Node* node) {
    return node->kind().toQualString() == std::string("td_test_partition::sleepy") || node->kind() == c10::prim::Constant;
  }
  static std::vector<c10::IValue> execute(test_backends::graph_handle& handle, torch_delegate::inputs inputs) {
    if (after_faster_adds) std::this_thread::sleep_for(std::chrono::milliseconds(24));
    after_faster_adds = false;
    return run_free(handle, inputs);
  }
};
/// A device that holds one program: lowering two regions onto it at once fails (its preprocess
/// throws, as a compiler out of program memory would); a region alone lowers. It runs a region
/// of one input (slow_add(x, x)) in 3 ms (TorchScript's 8, FasterAdds' none: slower than
/// FasterAdds beyond any spread, not a tie left to noise), and one of two inputs in 16 ms, twice
/// TorchScript's.
struct OneProgramAdds : test_backends::GenericBackend {
  static constexpr std::string_view name = "td_partition_one_program";
  static bool supports(const torch::jit::Node* node) { return SwitchingBackend::supports(node); }
  static std::string preprocess(const torch_delegate::method_to_lower& method) {
    const std::size_t programs = method.module().get_methods().size();
    TORCH_CHECK(programs == 1, "td_partition_one_program: the device holds one program, asked for ", programs);
    return GenericBackend::preprocess(method);
  }
  static std::vector<c10::IValue> execute(test_backends::graph_handle& handle, torch_delegate::inputs inputs) {
    std::this_thread::sleep_for(std::chrono::milliseconds(inputs.size() > 1 ? 16 : 3));
    return run_free(handle, inputs);
  }
};
/// Runs sleepy at no cost and slow_add in the 8 ms TorchScript takes (the two do not separate).
struct AllRounder : test_backends::GenericBackend {
  static constexpr std::string_view name = "td_partition_all_rounder";
  static bool supports(const torch::jit::Node* node) { return SleepyTaker::supports(node) || SwitchingBackend::supports(node); }
  static std::vector<c10::IValue> execute(test_backends::graph_handle& handle, torch_delegate::inputs inputs) {
    const auto nodes = handle.function->graph()->nodes();
    const bool sleepy = std::any_of(nodes.begin(), nodes.end(), [](const torch::jit::Node* node) {
      return node->kind().toQualString() == std::string("td_test_partition::sleepy");
    });
    return sleepy ? run_free(handle, inputs) : GenericBackend::execute(handle, inputs);
  }
};
/// Runs sleepy (20 ms in TorchScript) in 10 ms.
struct SlowSleepyTaker : test_backends::GenericBackend {
  static constexpr std::string_view name = "td_partition_slow_sleepy_taker";
  static bool supports(const torch::jit::Node* node) { return SleepyTaker::supports(node); }
  static std::vector<c10::IValue> execute(test_backends::graph_handle& handle, torch_delegate::inputs inputs) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return run_free(handle, inputs);
  }
};

}  // namespace partition_backends
