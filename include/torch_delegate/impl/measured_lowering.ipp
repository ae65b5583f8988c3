// Definitions for detail/tuning.hpp, a measured lowering through the timing cache: its key (the
// code, the options, the machine), its payload (the report, pickled), and the replay of a cached
// lowering; otherwise measured (tune_lowered, tuning_lowering.ipp) and stored unless the time
// limit cut it short.
#pragma once

#include <torch_delegate/detail/tuning.hpp>
#include <torch_delegate/impl/tuning_lowering.ipp>
#include <torch_delegate/partition.hpp>
#include <torch_delegate/report_format.hpp>

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <chrono>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_set>
#include <vector>

namespace torch_delegate::detail {

// The version of the decision logic, in every lowering key: a change to how decisions are made
// must not reuse decisions made the old way.
// 2: a region that does not separate from TorchScript goes by the list's order whatever min_gain.
// 3: every timing block is the fastest of 3 calls; min_gain's method never shorter than a region.
// 4: a block stops once its calls took block_budget_ms; a gross gap separates from 2 rounds.
// 5: both paths' blocks take as many calls, as fit in block_budget_ms (calls_per_block).
// 6: a region whose calls are long is timed in blocks, whatever its neighbours.
// 7: rounds stop at the minimum where the medians are within a third of the margin, no lean.
// 8: a backend choose_order puts first takes no region that does not separate; orders whose
//    regions save under a tenth of the best's milliseconds are not compared.
// 9: a region's TorchScript neighbours are seen through views (timed_between_neighbours).
// 10: a backend choose_order puts first takes a region only where it is also faster than the
//     first backend listed before it that runs the region.
// 11: an order whose promoted backend's distinct regions are many enough or hold enough of the
//     nodes (screens) is first screened by its partition by the rules alone, timed whole against
//     the best so far.
inline constexpr int tuning_logic_version = 11;

// The delegation report as a cache payload (timing_cache.hpp): pickled, in hex.
inline std::string report_payload(const delegation_report& report) {
  const std::vector<char> bytes = torch::jit::pickle_save(encode_report(report));
  static constexpr char digits[] = "0123456789abcdef";
  std::string text;
  text.reserve(2 * bytes.size());
  for (const char byte : bytes) {
    const auto b = static_cast<unsigned char>(byte);
    text.push_back(digits[b >> 4]);
    text.push_back(digits[b & 15]);
  }
  return text;
}

inline std::optional<delegation_report> report_of_payload(const std::string& payload) {
  if (payload.size() % 2) return std::nullopt;
  std::vector<char> bytes(payload.size() / 2);
  const auto nibble = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    const int high = nibble(payload[2 * i]), low = nibble(payload[2 * i + 1]);
    if (high < 0 || low < 0) return std::nullopt;
    bytes[i] = static_cast<char>(high * 16 + low);
  }
  try {
    return decode_report(torch::jit::pickle_load(bytes));
  } catch (const std::exception&) {
    return std::nullopt;  // the CRC matched, but not a report this build reads
  }
}

// The code `function` runs, as text for a lowering key: its graph, then, once each (`seen`: by
// identity, not name: two modules made apart, in compilation units of their own, can both be
// `__torch__.Block`), the graphs of the methods and functions it calls, through blocks and forked
// subgraphs. Not inlined: inlining a model and the canonical passes took 17–19 ms of the 24 ms a
// warm MobileNetV2 lowering spent on its key (issue 40), and each module type's code is
// written once here, not once per instance (a type's methods are the same functions in every
// instance).
inline void describe_code(std::ostream& key, torch::jit::Function& function, std::unordered_set<const torch::jit::Function*>& seen) {
  if (!seen.insert(&function).second) return;
  key << function.qualname().qualifiedName() << ":";
  torch::jit::GraphFunction* graph_function = torch::jit::tryToGraphFunction(function);
  if (!graph_function) {  // a builtin: its name is its code
    key << ";";
    return;
  }
  const std::shared_ptr<torch::jit::Graph> graph = graph_function->graph();
  key << graph->toString(false) << ";";
  const std::function<void(torch::jit::Block*)> calls_in = [&](torch::jit::Block* block) {
    for (torch::jit::Node* node : block->nodes()) {
      for (torch::jit::Block* nested : node->blocks()) calls_in(nested);
      if (node->hasAttribute(c10::attr::Subgraph) && node->kindOf(c10::attr::Subgraph) == torch::jit::AttributeKind::g)
        calls_in(node->g(c10::attr::Subgraph)->block());
      if (node->kind() == c10::prim::CallMethod) {
        if (const auto type = node->input(0)->type()->cast<c10::ClassType>())
          if (torch::jit::Function* callee = type->findMethod(node->s(c10::attr::name))) describe_code(key, *callee, seen);
      } else if (node->kind() == c10::prim::CallFunction) {
        if (const auto type = node->input(0)->type()->cast<c10::FunctionType>()) describe_code(key, *type->function(), seen);
      }
    }
  };
  calls_in(graph->block());
}

TORCH_DELEGATE_INTERNAL std::string lowering_key(const backend_list& backends, const torch::jit::Module& module,
                                                 const partition_options& options,
                                                 const std::vector<c10::impl::GenericDict>& specs) {
  std::ostringstream key;
  key << "lowering-key " << tuning_logic_version << ";backends:";
  for (std::size_t k = 0; k < backends.size(); ++k) {
    key << backends[k]->name() << "/" << backends[k]->payload_version() << "/" << code_build_id(backends[k]->runtime) << ":";
    describe_for_key(key, c10::IValue(specs[k]));
    key << ",";
  }
  key << ";methods:";
  for (const std::string& method : options.methods) key << method << ",";
  key << ";min_region_size:" << options.min_region_size << ";keep_kinds:";
  for (const std::string& kind : options.keep_kinds) key << kind << ",";
  key << ";keep_submodules:";
  for (const std::string& name : options.keep_submodules) key << name << ",";
  key << ";lower_submodules:";
  for (const std::string& name : options.lower_submodules) key << name << ",";
  key << ";require_full:" << options.require_full << ";on_other_shapes:" << static_cast<int>(options.on_other_shapes)
      << ";max_replans:" << options.max_replans << ";min_gain:" << options.min_gain << ";choose_order:" << options.choose_order
      << ";fallback:" << options.fallback_when_unavailable;
  for (const auto& [method, inputs] : options.example_inputs) {
    key << ";method " << method << ":";
    for (const c10::IValue& input : inputs) {
      describe_for_key(key, input);
      key << ",";
    }
    std::unordered_set<const torch::jit::Function*> seen;  // the code: each method's own, with what it calls (no run: shapes are above)
    describe_code(key, module.get_method(method).function(), seen);
  }
  // What the graph reads from the module: every attribute's value (tensors by dtype and sizes:
  // two widths of one architecture share their code, not their weights' shapes).
  key << ";attributes:";
  for (const auto& attribute : module.named_attributes(/*recurse=*/true)) {
    key << attribute.name << "=";
    if (attribute.value.isObject())
      key << attribute.value.type()->str();
    else
      describe_for_key(key, attribute.value);
    key << ",";
  }
  key << ";machine:" << machine_fingerprint();
  return key.str();
}

TORCH_DELEGATE_INTERNAL torch::jit::Module lower_measured(const backend_list& backends, const torch::jit::Module& module,
                                                          const partition_options& options,
                                                          const std::vector<c10::impl::GenericDict>& specs) {
  clock_timing clock;
  clock.limit.start(options.measure_time_limit_s);
  const std::string directory = timing_cache_directory(options);
  std::optional<timing_cache_file> file;
  if (!directory.empty()) file.emplace(directory);
  cached_timing timing(clock, file ? &*file : nullptr, options.progress, &module);
  std::string digest;
  if (file) {
    digest = key_digest(lowering_key(backends, module, options, specs));
    if (const std::optional<std::string> payload = file->find("lowering", digest))
      if (const std::optional<delegation_report> cached = report_of_payload(*payload)) {
        // The backends in the order the cached lowering chose (its report names them).
        backend_list order;
        std::vector<c10::impl::GenericDict> order_specs;
        std::string names = cached->backend;
        for (std::size_t start = 0; start <= names.size();) {
          const std::size_t end = std::min(names.find(", ", start), names.size());
          const std::string name = names.substr(start, end - start);
          for (std::size_t k = 0; k < backends.size(); ++k)
            if (backends[k]->name() == name) {
              order.push_back(backends[k]);
              order_specs.push_back(specs[k]);
            }
          start = end + 2;
        }
        if (!order.empty()) {
          timing.lowering_step(0, 1, "");
          timing.progress("cached", "the decisions of an earlier measured lowering of this model, from " + file->path());
          partition_options again = options;
          again.measure = false;
          again.choose_order = false;
          again.replay = *cached;
          torch::jit::Module lowered = lower_partitioned(order, module, again, order_specs, *decider_for(again, &order_specs, timing));
          timing.progress("done", "");
          return lowered;
        }
      }
  }
  if (options.choose_order && backends.size() > 1)
    timing.lowering_step(0, backends.size(),
                         "lowering 1 of " + std::to_string(backends.size()) + " (" + order_text(backends) + ")");
  const auto began = std::chrono::steady_clock::now();
  torch::jit::Module lowered = lower_partitioned(backends, module, options, specs, *decider_for(options, &specs, timing));
  const double first_order_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  lowered = tune_lowered(backends, module, options, specs, timing, std::move(lowered), first_order_s);
  // A lowering the time limit cut short is not kept: the next one reuses its verdicts and
  // measures what it did not.
  if (file && !timing.cut_short())
    if (const std::optional<delegation_report> report = delegation_report_data_of(lowered))
      file->store("lowering", digest, report_payload(*report));
  timing.done();
  return lowered;
}

}  // namespace torch_delegate::detail
