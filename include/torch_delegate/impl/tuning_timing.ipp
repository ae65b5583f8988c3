// Definitions for detail/tuning.hpp, the clock: example values and clock_timing, what measured
// decisions are made of. (region_key and cached_timing, which reuse them: cached_timing.ipp.)
#pragma once

#include <torch_delegate/detail/tuning.hpp>
#include <torch_delegate/detail/names.hpp>
#include <torch_delegate/detail/partition_extract.hpp>
#include <torch_delegate/detail/partition_layouts.hpp>
#include <torch_delegate/detail/partition_rewrite.hpp>

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/runtime/interpreter.h>

#include <torch/csrc/jit/ir/constants.h>

#include <algorithm>
#include <chrono>
#include <ostream>
#include <sstream>
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

/// A region lowered alone on a backend, and the values it is called with.
struct region_alone {
  torch::jit::Module lowered;
  std::vector<c10::IValue> inputs;
};

/// `what`'s region lowered alone on `backend` with `spec_by_method`, as lowering would lower it
/// (its owned inputs taken as constants); nullopt where a value it takes is not known.
inline std::optional<region_alone> lower_alone(const backend_lowering& backend, const region_to_time& what,
                                               const c10::impl::GenericDict& spec_by_method) {
  for (const torch::jit::Value* input : what.formed.inputs)
    if (!what.values.count(input)) return std::nullopt;
  region alone = what.formed;
  owned_inputs owned;
  if (backend.partition.owns_parameters) owned = take_owned_inputs(what.module, alone);
  torch::jit::Module child(names::regions_class(backend.name()));
  add_region_method(child, what.name, alone, owned);
  input_specs recorded;
  if (auto specs = recorded_specs(alone)) recorded.emplace(what.name, std::move(*specs));
  region_alone made{lower_regions(backend, child, {{what.name, what.method}}, spec_by_method, false, recorded, 0), {}};
  for (const torch::jit::Value* input : alone.inputs) made.inputs.push_back(what.values.at(input));
  return made;
}

// What a comparison asked for after the time limit gives: nothing timed, not separable.
inline region_timing not_timed() {
  region_timing timing{-1, -1, {}};
  timing.compared.out_of_time = true;
  return timing;
}

/// Two paths, each warmed up with one call, timed in rounds of a block of each (which one first
/// alternating) until they separate under `rule`: a block makes one call it drops where calls are
/// short (it pays for what the other left behind), then the fastest of calls_per_block (a call
/// delayed by another process is never faster). Not begun (out_of_time) where two rounds do not
/// fit in `clock`'s time limit.
template <class F, class G>
paired_comparison blocks_until_separated(F&& first, G&& second, const sampling_rule& rule, clock_timing& clock) {
  first();  // warm-up: first calls allocate, set up, optimise (the profiling executor)
  second();
  const double longest = std::max(elapsed_ms(first), elapsed_ms(second));
  const bool drop_first = drops_first_call(longest);
  const std::size_t per_block = calls_per_block(longest);
  if (!clock.limit.room_for_two_rounds(2.0 * double(per_block + drop_first) * longest)) return not_timed().compared;
  const sampling_rule cut = clock.limit.within(rule);
  std::size_t round = 0;
  const paired_comparison compared = sample_until_separated(
      [&]() -> std::pair<double, double> {
        if (round++ % 2 == 1) {
          const double b = fastest_in_block(second, drop_first, per_block);
          return {fastest_in_block(first, drop_first, per_block), b};
        }
        const double a = fastest_in_block(first, drop_first, per_block);
        return {a, fastest_in_block(second, drop_first, per_block)};
      },
      cut);
  return clock.marked(compared, rule, cut);
}

TORCH_DELEGATE_INTERNAL std::optional<region_timing> clock_timing::region_ms(const region_to_time& what) {
  if (out_of_time()) return not_timed();
  const torch::jit::Module& module = what.module;
  const region& formed = what.formed;
  const std::string& name = what.name;
  const example_value_map& values = what.values;
  // The backend's side: the region lowered alone.
  std::optional<region_alone> alone = lower_alone(what.backend, what, what.spec_by_method);
  if (!alone) return std::nullopt;
  torch::jit::Method delegated = alone->lowered.get_method(name);
  const std::vector<c10::IValue>& backend_inputs = alone->inputs;
  std::vector<c10::IValue> all_inputs{module._ivalue()};
  for (const torch::jit::Value* input : formed.inputs) all_inputs.push_back(values.at(input));
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
  const double longest = std::max(elapsed_ms(run_backend), elapsed_ms(run_script));
  const bool drop_first = drops_first_call(longest);
  const std::size_t calls = calls_per_block(longest);
  // A region between TorchScript ops that compute (a layer norm before a Linear) pays for what
  // they leave behind (ATen's OpenMP workers spin for a while after a parallel region, on the
  // cores a backend's own threads need), and they pay for what it leaves (a backend's pool spins
  // too). Such a region is timed that way: its call between two calls of its own graph in
  // TorchScript (standing in for its neighbours), charged with what the call after it took
  // beyond its usual time. A region with no such neighbour (a CNN's whole body, between the
  // method's arguments and its return) runs after itself in steady calls: it is timed in blocks
  // of calls of one kind, the first of each block dropped. So is a region whose calls are long
  // (long_call_ms): the few milliseconds its neighbours leave behind are lost in them, and the
  // neighbours' stand-ins would triple what a round costs (ConvNeXt-T's 150-node region beside
  // a busy process, 1 to 2 s a call in TorchScript: 18 s of a 43 s lowering). Each round times
  // both paths (which one first alternates); rounds go on until they separate (region_rule).
  std::vector<double> after_kept;
  const bool between_compute = timed_between_neighbours(formed, longest);
  // A round: a block of each path, or between neighbours' stand-ins 2 calls of each and one more.
  if (!limit.room_for_two_rounds((between_compute ? 5.0 : 2.0 * double(calls + drop_first)) * longest)) return not_timed();
  const sampling_rule cut = limit.within(region_rule);
  std::size_t round = 0;
  const paired_comparison compared = sample_until_separated(
      [&]() -> std::pair<double, double> {
        const bool backend_first = round++ % 2 == 1;
        if (between_compute) {
          double script_ms = 0, following_script = 0, backend_ms = 0, following_backend = 0;
          auto script_pair = [&] {
            script_ms = elapsed_ms(run_script);
            following_script = elapsed_ms(run_script);
          };
          auto backend_pair = [&] {
            backend_ms = elapsed_ms(run_backend);
            following_backend = elapsed_ms(run_script);
          };
          if (backend_first) {
            run_script();  // the backend's call comes after TorchScript, as in the method
            backend_pair();
            script_pair();
          } else {
            script_pair();
            backend_pair();
          }
          after_kept.push_back(following_script);
          return {backend_ms + following_backend, script_ms + following_script};
        }
        // A block: one call dropped where calls are short (it pays for what the other path left
        // behind), then the fastest of calls_per_block (another process taking a core for a
        // while delays a call, never speeds one up: the fastest is the steadier figure).
        double script_ms = 0, backend_ms = 0;
        auto script_block = [&] { script_ms = fastest_in_block(run_script, drop_first, calls); };
        auto backend_block = [&] { backend_ms = fastest_in_block(run_backend, drop_first, calls); };
        if (backend_first) {
          backend_block();
          script_block();
        } else {
          script_block();
          backend_block();
        }
        after_kept.push_back(0.0);
        return {backend_ms, script_ms};
      },
      cut);
  const double usual_following = median(after_kept);
  return region_timing{std::max(0.0, compared.first_ms - usual_following), std::max(0.0, compared.second_ms - usual_following),
                       marked(compared, region_rule, cut)};
}

TORCH_DELEGATE_INTERNAL std::optional<region_timing> clock_timing::region_against(const region_to_time& what,
                                                                                  const backend_lowering& other,
                                                                                  const c10::impl::GenericDict& other_spec) {
  if (out_of_time()) return not_timed();
  std::optional<region_alone> first = lower_alone(what.backend, what, what.spec_by_method), second;
  if (!first) return std::nullopt;
  try {
    second = lower_alone(other, what, other_spec);
  } catch (const std::exception&) {
    return std::nullopt;  // `other` supports each node but does not lower the region alone: nothing to beat
  }
  if (!second) return std::nullopt;
  c10::NoGradGuard no_grad;
  torch::jit::Method calls[2] = {first->lowered.get_method(what.name), second->lowered.get_method(what.name)};
  // The two backends' regions alone, in blocks, as a region against TorchScript in blocks (region_ms).
  const paired_comparison compared =
      blocks_until_separated([&] { calls[0](first->inputs); }, [&] { calls[1](second->inputs); }, region_rule, *this);
  return region_timing{compared.first_ms, compared.second_ms, compared};
}

TORCH_DELEGATE_INTERNAL double clock_timing::method_ms(const torch::jit::Module& module, const std::string& method,
                                                      const std::vector<c10::IValue>& inputs) {
  if (out_of_time()) return -1;
  c10::NoGradGuard no_grad;
  torch::jit::Method call = module.get_method(method);
  const double first_ms = elapsed_ms([&] { call(inputs); });  // the profiling executor profiles its first call
  if (!limit.room_for_two_rounds(first_ms)) return -1;  // the 2 calls it takes at least
  // The fastest of up to 5, as a region's blocks take the fastest of theirs: min_gain compares this
  // with regions' times, which a loaded moment must not inflate on one side only. Calls stop
  // once they have taken 2 blocks' budget, after at least 2 (the first of them optimises):
  // min_gain needs this time to a percent of itself, and beside a busy process ATen's OpenMP ran
  // ConvNeXt-T at 2.4 s a call, 17 s for 7 calls.
  double fastest = 0, spent = 0;
  for (int i = 0; i < 5 && (i < 2 || spent < 2 * block_budget_ms); ++i) {
    const double ms = elapsed_ms([&] { call(inputs); });
    fastest = i == 0 ? ms : std::min(fastest, ms);
    spent += ms;
  }
  return fastest;
}

TORCH_DELEGATE_INTERNAL paired_comparison clock_timing::compare_methods(const torch::jit::Module& first,
                                                                       const torch::jit::Module& second,
                                                                       const std::string& method,
                                                                       const std::vector<c10::IValue>& inputs) {
  if (out_of_time()) return not_timed().compared;
  c10::NoGradGuard no_grad;
  torch::jit::Method calls[2] = {first.get_method(method), second.get_method(method)};
  return blocks_until_separated([&] { calls[0](inputs); }, [&] { calls[1](inputs); }, method_rule, *this);
}

}  // namespace torch_delegate::detail
