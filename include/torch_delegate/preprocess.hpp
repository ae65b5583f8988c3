// The host half of a backend: preprocess, run per method on the machine that lowers, and its
// registration in LibTorch's preprocess registry (so codegen_backend_module and Python's
// torch._C._jit_to_backend accept a torch-delegate backend).
#pragma once

#include <torch_delegate/runtime.hpp>

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/backends/backend_detail.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/inliner.h>

#include <map>
#include <sstream>

namespace torch_delegate {

namespace detail {

/// "self.encoder.weight": the attribute path a prim::GetAttr chain reads, from the method's
/// `self`; empty when the chain does not start at `self`.
inline std::string attribute_path(const torch::jit::Node* node) {
  std::string path;
  const torch::jit::Node* at = node;
  while (at->kind() == c10::prim::GetAttr) {
    path = "." + at->s(c10::attr::name) + path;
    const torch::jit::Value* object = at->input(0);
    if (object->node()->kind() == c10::prim::Param) return object->offset() == 0 ? "self" + path : std::string();
    at = object->node();
  }
  return {};
}

/// Where a node is, for an error at preprocess: its file, line and highlighted source lines;
/// for a node without a source range, what it is and which method it belongs to.
inline std::string source_of(const torch::jit::Node* node, std::string_view method) {
  const torch::jit::SourceRange& range = node->sourceRange();
  if (range.source()) return range.str();
  std::string text = "(none recorded for this node) ";
  if (node->kind() == c10::prim::GetAttr) {
    const std::string path = attribute_path(node);
    text += "the prim::GetAttr that reads attribute '" + node->s(c10::attr::name) + "'";
    if (!path.empty()) text += " (" + path + ")";
  } else {
    text += "a node of kind " + std::string(node->kind().toQualString());
  }
  return text + " in method '" + std::string(method) + "'";
}

}  // namespace detail

/// One method of the module being lowered, as preprocess sees it: its inlined graph, its
/// schema, and the debug handle of every node (nested blocks included).
class method_to_lower {
 public:
  method_to_lower(const torch::jit::Module& module, std::string backend, std::string name,
                  std::shared_ptr<torch::jit::Graph> graph, torch::jit::NodeToDebugHandle debug_handles,
                  const c10::FunctionSchema& schema)
      : module_(module),
        backend_(std::move(backend)),
        name_(std::move(name)),
        graph_(std::move(graph)),
        debug_handles_(std::move(debug_handles)),
        schema_(schema) {}

  /// The module being lowered (the caller's, read-only).
  const torch::jit::Module& module() const { return module_; }
  /// The method's name, e.g. "forward".
  const std::string& name() const { return name_; }
  /// The method's graph with every call inlined and dead code removed; a copy that preprocess
  /// may change.
  const std::shared_ptr<torch::jit::Graph>& graph() const { return graph_; }
  /// The method's schema, `self` first.
  const c10::FunctionSchema& schema() const { return schema_; }

  /// The debug handle of a node of graph(); it maps back to the node's source range.
  torch::jit::DebugHandleType debug_handle(const torch::jit::Node* node) const {
    auto found = debug_handles_.find(const_cast<torch::jit::Node*>(node));
    if (found == debug_handles_.end())
      detail::fail({backend_, name_}, "the node " + std::string(node->kind().toQualString()) +
                                          " has no debug handle: it is not a node of this method's graph");
    return found->second;
  }

  /// Rejects the method because of `node`, in the format of LibTorch's demo compiler:
  /// "<message> Source code: " followed by the node's file, line, source lines and a
  /// `<--- HERE` marker. A node without a source range (e.g. the prim::GetAttr that reads a
  /// weight) is named by what it reads and the method instead.
  [[noreturn]] void reject(const torch::jit::Node* node, std::string_view message) const {
    std::string text(message);
    text += " Source code: ";
    text += detail::source_of(node, name_);
    throw c10::Error(text, "");
  }

 private:
  const torch::jit::Module& module_;
  std::string backend_;
  std::string name_;
  std::shared_ptr<torch::jit::Graph> graph_;
  torch::jit::NodeToDebugHandle debug_handles_;
  const c10::FunctionSchema& schema_;
};

namespace detail {

/// What a backend's preprocess gave for one method, type-erased.
struct erased_preprocess_result {
  c10::IValue payload;
  std::map<std::int64_t, std::vector<std::int64_t>> instruction_handles;  // empty: ids are debug handles
};

/// Preprocesses one method with a given backend: decodes its options, runs preprocess,
/// converts the payload to an IValue.
using preprocess_trampoline = erased_preprocess_result (*)(const method_to_lower& method, const c10::IValue& options,
                                                      const error_context& where);

inline std::string highlighted(const torch::jit::SourceRange& range) {
  if (!range.source()) return {};
  std::ostringstream out;
  range.highlight(out);
  return out.str();
}

/// A class name as the user wrote it: without the "___torch_mangle_N" segments that cloning
/// and scripting add.
inline std::string demangled_name(const std::string& qualified) {
  std::string out;
  std::size_t start = 0;
  while (start <= qualified.size()) {
    std::size_t end = qualified.find('.', start);
    if (end == std::string::npos) end = qualified.size();
    const std::string part = qualified.substr(start, end - start);
    if (part.rfind("___torch_mangle_", 0) != 0) out += (out.empty() ? "" : ".") + part;
    start = end + 1;
  }
  return out;
}

/// Where a node comes from in the model: its kind, file:line, the calls that inlined it (one
/// frame per submodule or function call, outermost first) and its own source lines.
inline debug_location locate(const torch::jit::Node* node) {
  debug_location where;
  where.node_kind = node->kind().toQualString();
  if (auto position = node->sourceRange().file_line_col())
    where.file_line = std::get<0>(*position) + ":" + std::to_string(std::get<1>(*position));
  if (auto call_stack = node->callstack()) {
    for (const auto& [function, call_site, module] : (*call_stack)->vec()) {
      std::string frame = "  called here";
      if (module && module->class_type())
        frame += ", entering submodule '" + module->instance_name() + "' (" +
                 demangled_name(module->class_type()->name()->qualifiedName()) + ")";
      if (function) frame += ", method " + function->name();
      where.call_stack.push_back(frame + ":\n" + highlighted(call_site));
    }
  }
  where.source = highlighted(node->sourceRange());
  return where;
}

inline std::string method_names(const torch::jit::Module& module) {
  std::string names;
  for (const auto& method : module.get_methods()) names += (names.empty() ? "" : ", ") + method.name();
  return names.empty() ? std::string("(none)") : names;
}

/// Checks that `module` has `method` and returns its schema.
inline const c10::FunctionSchema& schema_of(const torch::jit::Module& module, const std::string& method,
                                            const error_context& where) {
  auto found = module.find_method(method);
  if (!found)
    fail(where, "the module (" + module.type()->name()->qualifiedName() + ") has no method '" + method +
                    "' to lower; its methods are: " + method_names(module));
  return found->function().getSchema();
}

/// A copy of a method's graph with every call inlined and the dead code that inlining leaves
/// (the submodules' prim::GetAttr) removed: what preprocess and coverage look at.
inline std::shared_ptr<torch::jit::Graph> inlined_graph(const torch::jit::Module& module, const std::string& method) {
  auto graph = torch::jit::toGraphFunction(module.get_method(method).function()).graph()->copy();
  torch::jit::Inline(*graph);
  torch::jit::EliminateDeadCode(graph);
  return graph;
}

/// The body of the preprocess function registered with LibTorch, shared by every backend:
/// returns the processed payload (payload_format.hpp) of every method in the spec.
inline c10::IValue preprocess_module(std::string_view backend, std::int64_t payload_version,
                                     std::span<const signature_record> signatures,
                                     preprocess_trampoline preprocess_method, const torch::jit::Module& module,
                                     const c10::Dict<c10::IValue, c10::IValue>& method_compile_spec,
                                     const torch::jit::BackendDebugHandleGenerator& generate_debug_handles) {
  c10::impl::GenericDict methods(c10::StringType::get(), c10::AnyType::get());
  for (const auto& entry : method_compile_spec) {
    if (!entry.key().isString())
      fail({backend, {}}, "method_compile_spec keys must be method names (str), got " +
                              entry.key().type()->annotation_str());
    const std::string& name = entry.key().toStringRef();
    const error_context where{backend, name};
    const c10::FunctionSchema& schema = schema_of(module, name, where);
    const signature_record& signature = select_signature(signatures, schema, where);

    auto graph = inlined_graph(module, name);
    torch::jit::NodeToDebugHandle handles_of_nodes = generate_debug_handles(graph);
    // Where each node comes from is read now: preprocess may run passes on the graph in place
    // and free nodes, so nothing may look at the nodes after it returns.
    method_debug_info debug;
    for (const auto& [node, handle] : handles_of_nodes) debug.locations.emplace(handle, locate(node));
    method_to_lower method(module, std::string(backend), name, graph, std::move(handles_of_nodes), schema);

    erased_preprocess_result preprocessed;
    try {
      preprocessed = preprocess_method(method, entry.value(), where);
    } catch (...) {
      rethrow_from_backend(where, "preprocess");
    }
    debug.instruction_handles = std::move(preprocessed.instruction_handles);
    method_record record;
    record.signature = std::string(signature.text);
    for (std::size_t i = 1; i < schema.arguments().size(); ++i) record.argument_names.push_back(schema.arguments()[i].name());
    record.output_count = output_count_of(schema.returns()[0].type());
    record.payload = std::move(preprocessed.payload);
    record.debug = std::make_shared<method_debug_info>(std::move(debug));
    methods.insert(name, encode_method_record(record));
  }
  return encode_processed(backend, payload_version, std::move(methods));
}

template <class Payload, class Result>
erased_preprocess_result erase_preprocessed(Result&& result) {
  if constexpr (std::is_same_v<std::remove_cvref_t<Result>, preprocess_result<Payload>>) {
    return {ivalue_caster<Payload>::cast(std::move(result.payload)), std::move(result.instruction_handles)};
  } else {
    return {ivalue_caster<Payload>::cast(Payload(std::forward<Result>(result))), {}};
  }
}

template <class B>
erased_preprocess_result preprocess_one(const method_to_lower& method, const c10::IValue& options_value,
                                   const error_context& where) {
  options_t<B> options = decode_backend_options<B>(options_value, where, unknown_option_keys::warn);
  B backend;
  if constexpr (requires { backend.preprocess(method, options); }) {
    return erase_preprocessed<payload_t<B>>(backend.preprocess(method, options));
  } else {
    return erase_preprocessed<payload_t<B>>(backend.preprocess(method));
  }
}

/// The preprocess function in LibTorch's signature, for LibTorch's registry.
template <class B>
c10::IValue preprocess_for_libtorch(const torch::jit::Module& module, const c10::Dict<c10::IValue, c10::IValue>& spec,
                                    const torch::jit::BackendDebugHandleGenerator& generate_debug_handles) {
  return preprocess_module(B::name, payload_version_of<B>(), signature_records<B>, &preprocess_one<B>, module, spec,
                           generate_debug_handles);
}

}  // namespace detail

/// Registers both halves of `B`: its runtime and its preprocess (in LibTorch's preprocess
/// registry). Idempotent; returns true. `lower<B>` calls it; a backend's shared library calls
/// it once with TORCH_DELEGATE_REGISTER_BACKEND.
template <class B>
bool register_backend() {
  static_assert(detail::check_host_backend<B>());
  register_runtime<B>();
  detail::register_part<B>(detail::registration_part::preprocess, [](const std::string& name) {
    try {
      torch::jit::detail::registerBackendPreprocessFunction(name, &detail::preprocess_for_libtorch<B>);
    } catch (const c10::Error&) {
      detail::fail({name, {}}, "a preprocess function for this name is already registered with LibTorch by a "
                               "backend that is not this torch-delegate type.");
    }
  });
  return true;
}

}  // namespace torch_delegate

/// Registers a backend (runtime and preprocess) when its library is loaded: put it in one .cpp
/// of the backend's shared library, e.g. TORCH_DELEGATE_REGISTER_BACKEND(DemoBackend);
#define TORCH_DELEGATE_REGISTER_BACKEND(Backend)                                                  \
  [[maybe_unused]] static const bool TORCH_DELEGATE_CONCAT(torch_delegate_registered_, __COUNTER__) = \
      ::torch_delegate::register_backend<Backend>()
