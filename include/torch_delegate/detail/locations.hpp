// Where a node of an inlined graph comes from in the user's model: its call frames (read without
// the Function* that freezing leaves dangling), its submodule, the model's own source line.
// Used by preprocess (debug locations), coverage and partial lowering (reports).
#pragma once

#include <torch_delegate/debug.hpp>
#include <torch_delegate/detail/config.hpp>

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/ir/scope.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace torch_delegate::detail {

/// Where a node comes from in the model: its kind, file:line, the calls that inlined it (one
/// frame per submodule or function call, outermost first) and its own source lines.
TORCH_DELEGATE_INTERNAL debug_location locate(const torch::jit::Node* node);

/// One call that inlined a node: the called function's name, where it was called, and the
/// submodule it entered (if any). Read from the node's InlinedCallStack without its Function*:
/// freezing (and any pass that drops the functions it inlined) leaves that pointer dangling,
/// which is why LibTorch keeps the name apart (InlinedCallStack::function_name()).
struct call_frame {
  std::string function;
  torch::jit::SourceRange call_site;
  std::optional<torch::jit::ModuleInstanceInfo> module;
};

/// The calls that inlined `node`, outermost first (empty for a node of the method itself).
TORCH_DELEGATE_INTERNAL std::vector<call_frame> call_frames(const torch::jit::Node* node);

/// Where a node sits in the user's model: the submodule it was inlined from, by attribute path
/// ("features.3.block.2"; "" for the method's own nodes), and the innermost source line that is
/// the model's own ("mobilenetv2.py:64"): not inside PyTorch's modules (torch/nn/modules, ...)
/// and not TorchScript's builtins ("<string>"). When no frame has such a line: the innermost
/// line with a file, else the node's own ("<string>:3" for source without a file), else "".
struct model_location {
  std::string submodule;
  std::string line;
};
TORCH_DELEGATE_INTERNAL model_location locate_in_model(const torch::jit::Node* node);

/// Whether `file` is part of PyTorch itself (its installed package, e.g.
/// ".../dist-packages/torch/nn/modules/conv.py", or any ".../torch/nn/..." file).
TORCH_DELEGATE_DECL bool is_pytorch_source(std::string_view file);

/// Whether "file:line" is a line of the model's own source (a file, not PyTorch's).
TORCH_DELEGATE_INTERNAL bool is_model_line(const std::string& line);

/// "self.encoder.weight": the attribute path a prim::GetAttr chain reads, from the method's
/// `self`; empty when the chain does not start at `self`.
TORCH_DELEGATE_INTERNAL std::string attribute_path(const torch::jit::Node* node);

/// What a prim::GetAttr chain from the method's `self` (its graph's first input) reads in
/// `module`: a parameter, buffer, submodule or attribute value. nullopt when `value` is not made by
/// such a chain, or an attribute it names is missing.
TORCH_DELEGATE_INTERNAL std::optional<c10::IValue> attribute_value(const torch::jit::Module& module,
                                                                   const torch::jit::Value* value);

/// The attributes a method assigns (a prim::SetAttr at any depth of its graph), to tell which
/// reads see a value the method itself may change: torchvision's MultiScaleRoIAlign sets its
/// `scales` on the first call, so their value at lowering (None) is not what the method reads
/// after it. Such a read stays a read: it is neither folded to a constant nor owned by a region.
class attribute_assignments {
 public:
  TORCH_DELEGATE_INTERNAL attribute_assignments(const torch::jit::Module& module, const torch::jit::Graph& graph);

  /// Whether the attribute that the prim::GetAttr `read` reads, or one of the chain that leads to
  /// it, may be assigned: the same name set on the same object, or on an object no GetAttr chain
  /// from `self` names. False for any other node.
  TORCH_DELEGATE_INTERNAL bool assigns(const torch::jit::Node* read) const;

  bool empty() const { return assigned_.empty(); }

 private:
  const torch::jit::Module* module_;
  std::vector<std::pair<std::optional<c10::IValue>, std::string>> assigned_;  // (object, attribute)
};

/// The attributes that methods of a module assign (attribute_assignments) and their values at one
/// moment, by path from the module ({"pool", "scales"}): what running a method on example inputs
/// while lowering must not change, in the user's module or in the lowered one (whose first call
/// must see what the original's would). Lists and dicts are kept as copies.
struct attribute_snapshot {
  std::vector<std::pair<std::vector<std::string>, c10::IValue>> values;

  /// Each path's value set again in `module` (a copy of a list or dict), where `module` has the
  /// path (a lowered module keeps its original's submodules and attributes).
  TORCH_DELEGATE_INTERNAL void restore(const torch::jit::Module& module) const;
};

/// The attributes `methods` of `module` assign, their calls inlined, with their values now. An
/// assignment to an object no GetAttr chain from `self` names is not in it.
TORCH_DELEGATE_INTERNAL attribute_snapshot assigned_attributes(const torch::jit::Module& module,
                                                               const std::vector<std::string>& methods);

/// Where a node is, for an error at preprocess: its file, line and highlighted source lines;
/// for a node without a source range, what it is and which method it belongs to.
TORCH_DELEGATE_INTERNAL std::string source_of(const torch::jit::Node* node, std::string_view method);

}  // namespace torch_delegate::detail

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/locations.ipp>
#endif
