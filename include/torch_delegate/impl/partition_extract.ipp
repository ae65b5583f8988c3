// Definitions for detail/partition_extract.hpp: regions as methods of the delegate child.
#pragma once

#include <torch_delegate/detail/partition_extract.hpp>
#include <torch_delegate/detail/canonical_graph.hpp>
#include <torch_delegate/detail/locations.hpp>

#include <torch/csrc/jit/api/function_impl.h>
// DepthFirstGraphNodeIterator: from impl/canonical_graph.ipp (graph_iterator.h has no include guard).

#include <algorithm>
#include <map>
#include <unordered_set>

namespace torch_delegate::detail {

// What a region's input is while lowering, when the backend owns its parameters and the input
// is a parameter, buffer or attribute the method reads from `self` (a prim::GetAttr chain): its
// value, a tensor, None (a Conv2d's absent bias) or an owned_attribute (a number, a string, a list
// of numbers). nullopt for anything else, and for an attribute the method assigns (`assigned`): its
// value now is not what the method reads.
inline std::optional<c10::IValue> owned_value(const torch::jit::Module& module, const torch::jit::Value* value,
                                              const attribute_assignments& assigned) {
  if (assigned.assigns(value->node())) return std::nullopt;
  const std::optional<c10::IValue> read = attribute_value(module, value);
  if (!read) return std::nullopt;
  const c10::IValue& object = *read;
  if (object.isTensor()) return object.toTensor().detach();  // a constant: no autograd history
  if (object.isNone()) return object;
  if (owned_attribute(value)) return object.isList() ? c10::IValue(object.toList().copy()) : object;  // lists are mutable: a copy
  return std::nullopt;
}

TORCH_DELEGATE_INTERNAL owned_inputs take_owned_inputs(const torch::jit::Module& module, region& formed) {
  owned_inputs owned;
  if (formed.inputs.empty()) return owned;
  const attribute_assignments assigned(module, *formed.inputs.front()->owningGraph());
  std::vector<torch::jit::Value*> passed;
  for (torch::jit::Value* input : formed.inputs) {
    if (auto value = owned_value(module, input, assigned))
      owned.emplace(input, std::move(*value));
    else
      passed.push_back(input);
  }
  formed.inputs = std::move(passed);
  return owned;
}

TORCH_DELEGATE_INTERNAL std::shared_ptr<torch::jit::Graph> region_graph(const region& formed, const c10::TypePtr& self_type,
                                                                       const owned_inputs& owned) {
  auto graph = std::make_shared<torch::jit::Graph>();
  graph->addInput("self")->setType(self_type);
  std::unordered_map<torch::jit::Value*, torch::jit::Value*> mapped;
  for (std::size_t i = 0; i < formed.inputs.size(); ++i) {
    // Plain identifiers: an argument named like `x.1` saves but does not load.
    torch::jit::Value* input = graph->addInput("input_" + std::to_string(i));
    input->setType(formed.inputs[i]->type());
    mapped[formed.inputs[i]] = input;
  }
  auto map = [&](torch::jit::Value* value) -> torch::jit::Value* {
    auto found = mapped.find(value);
    if (found != mapped.end()) return found->second;
    // An owned parameter: a constant of its value.
    if (auto known = owned.find(value); known != owned.end()) return mapped[value] = graph->insertConstant(known->second);
    // A constant read by the region: cloned (constants have no inputs).
    torch::jit::Node* constant = graph->insertNode(graph->createClone(value->node(), [](torch::jit::Value* v) { return v; }));
    return mapped[value] = constant->output();
  };
  for (torch::jit::Node* node : formed.nodes) {
    for (torch::jit::Value* input : node->inputs()) map(input);
    torch::jit::Node* copy = graph->insertNode(graph->createClone(node, map));
    for (std::size_t i = 0; i < node->outputs().size(); ++i) mapped[node->output(i)] = copy->output(i);
  }
  if (formed.outputs.size() == 1) {
    graph->registerOutput(mapped.at(formed.outputs[0]));
  } else {
    std::vector<torch::jit::Value*> outputs;
    for (torch::jit::Value* output : formed.outputs) outputs.push_back(mapped.at(output));
    graph->registerOutput(graph->insertNode(graph->createTuple(outputs))->output());
  }
  return graph;
}

TORCH_DELEGATE_INTERNAL void add_region_method(torch::jit::Module& child, const std::string& name, const region& formed,
                                               const owned_inputs& owned) {
  auto function = child._ivalue()->compilation_unit()->create_function(c10::QualifiedName(*child.type()->name(), name),
                                                                       region_graph(formed, child.type(), owned));
  const c10::FunctionSchema& inferred = function->getSchema();
  std::vector<c10::Argument> arguments, returns;
  for (const c10::Argument& a : inferred.arguments()) arguments.push_back(a.cloneWithType(c10::unshapedType(a.type())));
  for (const c10::Argument& r : inferred.returns()) returns.push_back(r.cloneWithType(c10::unshapedType(r.type())));
  function->setSchema(inferred.cloneWithArguments(std::move(arguments)).cloneWithReturns(std::move(returns)));
  child.type()->addMethod(function);
}

TORCH_DELEGATE_INTERNAL void drop_owned_reads(const std::vector<region>& regions, const std::shared_ptr<torch::jit::Graph>& graph,
                                              method_delegation& entry) {
  std::unordered_set<const torch::jit::Node*> in_region;
  for (const region& formed : regions) in_region.insert(formed.nodes.begin(), formed.nodes.end());
  std::vector<const torch::jit::Node*> reads;
  std::shared_ptr<torch::jit::Graph> walked = graph;
  torch::jit::DepthFirstGraphNodeIterator walk(walked);
  for (const torch::jit::Node* node = walk.next(); node; node = walk.next())
    if (node->kind() == c10::prim::GetAttr) reads.push_back(node);
  // Users come after what they read: decide from the last read to the first.
  std::unordered_set<const torch::jit::Node*> owned;
  for (auto read = reads.rbegin(); read != reads.rend(); ++read) {
    const auto& uses = (*read)->output()->uses();
    if (!uses.empty() && std::all_of(uses.begin(), uses.end(), [&](const torch::jit::Use& use) {
          return in_region.count(use.user) || owned.count(use.user);
        }))
      owned.insert(*read);
  }
  std::map<std::string, std::size_t> owned_paths;
  for (const torch::jit::Node* read : owned) {
    const std::string path = attribute_path(read);
    ++owned_paths[path.empty() ? std::string("an attribute") : path];
  }
  std::vector<kept_node> kept;
  for (kept_node& node : entry.kept) {
    if (node.reason == kept_reason::attribute_read) {
      auto found = owned_paths.find(node.detail);
      if (found != owned_paths.end() && found->second > 0) {
        --found->second;
        continue;
      }
    }
    kept.push_back(std::move(node));
  }
  entry.kept = std::move(kept);
}

}  // namespace torch_delegate::detail
