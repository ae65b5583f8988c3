// Definitions for detail/tuning.hpp, the clock: example values and clock_timing, what measured
// decisions are made of.
#pragma once

#include <torch_delegate/detail/tuning.hpp>
#include <torch_delegate/detail/names.hpp>
#include <torch_delegate/detail/partition_extract.hpp>
#include <torch_delegate/detail/partition_layouts.hpp>
#include <torch_delegate/detail/partition_rewrite.hpp>

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/runtime/interpreter.h>

#include <algorithm>
#include <chrono>
#include <unordered_set>

namespace torch_delegate::detail {

TORCH_DELEGATE_INTERNAL example_value_map example_values(const torch::jit::Module& module,
                                                         const std::shared_ptr<torch::jit::Graph>& graph,
                                                         const std::vector<c10::IValue>& inputs) {
  // A copy whose outputs are every top-level value: the same nodes in the same order.
  std::shared_ptr<torch::jit::Graph> probe = graph->copy();
  std::vector<const torch::jit::Value*> recorded;
  for (std::size_t i = 1; i < graph->inputs().size(); ++i) recorded.push_back(graph->inputs()[i]);
  for (std::size_t i = 1; i < probe->inputs().size(); ++i) probe->registerOutput(probe->inputs()[i]);
  auto original = graph->nodes().begin();
  for (auto copy = probe->nodes().begin(); copy != probe->nodes().end(); ++copy, ++original)
    for (std::size_t k = 0; k < copy->outputs().size(); ++k) {
      recorded.push_back(original->outputs()[k]);
      probe->registerOutput(copy->outputs()[k]);
    }
  torch::jit::Stack stack{module._ivalue()};
  stack.insert(stack.end(), inputs.begin(), inputs.end());
  {
    c10::NoGradGuard no_grad;
    torch::jit::Code code(probe, "example_values");
    torch::jit::InterpreterState(code).run(stack);
  }
  example_value_map values;
  const std::size_t first = stack.size() - recorded.size();
  for (std::size_t i = 0; i < recorded.size(); ++i) values.emplace(recorded[i], stack[first + i]);
  return values;
}

// The median of timed calls (the upper one of an even count).
inline double median(std::vector<double> times) {
  std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
  return times[times.size() / 2];
}

// Whether a node computes on tensors (not a view, a size or an interpreter op): what leaves
// ATen's OpenMP workers spinning, or waits for a backend's pool to sleep.
inline bool computes(const torch::jit::Node* node) {
  static const std::unordered_set<std::string> views{"aten::view", "aten::reshape", "aten::flatten", "aten::squeeze",
                                                     "aten::unsqueeze", "aten::transpose", "aten::permute", "aten::select",
                                                     "aten::slice", "aten::expand", "aten::t", "aten::detach",
                                                     "aten::size", "aten::dim", "aten::len", "aten::__getitem__"};
  if (node->kind().is_prim() || views.count(node->kind().toQualString())) return false;
  return std::any_of(node->outputs().begin(), node->outputs().end(),
                     [](const torch::jit::Value* value) { return value->type()->cast<c10::TensorType>() != nullptr; });
}

// The wall time of `call()`, in ms: what every measurement of a partition is made of.
template <class F>
double elapsed_ms(F&& call) {
  const auto start = std::chrono::steady_clock::now();
  call();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// Whether a TorchScript node that computes makes one of `formed`'s inputs or reads one of its
// outputs: then, in the method, the region runs right after or before ATen's parallel work.
inline bool has_computing_neighbour(const region& formed) {
  for (const torch::jit::Value* input : formed.inputs)
    if (computes(input->node())) return true;
  for (const torch::jit::Value* output : formed.outputs)
    for (const torch::jit::Use& use : output->uses())
      if (computes(use.user)) return true;
  return false;
}

TORCH_DELEGATE_INTERNAL std::optional<region_timing> clock_timing::region_ms(const region_to_time& what) {
  const backend_lowering& backend = what.backend;
  const torch::jit::Module& module = what.module;
  const region& formed = what.formed;
  const std::string& name = what.name;
  const example_value_map& values = what.values;
  std::vector<c10::IValue> all_inputs{module._ivalue()};
  for (const torch::jit::Value* input : formed.inputs) {
    const auto found = values.find(input);
    if (found == values.end()) return std::nullopt;
    all_inputs.push_back(found->second);
  }
  // The backend's side: the region lowered alone, its owned inputs taken as constants.
  region alone = formed;
  owned_inputs owned;
  if (backend.partition.owns_parameters) owned = take_owned_inputs(module, alone);
  torch::jit::Module child(names::regions_class(backend.name()));
  add_region_method(child, name, alone, owned);
  input_specs recorded;
  if (auto specs = recorded_specs(alone)) recorded.emplace(name, std::move(*specs));
  torch::jit::Module lowered = lower_regions(backend, child, {{name, what.method}}, what.spec_by_method, false, recorded, 0);
  torch::jit::Method delegated = lowered.get_method(name);
  std::vector<c10::IValue> backend_inputs;
  for (const torch::jit::Value* input : alone.inputs) backend_inputs.push_back(values.at(input));
  // TorchScript's side: the region's own graph.
  torch::jit::GraphFunction script(name, region_graph(formed, module.type(), {}), nullptr);

  c10::NoGradGuard no_grad;
  auto run_backend = [&] { delegated(backend_inputs); };
  auto run_script = [&] {
    torch::jit::Stack stack = all_inputs;
    script.run(stack);
  };
  run_backend();  // warm-up: first calls allocate, set up, optimise
  run_script();
  run_script();
  // A region between TorchScript ops that compute (a layer norm before a Linear) pays for what
  // they leave behind (ATen's OpenMP workers spin for a while after a parallel region, on the
  // cores a backend's own threads need), and they pay for what it leaves (a backend's pool spins
  // too). Such a region is timed that way: its call between two calls of its own graph in
  // TorchScript (standing in for its neighbours), charged with what the call after it took
  // beyond its usual time. A region with no such neighbour (a CNN's whole body, between the
  // method's arguments and its return) runs after itself in steady calls: it is timed in blocks
  // of calls of one kind, the first of each block dropped. Rounds alternate the two paths; at
  // least 5, up to 15, stopping early once the medians are more than 20 % apart.
  std::vector<double> kept, delegated_path, after_kept;
  constexpr int min_rounds = 5, max_rounds = 15;
  const bool between_compute = has_computing_neighbour(formed);
  for (int round = 0; round < max_rounds; ++round) {
    if (between_compute) {
      const double script_ms = elapsed_ms(run_script);
      const double following_script = elapsed_ms(run_script);
      const double backend_ms = elapsed_ms(run_backend);
      const double following_backend = elapsed_ms(run_script);
      kept.push_back(script_ms + following_script);
      after_kept.push_back(following_script);
      delegated_path.push_back(backend_ms + following_backend);
    } else {
      run_script();  // dropped: it pays for what the backend left behind
      kept.push_back(elapsed_ms(run_script));
      after_kept.push_back(0.0);
      run_backend();
      delegated_path.push_back(elapsed_ms(run_backend));
    }
    if (round + 1 >= min_rounds) {
      const double a = median(kept), b = median(delegated_path);
      if (std::max(a, b) > 1.2 * std::min(a, b)) break;
    }
  }
  const double usual_following = median(after_kept);
  return region_timing{std::max(0.0, median(delegated_path) - usual_following), std::max(0.0, median(kept) - usual_following)};
}

TORCH_DELEGATE_INTERNAL double clock_timing::method_ms(const torch::jit::Module& module, const std::string& method,
                                                      const std::vector<c10::IValue>& inputs) {
  c10::NoGradGuard no_grad;
  torch::jit::Method call = module.get_method(method);
  for (int warm = 0; warm < 2; ++warm) call(inputs);
  std::vector<double> times;
  for (int i = 0; i < 5; ++i) times.push_back(elapsed_ms([&] { call(inputs); }));
  return median(std::move(times));
}

TORCH_DELEGATE_INTERNAL std::vector<double> clock_timing::methods_ms(const std::vector<const torch::jit::Module*>& modules,
                                                                    const std::string& method,
                                                                    const std::vector<c10::IValue>& inputs) {
  c10::NoGradGuard no_grad;
  std::vector<torch::jit::Method> calls;
  for (const torch::jit::Module* module : modules) calls.push_back(module->get_method(method));
  for (int warm = 0; warm < 2; ++warm)  // the profiling executor optimises after its first calls
    for (torch::jit::Method& call : calls) call(inputs);
  std::vector<std::vector<double>> times(calls.size());
  for (int round = 0; round < 5; ++round)
    for (std::size_t m = 0; m < calls.size(); ++m)
      for (int call = 0; call < 3; ++call) {
        const double ms = elapsed_ms([&] { calls[m](inputs); });
        if (call > 0) times[m].push_back(ms);
      }
  std::vector<double> medians;
  for (std::vector<double>& each : times) medians.push_back(median(std::move(each)));
  return medians;
}

}  // namespace torch_delegate::detail
