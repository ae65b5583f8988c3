// Definitions for detail/lowering_conditions.hpp.
#pragma once

#include <torch_delegate/detail/locations.hpp>
#include <torch_delegate/detail/lowering_conditions.hpp>

#include <torch/csrc/jit/ir/constants.h>

#include <ATen/autocast_mode.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace torch_delegate::detail {

namespace lowering_condition_rules {

/// The value a prim::unchecked_cast (Optional[Tensor] to Tensor) reads, through every cast.
inline torch::jit::Value* uncast(torch::jit::Value* value) {
  while (value->node()->kind() == c10::prim::unchecked_cast) value = value->node()->input(0);
  return value;
}

/// The index of `value` among the graph's inputs (self at 0), or 0 when it is none of them.
inline std::size_t argument_index(const torch::jit::Graph& graph, const torch::jit::Value* value) {
  for (std::size_t i = 1; i < graph.inputs().size(); ++i)
    if (graph.inputs()[i] == value) return i;
  return 0;
}

/// The properties of a tensor this pass reads and decides.
inline const std::vector<c10::Symbol>& tensor_properties() {
  static const std::vector<c10::Symbol> properties{
      c10::Symbol::fromQualString("prim::is_nested"), c10::prim::is_cuda,       c10::Symbol::fromQualString("prim::is_sparse"),
      c10::Symbol::fromQualString("prim::is_quantized"), c10::Symbol::fromQualString("prim::is_mkldnn"),
      c10::prim::requires_grad, c10::prim::device, c10::prim::dtype, c10::aten::is_floating_point};
  return properties;
}

inline bool is_property(c10::Symbol kind) {
  const auto& properties = tensor_properties();
  return std::find(properties.begin(), properties.end(), kind) != properties.end();
}

/// A property of a tensor, as the node of kind `property` computes it.
inline c10::IValue property_of(const at::Tensor& tensor, c10::Symbol property) {
  const std::string name = property.toUnqualString();
  if (name == "is_nested") return tensor.is_nested();
  if (name == "is_cuda") return tensor.is_cuda();
  if (name == "is_sparse") return tensor.is_sparse();
  if (name == "is_quantized") return tensor.is_quantized();
  if (name == "is_mkldnn") return tensor.is_mkldnn();
  if (name == "requires_grad") return tensor.requires_grad();
  if (name == "dtype") return static_cast<std::int64_t>(tensor.scalar_type());
  if (name == "is_floating_point") return tensor.is_floating_point();
  return tensor.device();  // prim::device
}

/// The process states this pass decides: nodes without inputs whose value the process's state
/// gives (the autocast switches; not grad mode, which a call changes as it likes).
inline std::optional<bool> process_state(c10::Symbol kind) {
  const std::string name = kind.toQualString();
  if (name == "aten::is_autocast_enabled") return at::autocast::is_enabled();
  if (name == "aten::is_autocast_cpu_enabled") return at::autocast::is_cpu_enabled();
  return std::nullopt;
}

/// Whether `value` cannot be a nested tensor: a parameter or constant, an argument for which
/// `argument_plain(index)` says so (its check is added there), or what an ATen operator that makes
/// no nested tensor computes from tensors that are not (memoized in `known`).
inline bool never_nested(const torch::jit::Graph& graph, const torch::jit::Value* value,
                         std::unordered_map<const torch::jit::Value*, bool>& known,
                         const std::function<bool(std::size_t)>& argument_plain, int depth = 0) {
  if (const auto found = known.find(value); found != known.end()) return found->second;
  if (depth > 400) return false;
  const torch::jit::Node* node = value->node();
  bool result = false;
  if (node->kind() == c10::prim::Constant || node->kind() == c10::prim::GetAttr) {
    result = true;
  } else if (node->kind() == c10::prim::Param) {
    const std::size_t argument = argument_index(graph, value);
    result = argument != 0 && argument_plain(argument);
  } else if (node->kind() == c10::prim::unchecked_cast || node->kind() == c10::prim::ListUnpack) {  // a chunk's parts
    result = never_nested(graph, node->input(0), known, argument_plain, depth + 1);
  } else if ((node->kind().is_aten() && node->blocks().empty()) || node->kind() == c10::prim::ListConstruct) {
    const std::string name = node->kind().toUnqualString();
    result = name.find("nested") == std::string::npos && node->kind() != c10::Symbol::fromQualString("aten::to_padded_tensor");
    for (const torch::jit::Value* input : node->inputs()) {
      if (!result) break;
      const auto list = input->type()->cast<c10::ListType>();
      if (input->type()->kind() != c10::TypeKind::TensorType && !(list && list->getElementType()->kind() == c10::TypeKind::TensorType))
        continue;
      result = never_nested(graph, input, known, argument_plain, depth + 1);
    }
  }
  known[value] = result;
  return result;
}

/// The nodes whose values decide control flow: those an if's or a loop's condition reads, through
/// values that are not tensors (bools, numbers, strings, devices, their lists: a list's appends
/// included). Only these are decided: a device that only gives a new tensor its options
/// (`y.new_zeros(...)`) is shape folding's to fold, not a condition.
inline std::unordered_set<const torch::jit::Node*> deciding_nodes(const std::vector<torch::jit::Node*>& nodes) {
  std::unordered_set<const torch::jit::Node*> found;
  std::vector<const torch::jit::Value*> pending;
  for (const torch::jit::Node* node : nodes) {
    if (node->kind() == c10::prim::If && node->inputs().size() == 1) pending.push_back(node->input(0));
    if (node->kind() == c10::prim::Loop && node->inputs().size() >= 2) pending.push_back(node->input(1));
  }
  while (!pending.empty()) {
    const torch::jit::Value* value = pending.back();
    pending.pop_back();
    if (value->type()->kind() == c10::TypeKind::TensorType) continue;
    const torch::jit::Node* node = value->node();
    if (node->kind() == c10::prim::Param || !found.insert(node).second) continue;
    for (const torch::jit::Value* input : node->inputs()) pending.push_back(input);
    for (const torch::jit::Block* block : node->blocks())
      for (const torch::jit::Value* output : block->outputs()) pending.push_back(output);
    if (value->type()->kind() == c10::TypeKind::ListType)
      for (const torch::jit::Use& use : value->uses())
        if (use.user->kind() == c10::aten::append && use.user->inputs().size() == 2) pending.push_back(use.user->input(1));
  }
  return found;
}

inline bool is_tensor_or_optional(const torch::jit::Value* value) {
  const c10::TypePtr& type = value->type();
  if (type->kind() == c10::TypeKind::TensorType) return true;
  const auto optional = type->cast<c10::OptionalType>();
  return optional && optional->getElementType()->kind() == c10::TypeKind::TensorType;
}

/// Whether `value` is a tensor an ATen operator makes anew: its schema says its output aliases
/// nothing (`layer_norm`, `linear`, `add`; not `contiguous`, `to` or a view, which may return their
/// input), so no other tensor of the method is the same one.
inline bool made_anew(const torch::jit::Value* value) {
  const torch::jit::Node* node = value->node();
  if (!node->kind().is_aten() || node->outputs().size() != 1 || value->type()->kind() != c10::TypeKind::TensorType) return false;
  const c10::FunctionSchema* schema = node->maybeSchema();
  return schema && schema->returns().size() == 1 && !schema->returns()[0].alias_info() && !schema->is_mutable();
}

inline std::string spelled(const c10::IValue& value) {
  if (value.isBool()) return value.toBool() ? "True" : "False";
  if (value.isDevice()) return value.toDevice().str();
  std::ostringstream out;
  out << value;
  return out.str();
}

/// What the method calls the value: its argument's name, or its debug name and the node that made
/// it (two values of one name, `x` and `x = norm(x)`, apart), else its node's kind.
inline std::string name_of(const torch::jit::Value* value) {
  const bool argument = value->node()->kind() == c10::prim::Param;
  if (value->hasDebugName()) {
    std::string name = value->debugName();
    if (const auto dot = name.find('.'); dot != std::string::npos && dot > 0) name.resize(dot);
    return argument || value->node()->kind() == c10::prim::unchecked_cast ? name
                                                                          : name + " (made by " + value->node()->kind().toQualString() + ")";
  }
  return "the result of " + std::string(value->node()->kind().toQualString());
}

}  // namespace lowering_condition_rules

TORCH_DELEGATE_INTERNAL std::size_t decide_known_conditions(const std::shared_ptr<torch::jit::Graph>& graph,
                                                            const std::vector<c10::IValue>& examples, bool owns_parameters,
                                                            lowering_conditions& conditions) {
  using namespace lowering_condition_rules;
  const auto example_of = [&](std::size_t argument) -> const c10::IValue* {
    return argument >= 1 && argument - 1 < examples.size() ? &examples[argument - 1] : nullptr;
  };
  // The plain tensor arguments: what the checks of a property derived from them name.
  // (Optional[Tensor] ones the example gave a tensor included: their checks say not None first.)
  std::vector<std::size_t> tensor_arguments;
  for (std::size_t i = 1; i < graph->inputs().size(); ++i)
    if (is_tensor_or_optional(graph->inputs()[i]) && example_of(i) && example_of(i)->isTensor()) tensor_arguments.push_back(i);
  const auto check = [&](std::size_t argument, c10::Symbol property, c10::IValue value, std::size_t other = 0) {
    const auto add = [&](std::size_t a, c10::Symbol p, c10::IValue v, std::size_t o) {
      for (const condition_check& existing : conditions.checks)
        if (existing.argument == a && existing.property == p && existing.other == o) return;
      conditions.checks.push_back({a, p, std::move(v), o});
    };
    // A property of an optional argument is read once it is known not None (identity is not a
    // property: `a is b` holds of None too).
    if (property != c10::prim::Uninitialized && property != c10::aten::__is__ && argument != 0 &&
        graph->inputs()[argument]->type()->kind() == c10::TypeKind::OptionalType)
      add(argument, c10::prim::Uninitialized, false, 0);
    add(argument, property, std::move(value), other);
  };
  const auto report = [&](std::string test, const c10::IValue& value, std::string basis, const torch::jit::Node* node) {
    std::string value_text = spelled(value);
    for (const decided_condition& existing : conditions.decided)
      if (existing.test == test && existing.value == value_text) return;
    conditions.decided.push_back({std::move(test), std::move(value_text), std::move(basis), locate_in_model(node).line});
  };

  std::vector<torch::jit::Node*> nodes;  // in any block, in order
  const std::function<void(torch::jit::Block*)> collect = [&](torch::jit::Block* block) {
    for (torch::jit::Node* node : block->nodes()) {
      nodes.push_back(node);
      for (torch::jit::Block* nested : node->blocks()) collect(nested);
    }
  };
  collect(graph->block());
  const std::unordered_set<const torch::jit::Node*> deciding = deciding_nodes(nodes);
  // An optional argument the example left None, that a condition tests, is None in the specialized
  // method: each read of it reads None (`mask if mask is not None else key_padding_mask` is None,
  // not an argument).
  const auto tested = [&](const torch::jit::Value* argument) {
    for (const torch::jit::Node* node : nodes)
      if ((node->kind() == c10::aten::__is__ || node->kind() == c10::aten::__isnot__) && deciding.count(node))
        for (const torch::jit::Value* input : node->inputs())
          if (uncast(const_cast<torch::jit::Value*>(input)) == argument) return true;
    return false;
  };
  std::size_t nones = 0;
  for (std::size_t i = 1; i < graph->inputs().size(); ++i) {
    torch::jit::Value* argument = graph->inputs()[i];
    const c10::IValue* example = example_of(i);
    if (!example || !example->isNone() || argument->type()->kind() != c10::TypeKind::OptionalType || !tested(argument)) continue;
    if (!conditions.general) conditions.general = graph->copy();
    check(i, c10::prim::Uninitialized, true);
    report(name_of(argument) + " is None", true, "the example", argument->uses().front().user);
    torch::jit::WithInsertPoint at(graph->block()->nodes().front());
    torch::jit::Value* none = graph->insertConstant(c10::IValue());
    argument->replaceAllUsesWith(none);
    ++nones;
  }
  std::unordered_map<const torch::jit::Value*, bool> not_nested;
  std::vector<std::pair<torch::jit::Node*, c10::IValue>> decisions;
  for (torch::jit::Node* node : nodes) {
    if (!deciding.count(node)) continue;
    const c10::Symbol kind = node->kind();
    if ((kind == c10::aten::__is__ || kind == c10::aten::__isnot__) && node->inputs().size() == 2) {
      // `x is None` of an optional argument: as the example gave it.
      torch::jit::Value* a = uncast(node->input(0));
      torch::jit::Value* b = uncast(node->input(1));
      if (a->type()->kind() == c10::TypeKind::NoneType) std::swap(a, b);
      if (is_tensor_or_optional(a) && is_tensor_or_optional(b)) {
        // `query is key` of two tensors (nn.MultiheadAttention's self-attention test).
        std::optional<bool> same;
        std::string basis;
        const std::size_t first = argument_index(*graph, a), second = argument_index(*graph, b);
        if (a == b) {
          same = true;
          basis = "the same value";
        } else if (first != 0 && second != 0 && example_of(first) && example_of(second)) {
          same = example_of(first)->is(*example_of(second));
          check(std::min(first, second), c10::aten::__is__, *same, std::max(first, second));
          basis = "the example";
        } else if (const torch::jit::Node* maker = made_anew(a) ? a->node() : made_anew(b) ? b->node() : nullptr) {
          same = false;
          basis = std::string("a tensor ") + maker->kind().toQualString() + " makes anew";
        }
        if (!same) continue;
        if (a != b) report(name_of(a) + " is " + name_of(b), *same, basis, node);  // (one value: no condition of the call)
        decisions.emplace_back(node, kind == c10::aten::__is__ ? *same : !*same);
        continue;
      }
      if (b->type()->kind() != c10::TypeKind::NoneType) continue;
      if (a->type()->kind() != c10::TypeKind::OptionalType) {
        // A value whose type cannot be None (a tensor passed for an optional argument, once inlined).
        if (a->type()->kind() == c10::TypeKind::NoneType || a->type()->kind() == c10::TypeKind::AnyType) continue;
        decisions.emplace_back(node, kind == c10::aten::__isnot__);
        continue;
      }
      const std::size_t argument = argument_index(*graph, a);
      const c10::IValue* example = example_of(argument);
      if (!example) continue;
      const bool none = example->isNone();
      check(argument, c10::prim::Uninitialized, none);
      report(name_of(a) + " is None", none, "the example", node);
      decisions.emplace_back(node, kind == c10::aten::__is__ ? none : !none);
    } else if (is_property(kind) && node->inputs().size() == 1) {
      torch::jit::Value* tensor = uncast(node->input(0));
      const std::size_t argument = argument_index(*graph, tensor);
      // An argument's property by its name; the others' once, for all of them.
      const std::string test = argument != 0 ? name_of(tensor) + "." + kind.toUnqualString()
                                             : std::string(kind.toUnqualString()) + " of the tensors that are not arguments";
      if (argument != 0) {  // an argument's: as the example's, checked
        const c10::IValue* example = example_of(argument);
        if (!example || !example->isTensor()) continue;
        c10::IValue value = property_of(example->toTensor(), kind);
        if (tensor->type()->kind() == c10::TypeKind::OptionalType) check(argument, c10::prim::Uninitialized, false);
        check(argument, kind, value);
        report(test, kind == c10::prim::dtype ? c10::IValue(std::string(c10::toString(example->toTensor().scalar_type()))) : value,
               "the example", node);
        decisions.emplace_back(node, std::move(value));
      } else if (std::string(kind.toUnqualString()) == "is_nested") {
        // Made from arguments that are not nested (as their examples, checked) by operators that
        // make no nested tensor.
        const auto argument_plain = [&](std::size_t argument) {
          const c10::IValue* example = example_of(argument);
          if (!example || !example->isTensor() || example->toTensor().is_nested()) return false;
          if (graph->inputs()[argument]->type()->kind() == c10::TypeKind::OptionalType) check(argument, c10::prim::Uninitialized, false);
          check(argument, kind, false);
          return true;
        };
        if (!never_nested(*graph, tensor, not_nested, argument_plain)) continue;
        report(test, false, "made by operators that make no nested tensor, from arguments that are not", node);
        decisions.emplace_back(node, false);
      } else if (kind == c10::prim::requires_grad) {
        // Once no argument requires grad, only a parameter could make a tensor that does; the
        // backends own the parameters (the lowered module computes without their gradients).
        if (!owns_parameters || node->owningGraph() != graph.get()) continue;
        bool none_requires = true;
        for (const std::size_t argument : tensor_arguments) none_requires &= !example_of(argument)->toTensor().requires_grad();
        if (!none_requires) continue;
        for (const std::size_t argument : tensor_arguments) check(argument, c10::prim::requires_grad, false);
        report(test, false, "no argument requires grad, and the backends own the parameters", node);
        decisions.emplace_back(node, false);
      } else if (kind == c10::prim::dtype || kind == c10::aten::is_floating_point) {
        // The dtype the example run recorded, which the arguments' dtypes (checked) determine
        // (nn.MultiheadAttention's `query.dtype != self.in_proj_bias.dtype`).
        const auto type = tensor->type()->cast<c10::TensorType>();
        if (!type || !type->scalarType()) continue;
        for (const std::size_t argument : tensor_arguments)
          check(argument, c10::prim::dtype, static_cast<std::int64_t>(example_of(argument)->toTensor().scalar_type()));
        const c10::ScalarType dtype = *type->scalarType();
        c10::IValue value = kind == c10::prim::dtype ? c10::IValue(static_cast<std::int64_t>(dtype)) : c10::IValue(c10::isFloatingType(dtype));
        report(test, kind == c10::prim::dtype ? c10::IValue(std::string(c10::toString(dtype))) : value, "the arguments' dtypes", node);
        decisions.emplace_back(node, std::move(value));
      } else if (kind == c10::prim::device || kind == c10::prim::is_cuda) {
        // The device the example run recorded, which the arguments' devices (checked) determine.
        const auto type = tensor->type()->cast<c10::TensorType>();
        if (!type || !type->device()) continue;
        for (const std::size_t argument : tensor_arguments)
          check(argument, c10::prim::device, example_of(argument)->toTensor().device());
        c10::IValue value = kind == c10::prim::device ? c10::IValue(*type->device()) : c10::IValue(type->device()->is_cuda());
        report(test, value, "the arguments' devices", node);
        decisions.emplace_back(node, std::move(value));
      }
    } else if (node->inputs().empty()) {
      if (const std::optional<bool> state = process_state(kind)) {
        check(0, kind, *state);
        report("torch." + std::string(kind.toUnqualString()) + "()", *state, "the process at lowering", node);
        decisions.emplace_back(node, *state);
      }
    }
  }
  if (decisions.empty()) return nones;
  if (!conditions.general) conditions.general = graph->copy();
  // The ranks folded beside these decisions (a mask's `dim()`), checked with them: a call with
  // another rank runs the method as it was.
  for (const std::size_t argument : tensor_arguments)
    check(argument, c10::aten::dim, static_cast<std::int64_t>(example_of(argument)->toTensor().dim()));
  for (auto& [node, value] : decisions) {
    torch::jit::WithInsertPoint at(node);
    torch::jit::Value* constant = graph->insertConstant(value);
    node->output()->replaceAllUsesWith(constant);
    node->destroy();
  }
  return nones + decisions.size();
}

TORCH_DELEGATE_INTERNAL std::size_t remove_uniform_ifs(torch::jit::Block* block) {
  std::size_t removed = 0;
  for (auto it = block->nodes().begin(); it != block->nodes().end();) {
    torch::jit::Node* node = *it;
    ++it;
    for (torch::jit::Block* nested : node->blocks()) removed += remove_uniform_ifs(nested);
    // A cast to what its value already is (Optional[Tensor] refined to Tensor, of a tensor once the
    // None was decided): the value itself, so that no node stands between a region's nodes.
    if (node->kind() == c10::prim::unchecked_cast && node->input(0)->type()->isSubtypeOf(*node->output()->type())) {
      node->output()->replaceAllUsesWith(node->input(0));
      node->destroy();
      ++removed;
      continue;
    }
    // all() and any() of a list of decided bools (`all(x.is_cuda or ... for x in tensors)`;
    // constant propagation leaves nodes that read a list).
    if ((node->kind() == c10::aten::all || node->kind() == c10::aten::any) && node->inputs().size() == 1 &&
        node->input(0)->node()->kind() == c10::prim::ListConstruct && node->output()->type()->kind() == c10::TypeKind::BoolType) {
      bool known = true, all = true, any = false;
      for (const torch::jit::Value* element : node->input(0)->node()->inputs()) {
        const c10::optional<c10::IValue> value = torch::jit::toIValue(element);
        known &= value.has_value() && value->isBool();
        if (!known) break;
        all &= value->toBool();
        any |= value->toBool();
      }
      if (!known) continue;
      torch::jit::WithInsertPoint at(node);
      node->output()->replaceAllUsesWith(node->owningGraph()->insertConstant(node->kind() == c10::aten::all ? all : any));
      node->destroy();
      ++removed;
      continue;
    }
    if (node->kind() != c10::prim::If || node->blocks().size() != 2) continue;
    torch::jit::Block* then = node->blocks()[0];
    torch::jit::Block* otherwise = node->blocks()[1];
    if (then->nodes().begin() != then->nodes().end() || otherwise->nodes().begin() != otherwise->nodes().end()) continue;
    bool same = true;
    for (std::size_t k = 0; k < node->outputs().size() && same; ++k) {
      torch::jit::Value* a = then->outputs()[k];
      torch::jit::Value* b = otherwise->outputs()[k];
      if (a == b) continue;
      const c10::optional<c10::IValue> x = torch::jit::toIValue(a), y = torch::jit::toIValue(b);
      same = x && y && a->node()->kind() == c10::prim::Constant && b->node()->kind() == c10::prim::Constant &&
             (x->isBool() || x->isInt() || x->isString() || x->isNone()) && x->type() == y->type() && *x == *y;
    }
    if (!same) continue;
    for (std::size_t k = 0; k < node->outputs().size(); ++k) node->outputs()[k]->replaceAllUsesWith(then->outputs()[k]);
    node->destroy();
    ++removed;
  }
  return removed;
}

TORCH_DELEGATE_INTERNAL std::shared_ptr<torch::jit::Graph> guard_conditions(const std::shared_ptr<torch::jit::Graph>& method_graph,
                                                                            const lowering_conditions& conditions) {
  std::shared_ptr<torch::jit::Graph> graph = method_graph->copy();
  torch::jit::Block* top = graph->block();
  const std::vector<torch::jit::Node*> nodes(top->nodes().begin(), top->nodes().end());
  torch::jit::Node* first = nodes.empty() ? top->return_node() : nodes.front();
  // The checks in order: each argument's None-ness before its properties, one after the other
  // (a property of None is not read); the process's states last.
  std::vector<const condition_check*> ordered;
  for (const condition_check& check : conditions.checks)
    if (check.property == c10::prim::Uninitialized) ordered.push_back(&check);
  for (const condition_check& check : conditions.checks)
    if (check.property != c10::prim::Uninitialized && check.argument != 0) ordered.push_back(&check);
  for (const condition_check& check : conditions.checks)
    if (check.argument == 0) ordered.push_back(&check);
  torch::jit::Value* hold = nullptr;
  torch::jit::Node* before = first;
  std::vector<torch::jit::Node*> chain;  // the ifs that short-circuit, outermost first
  for (const condition_check* check : ordered) {
    torch::jit::WithInsertPoint insert(before);
    torch::jit::Value* test = nullptr;
    if (check->argument == 0) {
      test = graph->insert(check->property, {});
    } else {
      torch::jit::Value* argument = graph->inputs()[check->argument];
      if (check->property == c10::prim::Uninitialized) {
        test = graph->insert(c10::aten::__is__, {argument, graph->insertConstant(c10::IValue())});
      } else if (check->property == c10::aten::__is__) {
        test = graph->insert(c10::aten::__is__, {argument, graph->inputs()[check->other]});
      } else {
        if (argument->type()->kind() == c10::TypeKind::OptionalType) {
          torch::jit::Node* cast = graph->insertNode(graph->create(c10::prim::unchecked_cast, {argument}));
          cast->output()->setType(argument->type()->expectRef<c10::OptionalType>().getElementType());
          argument = cast->output();
        }
        if (check->property.is_aten()) {  // aten::dim, aten::is_floating_point
          test = graph->insert(check->property, {argument});
        } else {
          torch::jit::Node* read = graph->insertNode(graph->create(check->property, {argument}));
          read->output()->setType(check->property == c10::prim::device  ? c10::TypePtr(c10::DeviceObjType::get())
                                  : check->property == c10::prim::dtype ? c10::TypePtr(c10::IntType::get())
                                                                        : c10::TypePtr(c10::BoolType::get()));
          test = read->output();
        }
      }
    }
    torch::jit::Value* expected = graph->insertConstant(check->value);
    torch::jit::Value* holds = graph->insert(c10::aten::eq, {test, expected});
    // if <holds>: <the next check> else: False
    torch::jit::Node* next = graph->create(c10::prim::If, {holds}, 1);
    next->output()->setType(c10::BoolType::get());
    next->insertBefore(before);
    torch::jit::Block* then = next->addBlock();
    torch::jit::Block* otherwise = next->addBlock();
    {
      torch::jit::WithInsertPoint in_else(otherwise->return_node());
      otherwise->registerOutput(graph->insertConstant(false));
    }
    if (hold) {
      // the previous if's then-branch returns this if's result
      chain.back()->blocks()[0]->registerOutput(next->output());
    } else {
      hold = next->output();
    }
    chain.push_back(next);
    before = then->return_node();
  }
  if (!hold) return graph;
  {
    torch::jit::WithInsertPoint in_then(chain.back()->blocks()[0]->return_node());
    chain.back()->blocks()[0]->registerOutput(graph->insertConstant(true));
  }
  // if <hold>: <the specialized method> else: <the method as it was>
  torch::jit::Node* choice = graph->create(c10::prim::If, {hold}, 0);
  choice->insertBefore(first);
  torch::jit::Block* specialized = choice->addBlock();
  torch::jit::Block* as_was = choice->addBlock();
  for (torch::jit::Node* node : nodes) node->moveBefore(specialized->return_node());
  for (torch::jit::Value* output : top->outputs()) specialized->registerOutput(output);
  std::vector<torch::jit::Value*> general_outputs;
  {
    torch::jit::WithInsertPoint in_else(as_was->return_node());
    std::vector<torch::jit::Value*> inputs(graph->inputs().begin(), graph->inputs().end());
    general_outputs = torch::jit::insertGraph(*graph, *conditions.general, inputs);
  }
  for (torch::jit::Value* output : general_outputs) as_was->registerOutput(output);
  for (std::size_t i = 0; i < top->outputs().size(); ++i) {
    choice->addOutput()->setType(top->outputs()[i]->type());
    top->return_node()->replaceInput(i, choice->outputs()[i]);
  }
  return graph;
}

}  // namespace torch_delegate::detail
