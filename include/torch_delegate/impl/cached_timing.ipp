// Definitions for detail/tuning.hpp, what reuses timings: region_key (what a region's timing
// depends on) and cached_timing (the regions already timed and the timing cache in front of the clock).
#pragma once

#include <torch_delegate/detail/tuning.hpp>
#include <torch_delegate/detail/names.hpp>
#include <torch_delegate/partition.hpp>

#include <torch/csrc/jit/ir/constants.h>

#include <chrono>
#include <ostream>
#include <sstream>
#include <string>
#include <unordered_map>

namespace torch_delegate::detail {

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
