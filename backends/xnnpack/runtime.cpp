// The xnnpack backend's runtime: an XNNPACK runtime built from a payload (compile, and replan for
// other input sizes), and execute (inputs staged NHWC, outputs reused, set up again only when the
// pointers change, one call at a time). is_available: XNNPACK initialises on this CPU.
#include "xnnpack_internal.hpp"

#include "toolkit/availability.hpp"

#include <torch_delegate/runtime_switches.hpp>

#include <array>
#include <ATen/Parallel.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <unordered_set>

namespace xnnpack_delegate {

const char* op_name(std::int64_t code) {
  static const char* const names[] = {"conv2d",     "depthwise_conv2d", "fully_connected",   "clamp",   "add2",
                                      "multiply2",  "sigmoid",          "hardswish",         "max_pool2d", "avg_pool2d",
                                      "global_avg_pool2d", "reshape",   "softmax"};
  return code >= 0 && code < static_cast<std::int64_t>(std::size(names)) ? names[code] : "?";
}

void check(xnn_status status, const char* what) {
  TORCH_CHECK(status == xnn_status_success, "xnnpack: ", what, " failed (xnn_status ", static_cast<int>(status), ")");
}

namespace {

/// The process's XNNPACK thread pool for `threads` threads (nullptr for one: the calling thread).
pthreadpool_t thread_pool(std::size_t threads) {
  static std::mutex mutex;
  static std::map<std::size_t, std::unique_ptr<pthreadpool, decltype(&pthreadpool_destroy)>> pools;
  if (threads <= 1) return nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  auto found = pools.find(threads);
  if (found == pools.end())
    found = pools.emplace(threads, std::unique_ptr<pthreadpool, decltype(&pthreadpool_destroy)>(pthreadpool_create(threads),
                                                                                                 &pthreadpool_destroy))
                .first;
  return found->second.get();
}

/// `tensor` laid out NHWC. Converted here, on the calling thread, not with ATen's copy: ATen
/// would run it on its OpenMP threads, which then spin for a while after it, on the cores
/// XNNPACK's pool is about to use (two cores: the whole model twice as slow).
/// `buffer`: the copy made by the last call, reused when nothing else holds it.
at::Tensor to_channels_last(const at::Tensor& tensor, at::Tensor& buffer) {
  const at::Tensor source = tensor.contiguous();  // NCHW (a no-op for the usual image batch)
  if (!buffer.defined() || buffer.use_count() != 1 || buffer.sizes() != tensor.sizes())
    buffer = at::empty(tensor.sizes(), at::TensorOptions(at::kFloat).memory_format(at::MemoryFormat::ChannelsLast));
  at::Tensor out = buffer;
  const std::int64_t n = tensor.size(0), c = tensor.size(1), hw = tensor.size(2) * tensor.size(3);
  const float* from = source.data_ptr<float>();
  float* to = out.data_ptr<float>();
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t k = 0; k < c; ++k) {
      const float* plane = from + (b * c + k) * hw;
      float* column = to + b * c * hw + k;
      for (std::int64_t p = 0; p < hw; ++p) column[p * c] = plane[p];
    }
  return out;
}

/// A runtime for `payload` (its dims as they are); `data` gives the tensor of a static value's key.
/// XNNPACK packs convolution and fully-connected weights when the runtime is created: `packed_key`
/// is told each key it no longer needs.
std::shared_ptr<runtime_state> build_runtime(const region_payload& payload, const std::string& method,
                                             const std::function<at::Tensor(const std::string&)>& data,
                                             const std::function<void(const std::string&)>& packed_key) {
  const auto& [values, nodes, output_sizes, inputs] = payload;
  auto state = std::make_shared<runtime_state>();
  state->method = method;
  state->output_sizes = output_sizes;
  state->inputs = static_cast<std::size_t>(inputs);
  const std::size_t externals = static_cast<std::size_t>(inputs) + output_sizes.size();
  xnn_subgraph_t subgraph = nullptr;
  check(xnn_create_subgraph(static_cast<std::uint32_t>(externals), 0, &subgraph), "xnn_create_subgraph");
  std::unique_ptr<xnn_subgraph, decltype(&xnn_delete_subgraph)> owner(subgraph, &xnn_delete_subgraph);

  // Which static values XNNPACK packs (convolution and fully-connected weights and biases): it
  // copies them when the runtime is created, so the named data can be dropped after. The others
  // (binary ops' constants) are read at run time: the state keeps them.
  std::unordered_set<std::int64_t> packed;
  for (const node_record& node : nodes)
    for (std::int64_t value : packed_values(node)) packed.insert(value);

  std::vector<std::uint32_t> ids(values.size());
  std::vector<at::Tensor> keep_until_created;
  std::vector<std::string> packed_keys;
  for (std::size_t v = 0; v < values.size(); ++v) {
    const auto& [dims, external, key] = values[v];
    std::vector<std::size_t> shape(dims.begin(), dims.end());
    const void* pointer = nullptr;
    if (!key.empty()) {
      at::Tensor tensor = data(key);
      if (!packed.count(static_cast<std::int64_t>(v))) {
        tensor = tensor.clone();
        state->statics.push_back(tensor);
      } else {
        keep_until_created.push_back(tensor);
      }
      pointer = tensor.data_ptr();
      packed_keys.push_back(key);
    }
    std::uint32_t flags = 0;
    if (external >= 0) flags = external < inputs ? XNN_VALUE_FLAG_EXTERNAL_INPUT : XNN_VALUE_FLAG_EXTERNAL_OUTPUT;
    check(xnn_define_tensor_value(subgraph, xnn_datatype_fp32, shape.size(), shape.data(), pointer,
                                  external >= 0 ? static_cast<std::uint32_t>(external) : XNN_INVALID_VALUE_ID, flags, &ids[v]),
          "xnn_define_tensor_value");
  }
  const definition_context context{subgraph, ids};
  for (const node_record& node : nodes) {
    const bool defined = define_convolution(context, node) || define_pooling(context, node) || define_elementwise(context, node) ||
                         define_shape_op(context, node);
    TORCH_CHECK(defined, "xnnpack: unknown op ", node.op, " in the payload of ", method,
                " (saved by a newer build? this one reads ops 0 to 12)");
  }
  const auto threads = static_cast<std::size_t>(std::max(1, at::get_num_threads()));
  state->threads = threads;
  check(xnn_create_runtime_v2(subgraph, thread_pool(threads), XNN_FLAG_YIELD_WORKERS, &state->runtime), "xnn_create_runtime_v2");
  for (std::size_t e = 0; e < externals; ++e) state->external_ids.push_back(static_cast<std::uint32_t>(e));
  for (const std::string& key : packed_keys) packed_key(key);
  return state;
}

}  // namespace

namespace {
// The backend's runtime switches (docs/runtime-switches.md), declared when its code is loaded.
constexpr std::array<torch_delegate::runtime_switch, 1> xnnpack_switches{{
    {"TD_XNNPACK_UNAVAILABLE", "unset", "set: is_available() is false, as on a CPU XNNPACK does not support (to try a fallback)", false},
}};
const bool xnnpack_switches_declared = (torch_delegate::declare_runtime_switches("xnnpack", xnnpack_switches), true);
}  // namespace

bool XnnpackBackend::is_available() {
  // TD_XNNPACK_UNAVAILABLE: behave as on a CPU XNNPACK does not support (the fallback's tests).
  static const bool available =
      toolkit::available_unless("TD_XNNPACK_UNAVAILABLE", [] { return xnn_initialize(nullptr) == xnn_status_success; });
  return available;
}

compiled_region XnnpackBackend::compile(const region_payload& payload, const torch_delegate::compile_context& context) {
  TORCH_CHECK(is_available(), "xnnpack: XNNPACK does not initialize on this CPU");
  const std::string method(context.method());
  auto data = [&](const std::string& key) { return context.named_data().tensor(key); };
  if (context.max_replans() == 0)  // packed weights are all it needs: the named data is released
    return {build_runtime(payload, method, data, [&](const std::string& key) { context.release_named_data(key); }), nullptr};
  // It may be compiled again for other shapes: it keeps the payload and the weights.
  auto recipe = std::make_shared<region_recipe>();
  recipe->payload = payload;
  for (const auto& value : payload.values)
    if (!value.key.empty()) recipe->data.emplace(value.key, data(value.key));
  return {build_runtime(payload, method, data, [](const std::string&) {}), std::move(recipe)};
}

compiled_region XnnpackBackend::replan(compiled_region& compiled, const torch_delegate::given_inputs& given) {
  TORCH_CHECK(compiled.recipe, "xnnpack: region ", compiled.state->method, " was compiled without what re-planning needs");
  const region_recipe& recipe = *compiled.recipe;
  return {build_runtime(replanned_payload(recipe.payload, given, compiled.state->method), compiled.state->method,
                        [&](const std::string& key) { return recipe.data.at(key); }, [](const std::string&) {}),
          compiled.recipe};
}

std::vector<c10::IValue> XnnpackBackend::execute(compiled_region& region, torch_delegate::inputs args) {
  runtime_state& state = *region.state;
  TORCH_CHECK(args.size() == state.inputs, "xnnpack: region ", state.method, " takes ", state.inputs, " inputs, got ",
              args.size());
  std::lock_guard<std::mutex> lock(state.mutex);
  if (static_cast<std::size_t>(std::max(1, at::get_num_threads())) != state.threads) {
    TORCH_WARN_ONCE("xnnpack: region ", state.method, " runs on ", state.threads, " thread(s), the count when it was compiled; ",
                    "at::get_num_threads() is now ", at::get_num_threads(), ". Set the count before loading or lowering the "
                    "model (XNNPACK 2022 fixes a runtime's thread pool when it is created).");
  }
  state.staged.resize(state.inputs);
  state.outputs.resize(state.output_sizes.size());
  std::vector<at::Tensor> inputs;  // keeps what the runtime reads alive until it has run
  std::vector<xnn_external_value> externals;
  for (std::size_t i = 0; i < args.size(); ++i) {
    TORCH_CHECK(args[i].isTensor(), "xnnpack: region ", state.method, ": input ", i + 1, " is not a tensor");
    const at::Tensor& given = args[i].toTensor();
    TORCH_CHECK(given.scalar_type() == at::kFloat && given.device().is_cpu(), "xnnpack: region ", state.method, ": input ",
                i + 1, " must be a float CPU tensor, got ", given.scalar_type(), " on ", given.device());
    if (given.dim() == 4 && !given.is_contiguous(at::MemoryFormat::ChannelsLast))
      inputs.push_back(to_channels_last(given, state.staged[i]));
    else
      inputs.push_back(given.dim() == 4 ? given : given.contiguous());
    externals.push_back({static_cast<std::uint32_t>(i), inputs.back().data_ptr()});
  }
  std::vector<c10::IValue> outputs;
  for (std::size_t o = 0; o < state.output_sizes.size(); ++o) {
    at::Tensor& kept = state.outputs[o];
    // Reused only when nothing else holds it, the tensor nor (through a view) its storage.
    if (!kept.defined() || kept.use_count() != 1 || kept.storage().use_count() != 1) {
      const auto& sizes = state.output_sizes[o];
      kept = at::empty(sizes, at::TensorOptions(at::kFloat)
                                  .memory_format(sizes.size() == 4 ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous));
    }
    externals.push_back({static_cast<std::uint32_t>(state.inputs + o), kept.data_ptr()});
    outputs.emplace_back(kept);
  }
  const bool same = std::equal(externals.begin(), externals.end(), state.bound.begin(), state.bound.end(),
                               [](const xnn_external_value& e, const void* bound) { return e.data == bound; });
  if (!same) {
    check(xnn_setup_runtime(state.runtime, externals.size(), externals.data()), "xnn_setup_runtime");
    state.bound.clear();
    for (const xnn_external_value& e : externals) state.bound.push_back(e.data);
  }
  check(xnn_invoke_runtime(state.runtime), "xnn_invoke_runtime");
  return outputs;
}

}  // namespace xnnpack_delegate
