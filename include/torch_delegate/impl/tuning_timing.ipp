// Definitions for detail/tuning.hpp, the clock: example values and clock_timing, what measured
// decisions are made of; region_key and cached_timing, which reuse them.
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
  if (!clock.limit.fits_two_rounds(2.0 * double(per_block + drop_first) * longest)) {
    clock.limit.give_up();
    return not_timed().compared;
  }
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
  if (!limit.fits_two_rounds((between_compute ? 5.0 : 2.0 * double(calls + drop_first)) * longest)) {
    limit.give_up();
    return not_timed();
  }
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
  if (!limit.fits_two_rounds(first_ms)) {  // the 2 calls it takes at least
    limit.give_up();
    return -1;
  }
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

TORCH_DELEGATE_INTERNAL void describe_for_key(std::ostream& out, const c10::IValue& value) {
  if (value.isTensor()) {
    const at::Tensor& t = value.toTensor();
    if (!t.defined()) {
      out << "Tensor(undefined)";
      return;
    }
    out << "Tensor(" << t.scalar_type() << "," << t.sizes() << "," << t.strides() << ")";
  } else if (value.isGenericDict()) {
    out << "{";
    for (const auto& entry : value.toGenericDict()) {
      describe_for_key(out, entry.key());
      out << ":";
      describe_for_key(out, entry.value());
      out << ",";
    }
    out << "}";
  } else if (value.isList()) {
    out << "[";
    for (const c10::IValue& element : value.toListRef()) {
      describe_for_key(out, element);
      out << ",";
    }
    out << "]";
  } else if (value.isTuple()) {
    out << "(";
    for (const c10::IValue& element : value.toTupleRef().elements()) {
      describe_for_key(out, element);
      out << ",";
    }
    out << ")";
  } else if (value.isNone() || value.isBool() || value.isInt() || value.isDouble() || value.isString() || value.isDevice() ||
             value.isScalar()) {
    out << value.tagKind() << ":" << value;
  } else {
    out << value.type()->str();
  }
}

TORCH_DELEGATE_INTERNAL std::string region_key(const region_to_time& what) {
  std::ostringstream key;
  key << "region-key 4;backend:" << what.backend.name() << ";payload:" << what.backend.payload_version()
      << ";build:" << code_build_id(what.backend.runtime) << ";spec:";
  describe_for_key(key, c10::IValue(what.spec_by_method));
  std::unordered_map<const torch::jit::Value*, std::size_t> id;
  auto value_text = [&](const torch::jit::Value* value) {
    const auto found = what.values.find(value);
    if (found != what.values.end())
      describe_for_key(key, found->second);
    else if (const std::optional<c10::IValue> constant = torch::jit::toIValue(value))
      describe_for_key(key, *constant);
    else
      key << value->type()->str();
  };
  key << ";inputs:";
  for (const torch::jit::Value* input : what.formed.inputs) {
    id.emplace(input, id.size());
    value_text(input);
    key << ",";
  }
  key << ";nodes:";
  for (const torch::jit::Node* node : what.formed.nodes) {
    key << node->kind().toQualString() << "(";
    for (const torch::jit::Value* input : node->inputs()) {
      const auto found = id.find(input);
      if (found != id.end())
        key << "%" << found->second;
      else
        value_text(input);  // a constant made outside the region
      key << ",";
    }
    key << ")";
    if (node->kind() == c10::prim::Constant) {
      if (const std::optional<c10::IValue> constant = torch::jit::toIValue(node->output())) describe_for_key(key, *constant);
    } else if (!node->blocks().empty()) {
      key << "{" << *node << "}";  // an if or loop inside: its text, names and all (rare; no sharing)
    }
    key << "->";
    for (const torch::jit::Value* output : node->outputs()) {
      id.emplace(output, id.size());
      value_text(output);
      key << ",";
    }
    key << ";";
  }
  key << "outputs:";
  for (const torch::jit::Value* output : what.formed.outputs) {
    const auto found = id.find(output);
    key << (found == id.end() ? std::size_t(-1) : found->second) << ",";
  }
  return key.str();
}

TORCH_DELEGATE_INTERNAL cached_timing::cached_timing(timing_source& clock, timing_cache_file* file,
                                                    std::function<void(const progress_update&)> progress,
                                                    const torch::jit::Module* original)
    : clock_(clock), file_(file), callback_(std::move(progress)), fingerprint_(machine_fingerprint()), original_(original) {}

// "backend_ms torchscript_ms verdict rounds backend_wins torchscript_wins p" (timing_cache.hpp).
inline std::string region_payload(const region_timing& timing) {
  std::ostringstream out;
  out.precision(9);
  const paired_comparison& c = timing.compared;
  out << timing.backend_ms << " " << timing.torchscript_ms << " " << static_cast<int>(c.verdict) << " " << c.rounds << " "
      << c.first_wins << " " << c.second_wins << " " << c.p_value;
  return out.str();
}

inline std::optional<region_timing> parse_region_payload(const std::string& payload) {
  std::istringstream in(payload);
  region_timing timing{0, 0, {}, true};
  int verdict = -1;
  paired_comparison& c = timing.compared;
  if (!(in >> timing.backend_ms >> timing.torchscript_ms >> verdict >> c.rounds >> c.first_wins >> c.second_wins >> c.p_value))
    return std::nullopt;
  std::string rest;
  if (in >> rest || verdict < 0 || verdict > 2 || !(timing.backend_ms >= 0) || !(timing.torchscript_ms >= 0)) return std::nullopt;
  c.verdict = static_cast<separation>(verdict);
  c.first_ms = timing.backend_ms;
  c.second_ms = timing.torchscript_ms;
  return timing;
}

TORCH_DELEGATE_INTERNAL std::optional<region_timing> cached_timing::known_or_timed(
    const std::string& digest, const std::function<std::optional<region_timing>()>& time) {
  if (const auto known = known_.find(digest); known != known_.end()) {
    ++reused_;
    region_timing timing = known->second;
    timing.cached = true;
    return timing;
  }
  if (file_)
    if (const std::optional<std::string> payload = file_->find("region", digest))
      if (std::optional<region_timing> timing = parse_region_payload(*payload)) {
        ++reused_;
        known_.emplace(digest, *timing);
        return timing;
      }
  std::optional<region_timing> timing = time();
  if (!timing) return timing;
  if (timing->compared.out_of_time) {
    cut_short_ = true;  // not a verdict: neither kept nor reused
    return timing;
  }
  ++timed_;
  known_.emplace(digest, *timing);
  if (file_) file_->store("region", digest, region_payload(*timing));
  return timing;
}

TORCH_DELEGATE_INTERNAL std::optional<region_timing> cached_timing::region_ms(const region_to_time& what) {
  return known_or_timed(key_digest(region_key(what) + ";machine:" + fingerprint_), [&] { return clock_.region_ms(what); });
}

TORCH_DELEGATE_INTERNAL std::optional<region_timing> cached_timing::region_against(const region_to_time& what,
                                                                                   const backend_lowering& other,
                                                                                   const c10::impl::GenericDict& other_spec) {
  const region_to_time on_other{other, what.module, what.method, what.formed, what.name, what.values, other_spec};
  return known_or_timed(key_digest(region_key(what) + ";against:" + region_key(on_other) + ";machine:" + fingerprint_),
                        [&] { return clock_.region_against(what, other, other_spec); });
}

TORCH_DELEGATE_INTERNAL double cached_timing::method_ms(const torch::jit::Module& module, const std::string& method,
                                                       const std::vector<c10::IValue>& inputs) {
  // Every lowering (choose_order makes several) partitions a copy of the one module, with new
  // class types: the copy's first calls would optimise its graph again, a second on a CNN. The
  // original is timed instead, once (its graph optimised once, as the method's check needs it).
  const auto known = method_times_.find(method);
  if (known != method_times_.end()) return known->second;
  const double ms = clock_.method_ms(original_ ? *original_ : module, method, inputs);
  if (ms < 0) {
    cut_short_ = true;  // not timed: the time limit
    return ms;
  }
  method_times_.emplace(method, ms);
  return ms;
}

TORCH_DELEGATE_INTERNAL paired_comparison cached_timing::compare_methods(const torch::jit::Module& first,
                                                                        const torch::jit::Module& second,
                                                                        const std::string& method,
                                                                        const std::vector<c10::IValue>& inputs) {
  const paired_comparison compared = clock_.compare_methods(first, second, method, inputs);
  cut_short_ |= compared.out_of_time;
  return compared;
}

TORCH_DELEGATE_INTERNAL void cached_timing::progress(std::string_view stage, const std::string& detail) {
  if (!callback_) return;
  progress_update update;
  update.stage = std::string(stage);
  update.detail = what_.empty() ? detail : detail.empty() ? what_ : what_ + ": " + detail;
  update.step = stage == "done" ? steps_ : step_;
  update.steps = steps_;
  update.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  callback_(update);
}

TORCH_DELEGATE_INTERNAL void cached_timing::done() {
  progress("done",
           "regions timed: " + std::to_string(timed_) + "; verdicts reused (alike regions, the cache): " + std::to_string(reused_) +
               (cut_short_ ? "; measure_time_limit_s cut the measuring short: what was not measured went by the list's order"
                           : ""));
}

TORCH_DELEGATE_INTERNAL void cached_timing::lowering_step(std::size_t step, std::size_t steps, const std::string& what) {
  step_ = step;
  steps_ = std::max<std::size_t>(steps, 1);
  what_ = what;
}

}  // namespace torch_delegate::detail
