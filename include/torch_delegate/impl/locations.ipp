// Definitions for detail/locations.hpp.
#pragma once

#include <torch_delegate/detail/locations.hpp>

#include <torch/csrc/jit/passes/inliner.h>

#include <algorithm>
#include <cctype>
#include <set>
#include <sstream>

namespace torch_delegate::detail {

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

inline std::vector<call_frame> frames_of(const c10::optional<torch::jit::InlinedCallStackPtr>& call_stack) {
  std::vector<call_frame> frames;
  c10::optional<torch::jit::InlinedCallStackPtr> at = call_stack;
  while (at) {
    const torch::jit::InlinedCallStack& frame = **at;
    std::optional<torch::jit::ModuleInstanceInfo> module;
    if (auto instance = frame.module_instance()) module = *instance;
    frames.push_back({frame.function_name(), frame.source_range(), std::move(module)});
    at = frame.callee();
  }
  return frames;
}

/// Whether two ranges are in the same source text: the same function's (or class's) code. Compared
/// by value: inlining and copying may give one text two Source objects.
inline bool same_source(const torch::jit::SourceRange& a, const torch::jit::SourceRange& b) {
  const std::shared_ptr<torch::jit::Source> x = a.source(), y = b.source();
  if (!x || !y) return false;
  if (x == y) return true;
  return x->filename() == y->filename() && x->starting_line_no() == y->starting_line_no() &&
         x->size() == y->size() && x->text_str().str() == y->text_str().str();
}

/// A node near `node` (its inputs' makers, then its neighbours in its block, nearest first, the
/// next before the previous) that has a call stack and comes from the same source text, or nullptr.
inline const torch::jit::Node* same_call_neighbour(const torch::jit::Node* node) {
  auto fits = [&](const torch::jit::Node* other) {
    return other->callstack() && same_source(other->sourceRange(), node->sourceRange());
  };
  // An attribute read has no source range: one that makes an input and has a call stack is
  // taken as it is (`if self.training:` reads `self.training` in the same function).
  for (const torch::jit::Value* input : node->inputs()) {
    const torch::jit::Node* maker = input->node();
    if (fits(maker) || (maker->kind() == c10::prim::GetAttr && maker->callstack() && !maker->sourceRange().source()))
      return maker;
  }
  const torch::jit::Node* before = node->prev();
  const torch::jit::Node* after = node->next();
  for (int step = 0; step < 64; ++step) {  // inlined bodies are short; a miss costs only the location
    // After first: a value-less `if` usually opens its function's body (BatchNorm's does), and
    // the node just before it may be the previous call of the same function.
    if (after && after->kind() != c10::prim::Return) {
      if (fits(after)) return after;
      after = after->next();
    } else {
      after = nullptr;
    }
    if (before && before->kind() != c10::prim::Param) {
      if (fits(before)) return before;
      before = before->prev();
    } else {
      before = nullptr;
    }
  }
  return nullptr;
}

// LibTorch's inliner gives a call stack only to the nodes that make a value, and when it inlines
// a node with blocks it does not extend the call stacks of the nodes inside them: an inlined
// `if` without results (BatchNorm's `if self.training:`) has none, and the nodes of its blocks
// keep only the frames of earlier inlinings (`_verify_batch_size` inlined into `batch_norm`).
// So: a node without a call stack and without results stands with a node near it that has one
// and comes from the same source text (BatchNorm's `if self.training:` with the nodes of
// BatchNorm's forward around it; never a method's own `if` with the submodule call that made its
// condition); a node inside a block gets the frames of the node that holds the block in front
// of its own, unless its own already begin with them.
TORCH_DELEGATE_INTERNAL std::vector<call_frame> call_frames(const torch::jit::Node* node) {
  std::vector<call_frame> frames = frames_of(node->callstack());
  if (frames.empty() && node->outputs().empty() && node->sourceRange().source())
    if (const torch::jit::Node* neighbour = same_call_neighbour(node)) frames = frames_of(neighbour->callstack());
  const torch::jit::Node* holder = node->owningBlock() ? node->owningBlock()->owningNode() : nullptr;
  if (!holder) return frames;
  std::vector<call_frame> outer = call_frames(holder);
  if (frames.empty()) return outer;
  if (!outer.empty() && !(frames.front().call_site == outer.front().call_site))
    frames.insert(frames.begin(), outer.begin(), outer.end());
  return frames;
}

inline std::string file_line_of(const torch::jit::SourceRange& range) {
  auto position = range.file_line_col();
  return position ? std::get<0>(*position) + ":" + std::to_string(std::get<1>(*position)) : std::string();
}
// "<string>": source without a file. TorchScript's own builtins are such source (`0.5 * x`
// inlines a builtin written in TorchScript); so is a model made with Module::define.
inline bool has_source_file(const std::string& location) {
  return !location.empty() && location.rfind("<string>:", 0) != 0;
}

TORCH_DELEGATE_INTERNAL bool is_model_line(const std::string& line) { return has_source_file(line) && !is_pytorch_source(line); }

TORCH_DELEGATE_DECL bool is_pytorch_source(std::string_view file) {
  for (std::string_view package : {"/site-packages/torch/", "/dist-packages/torch/", "/torch/nn/", "/torch/jit/"})
    if (file.find(package) != std::string_view::npos) return true;
  return file.rfind("torch/nn/", 0) == 0 || file.rfind("torch/jit/", 0) == 0;
}

TORCH_DELEGATE_INTERNAL debug_location locate(const torch::jit::Node* node) {
  debug_location where;
  where.node_kind = node->kind().toQualString();
  const std::vector<call_frame> frames = call_frames(node);
  where.file_line = file_line_of(node->sourceRange());
  if (!has_source_file(where.file_line)) {
    // Inlined from such source: the model's line is the innermost call site that has a file.
    for (auto frame = frames.rbegin(); frame != frames.rend(); ++frame) {
      std::string call_site = file_line_of(frame->call_site);
      if (!has_source_file(call_site)) continue;
      where.file_line = std::move(call_site);
      break;
    }
  }
  for (const call_frame& frame : frames) {
    std::string text = "  called here";
    if (frame.module && frame.module->class_type())
      text += ", entering submodule '" + frame.module->instance_name() + "' (" +
              demangled_name(frame.module->class_type()->name()->qualifiedName()) + ")";
    if (!frame.function.empty()) text += ", method " + frame.function;
    where.call_stack.push_back(text + ":\n" + highlighted(frame.call_site));
  }
  where.source = highlighted(node->sourceRange());
  return where;
}

TORCH_DELEGATE_INTERNAL model_location locate_in_model(const torch::jit::Node* node) {
  model_location where;
  const std::vector<call_frame> frames = call_frames(node);
  for (const call_frame& frame : frames) {
    if (!frame.module || !frame.module->class_type()) continue;
    const std::string& name = frame.module->instance_name();
    // Calls of the module's own methods enter no submodule (their instance is "self" or "SELF").
    std::string lowered = name;
    std::transform(lowered.begin(), lowered.end(), lowered.begin(), [](unsigned char c) { return std::tolower(c); });
    if (lowered == "self") continue;
    where.submodule += (where.submodule.empty() ? "" : ".") + name;
  }
  auto model_line = [](const torch::jit::SourceRange& range) {
    std::string line = file_line_of(range);
    return is_model_line(line) ? line : std::string();
  };
  where.line = model_line(node->sourceRange());
  for (auto frame = frames.rbegin(); where.line.empty() && frame != frames.rend(); ++frame)
    where.line = model_line(frame->call_site);
  if (where.line.empty()) {
    // No line of the model's own: the innermost line with a file (PyTorch's), else the node's.
    where.line = file_line_of(node->sourceRange());
    for (auto frame = frames.rbegin(); !has_source_file(where.line) && frame != frames.rend(); ++frame)
      if (std::string call_site = file_line_of(frame->call_site); has_source_file(call_site)) where.line = std::move(call_site);
  }
  return where;
}

TORCH_DELEGATE_INTERNAL std::string attribute_path(const torch::jit::Node* node) {
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

TORCH_DELEGATE_INTERNAL std::string source_of(const torch::jit::Node* node, std::string_view method) {
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

// The attribute path from `self` a value of its graph is ({} for `self`), where it is one.
inline std::optional<std::vector<std::string>> path_from_self(const torch::jit::Value* value) {
  std::vector<std::string> names;  // innermost first
  for (; value->node()->kind() == c10::prim::GetAttr; value = value->node()->input()) names.push_back(value->node()->s(c10::attr::name));
  const torch::jit::Graph& graph = *value->owningGraph();
  if (graph.inputs().empty() || value != graph.inputs()[0]) return std::nullopt;
  return std::vector<std::string>(names.rbegin(), names.rend());
}

// What `module` holds at the first `count` names of `path` (the module itself for none), where
// each is an attribute of the object before it.
inline std::optional<c10::IValue> object_at(const torch::jit::Module& module, const std::vector<std::string>& path,
                                            std::size_t count) {
  c10::IValue object = module._ivalue();
  for (std::size_t i = 0; i < count; ++i) {
    if (!object.isObject() || !object.toObjectRef().type()->hasAttribute(path[i])) return std::nullopt;
    object = object.toObjectRef().getAttr(path[i]);
  }
  return object;
}

TORCH_DELEGATE_INTERNAL std::optional<c10::IValue> attribute_value(const torch::jit::Module& module,
                                                                   const torch::jit::Value* value) {
  const std::optional<std::vector<std::string>> path = path_from_self(value);
  if (!path || path->empty()) return std::nullopt;
  return object_at(module, *path, path->size());
}

// The object a value of `graph` is, where it is `self` or a GetAttr chain from it.
inline std::optional<c10::IValue> object_named(const torch::jit::Module& module, const torch::jit::Value* value) {
  const std::optional<std::vector<std::string>> path = path_from_self(value);
  if (!path) return std::nullopt;
  return object_at(module, *path, path->size());
}

// Calls `visit(node)` for each prim::SetAttr of `graph`, at any depth.
template <class Visit>
void for_each_assignment(const torch::jit::Graph& graph, Visit&& visit) {
  std::vector<const torch::jit::Block*> blocks{graph.block()};
  while (!blocks.empty()) {
    const torch::jit::Block* block = blocks.back();
    blocks.pop_back();
    for (const torch::jit::Node* node : block->nodes()) {
      for (const torch::jit::Block* nested : node->blocks()) blocks.push_back(nested);
      if (node->kind() == c10::prim::SetAttr) visit(node);
    }
  }
}

TORCH_DELEGATE_INTERNAL attribute_assignments::attribute_assignments(const torch::jit::Module& module,
                                                                     const torch::jit::Graph& graph)
    : module_(&module) {
  for_each_assignment(graph, [&](const torch::jit::Node* node) {
    assigned_.emplace_back(object_named(module, node->input(0)), node->s(c10::attr::name));
  });
}

TORCH_DELEGATE_INTERNAL bool attribute_assignments::assigns(const torch::jit::Node* read) const {
  // Each link of the chain: `self.pool.scales` is assigned where `self.pool` is.
  for (; !assigned_.empty() && read->kind() == c10::prim::GetAttr; read = read->input()->node()) {
    const std::string& name = read->s(c10::attr::name);
    const std::optional<c10::IValue> object = object_named(*module_, read->input());
    if (std::any_of(assigned_.begin(), assigned_.end(), [&](const auto& assigned) {
          return assigned.second == name && (!assigned.first || !object || assigned.first->is(*object));
        }))
      return true;
  }
  return false;
}

// A list or dict as a copy (a method may change one in place); any other value as it is.
inline c10::IValue kept_copy(const c10::IValue& value) {
  if (value.isList()) return value.toList().copy();
  if (value.isGenericDict()) return value.toGenericDict().copy();
  return value;
}

TORCH_DELEGATE_INTERNAL void attribute_snapshot::restore(const torch::jit::Module& module) const {
  for (const auto& [path, value] : values) {
    const std::optional<c10::IValue> object = object_at(module, path, path.size() - 1);
    if (object && object->isObject() && object->toObjectRef().type()->hasAttribute(path.back()))
      object->toObjectRef().setAttr(path.back(), kept_copy(value));
  }
}

TORCH_DELEGATE_INTERNAL attribute_snapshot assigned_attributes(const torch::jit::Module& module,
                                                               const std::vector<std::string>& methods) {
  attribute_snapshot snapshot;
  std::set<std::vector<std::string>> seen;
  for (const std::string& method : methods) {
    if (!module.find_method(method)) continue;
    std::shared_ptr<torch::jit::Graph> graph = module.get_method(method).graph()->copy();
    torch::jit::Inline(*graph);
    for_each_assignment(*graph, [&](const torch::jit::Node* node) {
      std::optional<std::vector<std::string>> path = path_from_self(node->input(0));
      if (!path) return;
      path->push_back(node->s(c10::attr::name));
      if (!seen.insert(*path).second) return;
      const std::optional<c10::IValue> object = object_at(module, *path, path->size() - 1);
      if (!object || !object->isObject() || !object->toObjectRef().type()->hasAttribute(path->back())) return;
      snapshot.values.emplace_back(*path, kept_copy(object->toObjectRef().getAttr(path->back())));
    });
  }
  return snapshot;
}

}  // namespace torch_delegate::detail
