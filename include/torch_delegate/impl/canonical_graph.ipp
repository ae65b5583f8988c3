// Definitions for detail/canonical_graph.hpp: the graph partial lowering and coverage look at.
#pragma once

#include <torch_delegate/detail/attention_calls.hpp>
#include <torch_delegate/detail/canonical_graph.hpp>
#include <torch_delegate/detail/lowering_plan.hpp>
#include <torch_delegate/detail/lowering_conditions.hpp>
#include <torch_delegate/impl/lowering_conditions.ipp>
#include <torch_delegate/impl/in_place_ops.ipp>
#include <torch_delegate/impl/numbers_to_readers.ipp>
#include <torch_delegate/impl/traced_graph.ipp>

#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/runtime/graph_iterator.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/lower_tuples.h>
#include <torch/csrc/jit/passes/remove_mutation.h>
#include <torch/csrc/jit/runtime/interpreter.h>

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <unordered_set>
#include <vector>

namespace torch_delegate::detail {

/// Replaces each `prim::ListConstruct` of constant ints, floats, bools or strs that only aten operators
/// read (an argument without alias annotation: read, never written, never kept) by a constant
/// list, as TorchScript's constant propagation does not (lists are mutable). Conv's stride,
/// padding and dilation, a view's sizes or a mean's dims then are constants, like a frozen
/// model's weights, and do not end a region.
inline void fold_constant_lists(torch::jit::Block* block) {
  for (auto it = block->nodes().begin(); it != block->nodes().end();) {
    torch::jit::Node* node = *it++;
    for (torch::jit::Block* nested : node->blocks()) fold_constant_lists(nested);
    if (node->kind() != c10::prim::ListConstruct) continue;
    const c10::TypePtr element = node->output()->type()->expectRef<c10::ListType>().getElementType();
    const c10::TypeKind kind = element->kind();
    if (kind != c10::TypeKind::IntType && kind != c10::TypeKind::FloatType && kind != c10::TypeKind::BoolType &&
        kind != c10::TypeKind::StringType)
      continue;
    const bool constant_elements = std::all_of(node->inputs().begin(), node->inputs().end(), [](const torch::jit::Value* v) {
      return v->node()->kind() == c10::prim::Constant;
    });
    const bool only_read = !node->output()->uses().empty() &&
                           std::all_of(node->output()->uses().begin(), node->output()->uses().end(), [](const torch::jit::Use& use) {
                             if (!use.user->kind().is_aten()) return false;
                             const c10::FunctionSchema* schema = use.user->maybeSchema();
                             return schema && use.offset < schema->arguments().size() &&
                                    schema->arguments()[use.offset].alias_info() == nullptr;
                           });
    if (!constant_elements || !only_read) continue;
    c10::impl::GenericList elements(element);
    for (const torch::jit::Value* input : node->inputs()) elements.push_back(*torch::jit::toIValue(input));
    torch::jit::WithInsertPoint at(node);
    torch::jit::Value* folded = node->owningGraph()->insertConstant(c10::IValue(std::move(elements)), node->sourceRange(), node->scope());
    folded->setType(node->output()->type());
    node->output()->replaceAllUsesWith(folded);
    node->destroy();
  }
}

/// Runs `method`'s canonical graph once on example inputs and gives every tensor it makes at its
/// top level (and its tensor arguments) the complete type of what it was in that run.
inline void record_example_types(std::string_view backend, const torch::jit::Module& module, const std::string& method,
                                 const std::shared_ptr<torch::jit::Graph>& graph, const std::vector<c10::IValue>& inputs) {
  const error_context where{backend, method};
  const std::size_t arguments = graph->inputs().size() - 1;
  if (inputs.size() != arguments) {
    // Its arguments by name, with their defaults: RAFT's forward(image1, image2,
    // num_flow_updates=12) takes 3 example inputs, the default's value too.
    std::string names;
    if (const auto found = module.find_method(method)) {
      const auto& schema = found->function().getSchema().arguments();
      for (std::size_t i = 1; i < schema.size(); ++i) {
        names += (i > 1 ? ", " : "") + schema[i].name();
        if (schema[i].default_value()) {
          std::ostringstream value;
          value << *schema[i].default_value();
          names += "=" + value.str();
        }
      }
    }
    fail(where, "example_inputs: " + std::to_string(inputs.size()) + " given, the method takes " + std::to_string(arguments) +
                    (names.empty() ? std::string() : " (" + names + "): give one for each argument without a default"));
  }
  // A copy whose outputs are every tensor the method makes: the same nodes in the same order.
  std::shared_ptr<torch::jit::Graph> probe = graph->copy();
  std::vector<torch::jit::Value*> recorded;
  auto original = graph->nodes().begin();
  for (auto copy = probe->nodes().begin(); copy != probe->nodes().end(); ++copy, ++original)
    for (std::size_t k = 0; k < copy->outputs().size(); ++k)
      if (original->outputs()[k]->type()->kind() == c10::TypeKind::TensorType) {
        recorded.push_back(original->outputs()[k]);
        probe->registerOutput(copy->outputs()[k]);
      }
  torch::jit::Stack stack{module._ivalue()};
  stack.insert(stack.end(), inputs.begin(), inputs.end());
  try {
    c10::NoGradGuard no_grad;
    torch::jit::Code code(probe, method);
    torch::jit::InterpreterState(code).run(stack);
  } catch (const std::exception& error) {
    fail(where, std::string("example_inputs: running the method on them failed: ") + error.what());
  }
  const std::size_t first = stack.size() - recorded.size();
  // An undefined tensor has no type to record (a traced nn.MultiheadAttention's
  // _native_multi_head_attention returns one for its weights when need_weights is False).
  for (std::size_t i = 0; i < recorded.size(); ++i)
    if (stack[first + i].isTensor() && stack[first + i].toTensor().defined())
      recorded[i]->setType(c10::TensorType::create(stack[first + i].toTensor()));
  for (std::size_t i = 0; i < arguments; ++i)
    if (inputs[i].isTensor() && inputs[i].toTensor().defined() && graph->inputs()[i + 1]->type()->kind() == c10::TypeKind::TensorType)
      graph->inputs()[i + 1]->setType(c10::TensorType::create(inputs[i].toTensor()));
}

/// Whether every tensor `graph`'s top level makes has the complete type of an example run.
inline bool top_level_tensors_typed(const torch::jit::Graph& graph) {
  for (const torch::jit::Node* node : graph.nodes())
    for (const torch::jit::Value* output : node->outputs())
      if (const auto tensor = output->type()->cast<c10::TensorType>(); tensor && !tensor->isComplete()) return false;
  return true;
}

/// Dropout with a constant `train` of false, or a constant `p` of 0, is the identity:
/// `dropout(x, p, False)` and its in-place form (nn.Dropout(inplace=True) in eval) are replaced by
/// x. (An in-place one on a view, EfficientNet's classifier, would otherwise stay and end a region;
/// `F.dropout(attn, p=0.0)`, Swin's attention dropout, trains with p 0 and does nothing either.)
inline void remove_eval_dropout(torch::jit::Block* block) {
  for (auto it = block->nodes().begin(); it != block->nodes().end();) {
    torch::jit::Node* node = *it++;
    for (torch::jit::Block* nested : node->blocks()) remove_eval_dropout(nested);
    const bool dropout = node->kind() == c10::aten::dropout || node->kind() == c10::aten::dropout_ ||
                         node->kind() == c10::aten::feature_dropout || node->kind() == c10::aten::feature_dropout_;
    if (!dropout || node->inputs().size() != 3) continue;
    const c10::optional<c10::IValue> train = torch::jit::toIValue(node->input(2)), p = torch::jit::toIValue(node->input(1));
    const bool none = p && p->isDouble() && p->toDouble() == 0.0;
    if (!none && (!train || !train->isBool() || train->toBool())) continue;
    node->output()->replaceAllUsesWith(node->input(0));
    node->destroy();
  }
}

/// `x in [constants]` of a constant x (aten::__contains__ of two constants): a constant bool.
inline void fold_constant_membership(torch::jit::Block* block) {
  for (torch::jit::Node* node : block->nodes()) {
    for (torch::jit::Block* nested : node->blocks()) fold_constant_membership(nested);
    if (node->kind() != c10::aten::__contains__ || node->inputs().size() != 2) continue;
    const c10::optional<c10::IValue> list = torch::jit::toIValue(node->input(0));
    const c10::optional<c10::IValue> item = torch::jit::toIValue(node->input(1));
    if (!list || !item || !list->isList()) continue;
    const auto& elements = list->toListRef();
    const bool found = std::any_of(elements.begin(), elements.end(), [&](const c10::IValue& e) { return e == *item; });
    torch::jit::WithInsertPoint at(node);
    node->output()->replaceAllUsesWith(node->owningGraph()->insertConstant(found));
  }
}

/// The lookups of a constant key in the dict attribute `read` reads (`name in self.return_layers`,
/// `self.return_layers[name]` of torchvision's IntermediateLayerGetter, its loop over submodules
/// unrolled), as constants: a bool, or a value that is a bool, int, float or str. Left as they are
/// where the key is not a constant or the value not such a number or string.
inline void fold_dict_lookups(torch::jit::Node* read, const c10::impl::GenericDict& dict) {
  const std::vector<torch::jit::Use> uses = read->output()->uses();
  for (const torch::jit::Use& use : uses) {
    torch::jit::Node* lookup = use.user;
    const bool contains = lookup->kind() == c10::aten::__contains__, item = lookup->kind() == c10::aten::__getitem__;
    if ((!contains && !item) || use.offset != 0 || lookup->inputs().size() != 2) continue;
    const c10::optional<c10::IValue> key = torch::jit::toIValue(lookup->input(1));
    if (!key || !(key->isString() || key->isInt() || key->isBool() || key->isDouble())) continue;
    const auto found = dict.find(*key);
    c10::IValue constant;
    if (contains) {
      constant = found != dict.end();
    } else {
      if (found == dict.end()) continue;  // a KeyError when it runs
      const c10::IValue& value = found->value();
      if (!(value.isString() || value.isInt() || value.isBool() || value.isDouble())) continue;
      constant = value;
    }
    torch::jit::WithInsertPoint here(lookup);
    lookup->output()->replaceAllUsesWith(lookup->owningGraph()->insertConstant(constant));
  }
}

/// For a backend that owns its parameters (it lowers for inference, as torch.jit.freeze does): every
/// attribute the method reads from `self` that is a bool, int, float, str or None (`self.training`, a
/// Conv2d's absent bias, a stored hyper-parameter) becomes a constant of its value now, so that
/// the branches on it fold away (BatchNorm's `if self.training:`, dropout's `training` argument).
/// So does a list of ints or floats that the method only reads (Swin's `self.window_size`), and a
/// lookup of a constant key in a dict the method only looks up (fold_dict_lookups).
/// Attributes the method assigns stay reads (attribute_assignments). Tensors stay attribute reads: the regions take them as constants (partition_extract.ipp), the
/// nodes left to TorchScript keep reading them.
inline void fold_scalar_attributes(const torch::jit::Module& module, const std::shared_ptr<torch::jit::Graph>& graph) {
  std::vector<torch::jit::Node*> reads;  // in nested blocks too (MBConv's `if self.use_res_connect:` holds its reads)
  std::shared_ptr<torch::jit::Graph> walked = graph;
  torch::jit::DepthFirstGraphNodeIterator walk(walked);
  for (torch::jit::Node* node = walk.next(); node; node = walk.next())
    if (node->kind() == c10::prim::GetAttr) reads.push_back(node);
  const attribute_assignments assigned(module, *graph);
  // Dict attributes some use of which is not a lookup (`d[k] = v` could change one in place).
  std::set<std::string> changed_dicts;
  for (torch::jit::Node* read : reads)
    if (read->output()->type()->kind() == c10::TypeKind::DictType)
      for (const torch::jit::Use& use : read->output()->uses())
        if (use.user->kind() != c10::aten::__contains__ && use.user->kind() != c10::aten::__getitem__ &&
            use.user->kind() != c10::aten::len)
          changed_dicts.insert(read->s(c10::attr::name));
  for (torch::jit::Node* read : reads) {
    if (assigned.assigns(read)) continue;  // set by the method: its value now is not what it reads
    const std::optional<c10::IValue> value = attribute_value(module, read->output());
    if (!value) continue;
    if (value->isGenericDict()) {
      if (!changed_dicts.count(read->s(c10::attr::name))) fold_dict_lookups(read, value->toGenericDict());
      continue;
    }
    std::optional<c10::IValue> constant;
    if (value->isBool() || value->isInt() || value->isDouble() || value->isString() || value->isNone())
      constant = *value;
    else if (outputs_only_read(read) && value->isIntList())  // Swin's window_size; a copy, not the module's list
      constant = c10::IValue(value->toIntVector());
    else if (outputs_only_read(read) && value->isDoubleList())
      constant = c10::IValue(value->toDoubleVector());
    if (!constant) continue;
    torch::jit::WithInsertPoint here(read);
    read->output()->replaceAllUsesWith(graph->insertConstant(*constant));
  }
}

/// `len(x.size())` and `x.dim()` of a tensor whose rank is known, and `len` of a constant list:
/// constants. Returns how many.
/// `[v for _ in range(n)]` with n known (F.interpolate's `scale_factors`, over the input's spatial
/// dimensions once its rank folds): an empty list construct, then a loop of n iterations whose body
/// only appends a value made before it, becomes the list construct of n copies of it. Returns how
/// many (in any block).
inline std::size_t fold_list_comprehensions(torch::jit::Block* block) {
  std::size_t folded = 0;
  for (auto it = block->nodes().begin(); it != block->nodes().end();) {
    torch::jit::Node* loop = *it;
    ++it;
    for (torch::jit::Block* nested : loop->blocks()) folded += fold_list_comprehensions(nested);
    if (loop->kind() != c10::prim::Loop || loop->inputs().size() != 2 || !loop->outputs().empty()) continue;
    const c10::optional<c10::IValue> trips = torch::jit::toIValue(loop->input(0)), go = torch::jit::toIValue(loop->input(1));
    if (!trips || !trips->isInt() || trips->toInt() < 0 || trips->toInt() > 16 || !go || !go->isBool() || !go->toBool()) continue;
    torch::jit::Block* body = loop->blocks()[0];
    const auto first = body->nodes().begin();
    if (first == body->nodes().end() || std::next(first) != body->nodes().end()) continue;
    torch::jit::Node* append = *first;
    if (append->kind() != c10::aten::append || append->inputs().size() != 2 || append->output()->hasUses()) continue;
    const c10::optional<c10::IValue> again = body->outputs().size() == 1 ? torch::jit::toIValue(body->outputs()[0]) : c10::nullopt;
    if (!again || !again->isBool() || !again->toBool()) continue;
    torch::jit::Value* list = append->input(0);
    torch::jit::Value* element = append->input(1);
    torch::jit::Node* construct = list->node();
    // The list: made empty just before the loop in its block, the element made outside the loop.
    if (construct->kind() != c10::prim::ListConstruct || !construct->inputs().empty() || construct->owningBlock() != block ||
        element->node()->owningBlock() == body)
      continue;
    bool untouched = true;  // nothing reads or writes the list between its construct and the loop
    for (torch::jit::Node* node = construct->next(); node != loop && untouched; node = node->next())
      for (const torch::jit::Value* input : node->inputs()) untouched &= input != list;
    if (!untouched) continue;
    for (std::int64_t k = 0; k < trips->toInt(); ++k) construct->addInput(element);
    loop->destroy();
    ++folded;
  }
  return folded;
}

/// Whether any block of `block` reads a tensor's rank (aten::dim).
inline bool reads_ranks(torch::jit::Block* block) {
  for (torch::jit::Node* node : block->nodes()) {
    if (node->kind() == c10::aten::dim) return true;
    for (torch::jit::Block* nested : node->blocks())
      if (reads_ranks(nested)) return true;
  }
  return false;
}

inline std::size_t fold_known_ranks(const std::shared_ptr<torch::jit::Graph>& graph) {
  std::size_t folded = 0;
  std::vector<torch::jit::Node*> nodes(graph->nodes().begin(), graph->nodes().end());
  // The recorded types are those after the example run: a tensor whose rank an in-place node
  // changes (t.unsqueeze_(0)) had another before it, so its rank is not folded.
  static const std::set<std::string> rank_changing{"aten::unsqueeze_", "aten::squeeze_",   "aten::resize_",
                                                   "aten::resize_as_", "aten::set_",       "aten::as_strided_",
                                                   "aten::swapdims_",  "aten::flatten_"};
  std::vector<torch::jit::Node*> reshaping;
  {
    std::shared_ptr<torch::jit::Graph> walked = graph;
    torch::jit::DepthFirstGraphNodeIterator walk(walked);
    for (torch::jit::Node* node = walk.next(); node; node = walk.next())
      if (rank_changing.count(node->kind().toQualString())) reshaping.push_back(node);
  }
  std::optional<torch::jit::AliasDb> alias;
  if (!reshaping.empty()) alias.emplace(graph);
  const auto reshaped = [&](const torch::jit::Value* tensor) {
    return std::any_of(reshaping.begin(), reshaping.end(),
                       [&](torch::jit::Node* node) { return alias->writesToAlias(node, {tensor}); });
  };
  // The length of `t.size()`, of a slice of it with constant bounds (`t.shape[2:]`, F.interpolate's
  // `len(size) != dim` check of `size=skip.shape[2:]`) or of its copy (`list(...)`).
  const std::function<std::optional<std::int64_t>(const torch::jit::Value*)> sizes_length =
      [&](const torch::jit::Value* list) -> std::optional<std::int64_t> {
    const torch::jit::Node* made = list->node();
    if (made->kind() == c10::aten::size && made->inputs().size() == 1) {
      const auto type = made->input(0)->type()->cast<c10::TensorType>();
      if (!type || !type->dim() || reshaped(made->input(0))) return std::nullopt;
      return static_cast<std::int64_t>(*type->dim());
    }
    if (made->kind() == c10::aten::list && made->inputs().size() == 1) return sizes_length(made->input(0));
    if (made->kind() != c10::aten::slice || made->inputs().size() != 4 || made->input(0)->type()->kind() != c10::TypeKind::ListType)
      return std::nullopt;
    const std::optional<std::int64_t> count = sizes_length(made->input(0));
    if (!count) return std::nullopt;
    const auto bound = [&](std::size_t k, std::int64_t absent) -> std::optional<std::int64_t> {
      if (made->input(k)->type()->kind() == c10::TypeKind::NoneType) return absent;
      const c10::optional<c10::IValue> known = torch::jit::toIValue(made->input(k));
      if (!known || !known->isInt()) return std::nullopt;
      return std::clamp<std::int64_t>(known->toInt() < 0 ? known->toInt() + *count : known->toInt(), 0, *count);
    };
    const auto first = bound(1, 0), last = bound(2, *count), step = bound(3, 1);
    if (!first || !last || step != std::optional<std::int64_t>(1)) return std::nullopt;
    return std::max<std::int64_t>(*last - *first, 0);
  };
  for (torch::jit::Node* node : nodes) {
    const bool dim = node->kind() == c10::aten::dim;
    if (node->kind() == c10::aten::len && node->inputs().size() == 1 && node->input(0)->node()->kind() != c10::aten::size) {
      if (const std::optional<std::int64_t> length = sizes_length(node->input(0))) {
        torch::jit::WithInsertPoint here(node);
        node->output()->replaceAllUsesWith(graph->insertConstant(*length));
        ++folded;
        continue;
      }
    }
    const bool len_of_size = node->kind() == c10::aten::len && node->inputs().size() == 1 &&
                             node->input(0)->node()->kind() == c10::aten::size && node->input(0)->node()->inputs().size() == 1;
    // The length of a constant list (F.adaptive_avg_pool2d's `len(output_size)` of `(1, 1)`:
    // constant propagation leaves nodes that take a list).
    if (node->kind() == c10::aten::len && node->inputs().size() == 1 && node->input(0)->node()->kind() == c10::prim::Constant) {
      const c10::optional<c10::IValue> list = torch::jit::toIValue(node->input(0));
      if (list && list->isList()) {
        torch::jit::WithInsertPoint here(node);
        node->output()->replaceAllUsesWith(graph->insertConstant(static_cast<std::int64_t>(list->toListRef().size())));
        ++folded;
      }
      continue;
    }
    // A format of constants (nn.TransformerEncoder's "... was not TransformerEncoderLayer" message,
    // whose length decides its fast path): constant propagation leaves aten::format.
    if (node->kind() == c10::aten::format && node->outputs().size() == 1) {
      torch::jit::Stack stack;
      for (const torch::jit::Value* input : node->inputs())
        if (const c10::optional<c10::IValue> constant = torch::jit::toIValue(input)) stack.push_back(*constant);
      if (stack.size() != node->inputs().size() || node->inputs().empty()) continue;
      // A vararg operator (runNodeIfInputsAreConstant declines those): its count on top.
      stack.emplace_back(static_cast<std::int64_t>(node->inputs().size()));
      node->getOperation()(stack);
      if (stack.size() != 1 || !stack.front().isString()) continue;
      torch::jit::WithInsertPoint here(node);
      node->output()->replaceAllUsesWith(graph->insertConstant(stack.front()));
      ++folded;
      continue;
    }
    if (!dim && !len_of_size) continue;
    const torch::jit::Value* tensor = dim ? node->input(0) : node->input(0)->node()->input(0);
    const auto type = tensor->type()->cast<c10::TensorType>();
    if (!type || !type->dim() || reshaped(tensor)) continue;
    torch::jit::WithInsertPoint here(node);
    node->output()->replaceAllUsesWith(graph->insertConstant(static_cast<std::int64_t>(*type->dim())));
    ++folded;
  }
  return folded;
}

// A list made by a list construct and grown by appends, read only by cats, pops, indexing and
// len, all at the top level (DenseNet's `features`: each layer cats what the layers before it
// made, then appends its own; a U-Net's `skips`: appended on the way down, popped on the way up):
// each cat reads a list construct of the elements the list holds at that point, each pop and
// index is the element it would give, each len the count, and the appends go. LibTorch's
// RemoveListMutation does not take it: the list is read between its appends, and it leaves pops.
inline void snapshot_appended_lists(torch::jit::Graph& graph) {
  torch::jit::Block* block = graph.block();
  std::vector<torch::jit::Node*> constructs;
  for (torch::jit::Node* node : block->nodes())
    if (node->kind() == c10::prim::ListConstruct) constructs.push_back(node);
  const auto constant_index = [](const torch::jit::Node* node) -> std::optional<std::int64_t> {
    if (node->inputs().size() < 2) return std::int64_t{-1};  // pop()'s default
    const c10::optional<c10::IValue> index = torch::jit::toIValue(node->input(1));
    return index && index->isInt() ? std::optional<std::int64_t>(index->toInt()) : std::nullopt;
  };
  for (torch::jit::Node* construct : constructs) {
    torch::jit::Value* list = construct->output();
    bool changed = false, only = true;
    for (const torch::jit::Use& use : list->uses()) {
      torch::jit::Node* user = use.user;
      const c10::Symbol kind = user->kind();
      const bool append = kind == c10::aten::append && use.offset == 0 && user->output()->uses().empty();
      const bool pop = kind == c10::aten::pop && use.offset == 0 && constant_index(user);
      const bool read = use.offset == 0 && (kind == c10::aten::cat || kind == c10::aten::len ||
                                            (kind == c10::aten::__getitem__ && constant_index(user)));
      only = user->owningBlock() == block && (append || pop || read);
      changed |= append || pop;
      if (!only) break;
    }
    if (!only || !changed) continue;
    // Every pop and index within the list as it then is (else the method raises: left as it is).
    std::vector<torch::jit::Value*> elements(construct->inputs().begin(), construct->inputs().end());
    std::vector<std::pair<torch::jit::Node*, torch::jit::Value*>> read_as;  // a pop's or an index's node, its element
    std::vector<torch::jit::Node*> appends, cats, lens;
    bool valid = true;
    for (torch::jit::Node* node = construct->next(); valid && node != block->return_node(); node = node->next()) {
      if (node->inputs().empty() || node->input(0) != list) continue;
      if (node->kind() == c10::aten::append) {
        elements.push_back(node->input(1));
        appends.push_back(node);
      } else if (node->kind() == c10::aten::pop || node->kind() == c10::aten::__getitem__) {
        std::int64_t at = *constant_index(node);
        if (at < 0) at += static_cast<std::int64_t>(elements.size());
        valid = at >= 0 && at < static_cast<std::int64_t>(elements.size());
        if (!valid) break;
        read_as.emplace_back(node, elements[static_cast<std::size_t>(at)]);
        if (node->kind() == c10::aten::pop) elements.erase(elements.begin() + at);
      } else if (node->kind() == c10::aten::cat) {
        torch::jit::Node* snapshot = graph.create(c10::prim::ListConstruct, elements)->insertBefore(node);
        snapshot->output()->setType(list->type());
        cats.push_back(snapshot);
      } else if (node->kind() == c10::aten::len) {
        torch::jit::WithInsertPoint here(node);
        node->output()->replaceAllUsesWith(graph.insertConstant(static_cast<std::int64_t>(elements.size())));
        lens.push_back(node);
      }
    }
    if (!valid) {  // the snapshots made so far go; the list stays as it is
      for (torch::jit::Node* snapshot : cats) snapshot->destroy();
      continue;
    }
    for (torch::jit::Node* snapshot : cats) snapshot->next()->replaceInput(0, snapshot->output());
    for (auto& [node, element] : read_as) {
      node->output()->replaceAllUsesWith(element);
      node->destroy();
    }
    for (torch::jit::Node* node : lens) node->destroy();
    for (torch::jit::Node* append : appends) append->destroy();
    if (list->uses().empty()) construct->destroy();
  }
}

// The method's graph as partitioning sees it: calls inlined, non-tensor constants and constant
// lists folded, dead code removed (F.relu's `if inplace:` branch disappears, so it does not
// block a region), and in-place operators made out-of-place where nothing can observe the write
// (LibTorch's RemoveTensorMutation, with alias analysis: `hardtanh_` on a conv's fresh output
// becomes `hardtanh`; a write to an input or to a tensor with a view stays) and where the two
// forms compute the same (out_of_place_is_equivalent).
//
// With `attention`, nn.MultiheadAttention's self-attention is spelled as straight-line attention
// (attention_calls.hpp) and its matmul nodes are appended to `matmuls`.
inline std::shared_ptr<torch::jit::Graph> canonical_graph_of(const torch::jit::Module& module, const std::string& method,
                                                             const std::vector<c10::IValue>* example_inputs,
                                                             std::string_view backend, bool fold_attributes, bool attention,
                                                             std::vector<torch::jit::Node*>& matmuls,
                                                             lowering_conditions* conditions) {
  // nn.MultiheadAttention's self-attention calls become straight-line attention behind a rank
  // check that the example ranks fold.
  const bool calls = attention && example_inputs && (has_multihead_attention(module) || has_recurrent_layers(module));
  std::shared_ptr<torch::jit::Graph> graph = calls ? inlined_graph_with_attention(module, method, matmuls) : inlined_graph(module, method);
  forget_traced_types(graph->block());
  if (fold_attributes) fold_scalar_attributes(module, graph);
  if (attention) decompose_native_attention(graph, matmuls);  // a trace's
  torch::jit::ConstantPropagationImmutableTypes(graph);
  fold_constant_lists(graph->block());
  rewrite_traced_convolutions(module, graph->block());
  // Again: what reads the folded lists (`mode not in ["batch", "row"]` of a folded `mode`:
  // constant propagation leaves nodes that take a list, so `in` is folded here).
  fold_constant_membership(graph->block());
  torch::jit::ConstantPropagationImmutableTypes(graph);
  remove_eval_dropout(graph->block());
  if (example_inputs) {
    // With attention calls, again while ranks fold: a folded check (TransformerEncoderLayer's
    // `src.dim() == 3`) brings the branch holding an attention's own rank check to the top level.
    // With conditions, again while conditions are decided: a decided branch brings others to light
    // (TransformerEncoder's layers, each behind the checks of its fast path).
    for (int round = 0; round < 12; ++round) {
      record_example_types(backend, module, method, graph, *example_inputs);
      std::size_t folded = fold_known_ranks(graph);
      const std::size_t decided = conditions ? decide_known_conditions(graph, *example_inputs, fold_attributes, *conditions) : 0;
      if (decided) torch::jit::RemoveListMutation(graph);  // `all(x.is_cuda for x in tensors)`: a list of decided values
      torch::jit::ConstantPropagationImmutableTypes(graph);
      if (const std::size_t lists = fold_list_comprehensions(graph->block())) {  // what constant propagation made known
        folded += lists;
        torch::jit::ConstantPropagationImmutableTypes(graph);
      }
      if (decided) {
        folded += decided;
        for (int again = 0; again < 8; ++again) {  // what the simplified nodes decide in turn
          const std::size_t simplified = remove_uniform_ifs(graph->block());
          if (simplified == 0) break;
          torch::jit::ConstantPropagationImmutableTypes(graph);
        }
      }
      if (calls) torch::jit::LowerSimpleTuples(graph);  // the attention's (output, None), unpacked by its caller
      torch::jit::EliminateDeadCode(graph);
      // A fast path decided (nn.TransformerEncoderLayer's fused layer), spelled as what it computes.
      if (attention) {
        if (const std::size_t layers = decompose_encoder_layers(graph)) {
          decompose_native_attention(graph, matmuls);
          torch::jit::ConstantPropagationImmutableTypes(graph);  // the attention's own switches
          torch::jit::EliminateDeadCode(graph);
          folded += layers;  // another round: what the layer's output decides (the next layer's is_nested)
        }
      }
      // Without attention calls, one round unless conditions were decided or rank reads remain
      // that this round's folds may have brought to the top level (F.interpolate's, behind its
      // checks of the input's rank); with them, while ranks or dtypes fold (each exposes the next
      // of an attention's checks: the masks' ranks, dtypes).
      if (folded == 0 || (decided == 0 && !calls && !reads_ranks(graph->block()))) break;
    }
  }
  // A list built by appends as a list construct per use, where nothing else can see the list
  // (DenseNet's features, then LibTorch's RemoveListMutation): a cat of a list construct is
  // what backends take.
  snapshot_appended_lists(*graph);
  torch::jit::RemoveListMutation(graph);
  torch::jit::RemoveTensorMutation(graph, std::function<bool(torch::jit::Node*)>(out_of_place_is_equivalent));
  make_sole_writes_out_of_place(graph->block());
  torch::jit::EliminateDeadCode(graph);
  // Again where the out-of-place nodes that replaced in-place ones have no recorded type yet (a
  // run of the whole method: 2.4 s a call for ConvNeXt-T beside a busy process).
  if (example_inputs && !top_level_tensors_typed(*graph)) record_example_types(backend, module, method, graph, *example_inputs);
  return graph;
}

TORCH_DELEGATE_INTERNAL std::shared_ptr<torch::jit::Graph> canonical_graph(const torch::jit::Module& module, const std::string& method,
                                                                       const std::vector<c10::IValue>* example_inputs,
                                                                       std::string_view backend, bool fold_attributes,
                                                                       const std::function<bool(const torch::jit::Node*)>& takes,
                                                                       lowering_conditions* conditions) {
  std::vector<torch::jit::Node*> matmuls;
  const bool attention = fold_attributes && takes;
  if (conditions) *conditions = {};
  std::shared_ptr<torch::jit::Graph> graph =
      canonical_graph_of(module, method, example_inputs, backend, fold_attributes, attention, matmuls, conditions);
  // With example inputs the numbers sizes give are known at lowering: each reader a backend takes
  // computes its own (at most as many copies as the graph has nodes).
  const auto own_numbers = [&](std::shared_ptr<torch::jit::Graph> g) {
    if (example_inputs && takes) {
      std::size_t nodes = 0;
      for (auto* n : g->block()->nodes()) (void)n, ++nodes;
      give_numbers_to_their_readers(*g, takes, nodes);
    }
    return g;
  };
  if (matmuls.empty()) return own_numbers(graph);
  // Spelled out only where a backend takes it: where none does, TorchScript would run the plain
  // operators instead of the module's fused path (slower: XNNPACK takes the Linears, not the matmuls).
  std::unordered_set<const torch::jit::Node*> live;  // the passes since may have removed some (an unbatched call's)
  std::shared_ptr<torch::jit::Graph> walked = graph;
  torch::jit::DepthFirstGraphNodeIterator walk(walked);
  for (torch::jit::Node* node = walk.next(); node; node = walk.next()) live.insert(node);
  if (std::any_of(matmuls.begin(), matmuls.end(), [&](const torch::jit::Node* node) { return live.count(node) && takes(node); }))
    return own_numbers(graph);
  matmuls.clear();
  if (conditions) *conditions = {};
  return own_numbers(canonical_graph_of(module, method, example_inputs, backend, fold_attributes, false, matmuls, conditions));
}

}  // namespace torch_delegate::detail
