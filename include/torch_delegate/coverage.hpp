// coverage<B>(module): which nodes a backend would accept or reject, per method, with source
// locations and counts, without lowering (like Torch-TensorRT's dry run or ExecuTorch's
// delegation info). The backend declares what it supports once, in `supports(const Node*)`.
#pragma once

#include <torch_delegate/detail/config.hpp>
#include <torch_delegate/preprocess.hpp>

#include <sstream>
#include <string>
#include <vector>

namespace torch_delegate {

/// `static bool supports(const torch::jit::Node*)`: the one place a backend says what it accepts.
template <class B>
concept backend_declares_support = requires(const torch::jit::Node* node) {
  { B::supports(node) } -> std::same_as<bool>;
};

/// One node of a method, as the backend would see it.
struct node_coverage {
  std::string kind;       // "aten::mul"
  std::string location;   // "model.py:12", or "" when the node has no source
  std::string source;     // the source lines with a "<--- HERE" marker
  bool supported = false;
  int depth = 0;          // 0: the method's body; 1: inside an if/loop body; ...
};

/// The nodes of one method (inlined, nested blocks included) and how many the backend accepts.
struct method_coverage {
  std::string method;
  std::vector<node_coverage> nodes;
  std::size_t supported = 0;
  std::size_t unsupported = 0;
};

/// What coverage<B> reports for a module.
struct coverage_report {
  std::string backend;
  std::string module;
  std::vector<method_coverage> methods;

  /// True when every node of every method is supported: lowering will not reject a node.
  bool fully_supported() const {
    for (const auto& method : methods)
      if (method.unsupported) return false;
    return true;
  }

  /// A readable table: one line per method, then one per unsupported node with its source.
  std::string to_string() const {
    std::ostringstream out;
    out << "coverage of " << module << " by backend '" << backend << "'\n";
    for (const auto& method : methods) {
      out << "  " << method.method << ": " << method.supported << " of " << method.supported + method.unsupported
          << " nodes supported";
      if (method.unsupported) out << ", " << method.unsupported << " unsupported";
      out << "\n";
      for (const auto& node : method.nodes) {
        if (node.supported) continue;
        out << "    unsupported " << node.kind << (node.location.empty() ? "" : " at " + node.location) << "\n";
        std::istringstream lines(node.source);
        for (std::string line; std::getline(lines, line);) out << "      " << line << "\n";
      }
    }
    return out.str();
  }
};

namespace detail {

using supports_function = bool (*)(const torch::jit::Node*);

TORCH_DELEGATE_INTERNAL void cover_block(const torch::jit::Block* block, int depth, supports_function supports, method_coverage& out);

TORCH_DELEGATE_DECL coverage_report coverage_of(std::string_view backend, const torch::jit::Module& module,
                                   const std::vector<std::string>& methods, supports_function supports);

template <class B>
struct backend_does_not_declare_supports;

}  // namespace detail

/// Reports, per method, which nodes B would accept and which it would reject, without lowering.
template <class B>
coverage_report coverage(const torch::jit::Module& module, const std::vector<std::string>& methods = {"forward"}) {
  if constexpr (!backend_declares_support<B>) {
    detail::backend_does_not_declare_supports<B> error;
    static_assert(detail::dependent_false<B>,
                  "torch-delegate: coverage<B> needs 'static bool supports(const torch::jit::Node*)' in the backend: "
                  "the one place that says which nodes it accepts (docs/debugging.md#coverage).");
  } else {
    return detail::coverage_of(B::name, module, methods, &B::supports);
  }
}

}  // namespace torch_delegate

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/coverage.ipp>
#endif
