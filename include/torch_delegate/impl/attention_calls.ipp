// Definitions for detail/attention_calls.hpp.
#pragma once

#include <torch_delegate/detail/attention_calls.hpp>
#include <torch_delegate/detail/locations.hpp>
#include <torch_delegate/detail/lowering_plan.hpp>

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

namespace torch_delegate::detail {

/// The projections of one self-attention, as values of the graph it is inserted in.
struct attention_projections {
  torch::jit::Value* in_weight;   // [3E, E]: Q, K and V stacked
  torch::jit::Value* in_bias;     // [3E] or None
  torch::jit::Value* out_weight;  // [E, E]
  torch::jit::Value* out_bias;    // [E] or None
};

/// Inserts, at the graph's insertion point, self-attention of `x` ([batch, tokens, embed], or
/// [tokens, batch, embed] when not `batch_first`) as plain operators, what
/// F.multi_head_attention_forward computes without masks and without dropout:
/// linear(x) -> Q, K, V -> heads (reshape, transpose) -> softmax(Q K^T / sqrt(head size)) V ->
/// heads merged -> linear. Returns the output, in the layout of `x`.
inline torch::jit::Value* insert_self_attention(torch::jit::Graph& graph, torch::jit::Value* x, std::int64_t embed,
                                                std::int64_t heads, bool batch_first, const attention_projections& with,
                                                std::vector<torch::jit::Node*>* matmuls = nullptr) {
  using c10::IValue;
  using torch::jit::Value;
  const auto op = [&](c10::Symbol kind, std::vector<torch::jit::NamedValue> arguments) { return graph.insert(kind, arguments); };
  const auto ints = [&](std::vector<Value*> elements) {
    return graph.insertNode(graph.createList(c10::IntType::get(), elements))->output();
  };
  const auto two = [&](Value* tensor, std::int64_t a, std::int64_t b) { return op(c10::aten::transpose, {tensor, IValue(a), IValue(b)}); };
  if (!batch_first) x = two(x, 0, 1);
  const std::int64_t head_size = embed / heads;
  Value* projected = op(c10::aten::linear, {x, with.in_weight, with.in_bias});
  torch::jit::Node* parts = graph.insertNode(graph.createListUnpack(op(c10::aten::chunk, {projected, IValue(3), IValue(-1)}), 3));
  Value* batch = op(c10::aten::size, {x, IValue(0)});
  Value* tokens = op(c10::aten::size, {x, IValue(1)});
  Value* head_sizes = ints({batch, tokens, graph.insertConstant(heads), graph.insertConstant(head_size)});
  const auto split = [&](Value* part) { return two(op(c10::aten::reshape, {part, head_sizes}), 1, 2); };
  Value* q = split(parts->output(0));
  Value* k = split(parts->output(1));
  Value* v = split(parts->output(2));
  Value* scores = op(c10::aten::mul, {op(c10::aten::matmul, {q, two(k, -2, -1)}), IValue(1.0 / std::sqrt(static_cast<double>(head_size)))});
  Value* weights = op(c10::aten::softmax, {scores, IValue(-1)});
  Value* mixed = op(c10::aten::matmul, {weights, v});
  if (matmuls) matmuls->insert(matmuls->end(), {scores->node()->input(0)->node(), mixed->node()});
  Value* merged = two(mixed, 1, 2);
  Value* context = op(c10::aten::reshape, {merged, ints({batch, tokens, graph.insertConstant(embed)})});
  Value* out = op(c10::aten::linear, {context, with.out_weight, with.out_bias});
  return batch_first ? out : two(out, 0, 1);
}

/// Whether `type` is torch.nn.MultiheadAttention's scripted class (not a subclass: its forward
/// is another).
inline bool is_multihead_attention(const c10::ClassTypePtr& type) {
  if (!type || !type->name()) return false;
  const std::string qualified = type->name()->qualifiedName();
  return type->name()->name() == "MultiheadAttention" && qualified.rfind("__torch__.torch.nn.modules.activation.", 0) == 0;
}

inline bool is_none(const torch::jit::Value* value) { return value->type()->kind() == c10::TypeKind::NoneType; }

inline bool may_be_none(const torch::jit::Value* value) {
  const c10::TypeKind kind = value->type()->kind();
  return kind == c10::TypeKind::NoneType || kind == c10::TypeKind::OptionalType;
}

inline bool is_constant(const torch::jit::Value* value, bool expected) {
  const c10::optional<c10::IValue> known = torch::jit::toIValue(value);
  return known && known->isBool() && known->toBool() == expected;
}

/// The sizes of an nn.MultiheadAttention call that can be straight-line self-attention:
/// `forward(self, query, key, value, key_padding_mask, need_weights, attn_mask, average_attn_weights)`
/// with one value for query, key and value, masks that may be None, need_weights that may be
/// False, on a module in eval mode without bias_k/bias_v, add_zero_attn or separate Q/K/V sizes.
struct attention_call {
  std::int64_t embed = 0, heads = 0;
  bool batch_first = false;
};
inline std::optional<attention_call> self_attention_call(const torch::jit::Module& root, const torch::jit::Node* call) {
  if (call->kind() != c10::prim::CallMethod || call->s(c10::attr::name) != "forward" || call->inputs().size() != 8) return std::nullopt;
  if (!is_multihead_attention(call->input(0)->type()->cast<c10::ClassType>())) return std::nullopt;
  if (call->input(1) != call->input(2) || call->input(2) != call->input(3)) return std::nullopt;
  // Masks and need_weights are checked by the `if` (they fold where they are constants, as
  // TransformerEncoderLayer's None masks are once its own checks fold); here only what cannot
  // pass: a mask that is a tensor for certain, weights asked for for certain.
  if (!may_be_none(call->input(4)) || !may_be_none(call->input(6)) || is_constant(call->input(5), true)) return std::nullopt;
  const std::optional<c10::IValue> object = attribute_value(root, call->input(0));
  if (!object || !object->isObject()) return std::nullopt;
  const torch::jit::Module module(object->toObject());
  for (const char* name : {"training", "batch_first", "bias_k", "bias_v", "add_zero_attn", "_qkv_same_embed_dim", "embed_dim",
                           "num_heads", "in_proj_weight", "in_proj_bias", "out_proj"})
    if (!module.hasattr(name)) return std::nullopt;
  const auto flag = [&](const char* name) {
    const c10::IValue value = module.attr(name);
    return value.isBool() && value.toBool();
  };
  if (flag("training") || flag("add_zero_attn") || !flag("_qkv_same_embed_dim")) return std::nullopt;
  if (!module.attr("bias_k").isNone() || !module.attr("bias_v").isNone() || !module.attr("in_proj_weight").isTensor())
    return std::nullopt;
  const c10::IValue embed = module.attr("embed_dim"), heads = module.attr("num_heads");
  if (!embed.isInt() || !heads.isInt() || heads.toInt() <= 0 || embed.toInt() % heads.toInt() != 0) return std::nullopt;
  return attention_call{embed.toInt(), heads.toInt(), flag("batch_first")};
}

/// `inner`'s frames under `outer`'s: [o1 -> ... -> ok -> i1 -> ...] (outermost first).
inline torch::jit::InlinedCallStackPtr under(const torch::jit::InlinedCallStackPtr& outer, torch::jit::InlinedCallStackPtr inner) {
  std::vector<const torch::jit::InlinedCallStack*> frames;
  for (c10::optional<torch::jit::InlinedCallStackPtr> at = outer; at; at = (*at)->callee()) frames.push_back(at->get());
  for (auto frame = frames.rbegin(); frame != frames.rend(); ++frame)
    inner = c10::make_intrusive<torch::jit::InlinedCallStack>(inner, (*frame)->function(), (*frame)->source_range(),
                                                              (*frame)->module_instance());
  return inner;
}

/// After a call that had a call stack (it came from an earlier inlining: calls are inlined outer
/// first here, where LibTorch's Inline inlines inner first) was inlined, its frames go in front of
/// the new nodes' own, as they would have: the model's line stays the one that called.
inline void put_under(torch::jit::Node* first, torch::jit::Node* end, const c10::optional<torch::jit::InlinedCallStackPtr>& outer) {
  if (!outer) return;
  for (torch::jit::Node* node = first; node != end; node = node->next())
    if (node->callstack()) node->setCallStack(under(*outer, *node->callstack()));
}

/// Gives the nodes between `first` and `end` (not included) and those of their blocks `call`'s
/// source range and call stack, as if inlined from it.
inline void place_as(torch::jit::Node* first, torch::jit::Node* end, const torch::jit::Node* call) {
  for (torch::jit::Node* node = first; node != end; node = node->next()) {
    node->setSourceRange(call->sourceRange());
    if (call->callstack()) node->setCallStack(*call->callstack());
    for (torch::jit::Block* block : node->blocks()) place_as(block->nodes().front(), block->return_node(), call);
  }
}

/// Replaces `call` (self_attention_call said yes) by `if query.dim() == 3 and key_padding_mask is
/// None and attn_mask is None and not need_weights: <attention> else: <call>`; returns the call of
/// the else branch, still to be inlined.
inline torch::jit::Node* rewrite_attention_call(torch::jit::Node* call, const attention_call& sizes,
                                                std::vector<torch::jit::Node*>& matmuls) {
  torch::jit::Graph& graph = *call->owningGraph();
  // The attention as the body of a method of the module, inlined where the call was, so that its
  // nodes get the call stack of one (the report's "in encoder.layers.encoder_layer_0.self_attention").
  auto body = std::make_shared<torch::jit::Graph>();
  std::vector<torch::jit::Value*> parameters;
  for (const torch::jit::Value* input : call->inputs()) parameters.push_back(body->addInput()->setType(input->type()));
  torch::jit::Value* self = parameters[0];
  torch::jit::Value* out_projection = body->insertGetAttr(self, "out_proj");
  const attention_projections with{body->insertGetAttr(self, "in_proj_weight"), body->insertGetAttr(self, "in_proj_bias"),
                                   body->insertGetAttr(out_projection, "weight"), body->insertGetAttr(out_projection, "bias")};
  torch::jit::Value* out = insert_self_attention(*body, parameters[1], sizes.embed, sizes.heads, sizes.batch_first, with);
  body->registerOutput(body->insertNode(body->createTuple({out, body->insertConstant(c10::IValue())}))->output());

  torch::jit::Node* before = call->prev();
  torch::jit::Value* rank = nullptr;
  torch::jit::Node* branch = nullptr;
  {
    torch::jit::WithInsertPoint here(call);
    rank = graph.insert(c10::aten::dim, {call->input(1)});
    torch::jit::Value* none = graph.insertConstant(c10::IValue());
    torch::jit::Value* taken = graph.insert(c10::aten::eq, {rank, c10::IValue(std::int64_t{3})});
    for (torch::jit::Value* also : {graph.insert(c10::aten::__is__, {call->input(4), none}),
                                    graph.insert(c10::aten::__is__, {call->input(6), none}),
                                    graph.insert(c10::aten::__not__, {call->input(5)})})
      taken = graph.insert(c10::aten::__and__, {taken, also});
    branch = graph.create(c10::prim::If, {taken}, 1);
  }
  branch->insertBefore(call);
  branch->output()->setType(call->output()->type());
  const auto same = [](torch::jit::Value* value) { return value; };
  torch::jit::Block* three_d = branch->addBlock();
  torch::jit::Node* inlined = three_d->appendNode(graph.createClone(call, same));
  auto& forward = *torch::jit::tryToGraphFunction(call->input(0)->type()->expect<c10::ClassType>()->getMethod("forward"));
  three_d->registerOutput(torch::jit::inlineCallTo(inlined, &forward, body.get()).at(0));
  put_under(three_d->nodes().front(), three_d->return_node(), call->callstack());
  for (torch::jit::Node* node : three_d->nodes())
    if (node->kind() == c10::aten::matmul) matmuls.push_back(node);
  torch::jit::Block* other = branch->addBlock();
  torch::jit::Node* kept = other->appendNode(graph.createClone(call, same));
  other->registerOutput(kept->output());
  place_as(before->next(), branch, call);  // the rank check
  branch->setSourceRange(call->sourceRange());
  if (call->callstack()) branch->setCallStack(*call->callstack());
  call->output()->replaceAllUsesWith(branch->output());
  call->destroy();
  return kept;
}

inline void collect_calls(torch::jit::Block* block, std::vector<torch::jit::Node*>& calls) {
  for (torch::jit::Node* node : block->nodes()) {
    if (node->kind() == c10::prim::CallMethod || node->kind() == c10::prim::CallFunction) calls.push_back(node);
    for (torch::jit::Block* nested : node->blocks()) collect_calls(nested, calls);
  }
}

TORCH_DELEGATE_INTERNAL bool has_multihead_attention(const torch::jit::Module& module) {
  for (const torch::jit::Module& submodule : module.modules())
    if (is_multihead_attention(submodule.type())) return true;
  return false;
}

TORCH_DELEGATE_INTERNAL std::shared_ptr<torch::jit::Graph> inlined_graph_with_attention(const torch::jit::Module& module,
                                                                                     const std::string& method,
                                                                                     std::vector<torch::jit::Node*>& matmuls) {
  if (!has_multihead_attention(module)) return inlined_graph(module, method);
  std::shared_ptr<torch::jit::Graph> graph = torch::jit::toGraphFunction(module.get_method(method).function()).graph()->copy();
  std::vector<torch::jit::Node*> pending;
  collect_calls(graph->block(), pending);
  std::vector<torch::jit::Node*> plain;  // the else branches' calls: inlined as they are
  while (!pending.empty()) {
    torch::jit::Node* call = pending.back();
    pending.pop_back();
    torch::jit::GraphFunction* callee = nullptr;
    if (call->kind() == c10::prim::CallFunction) {
      if (const auto function = call->input(0)->type()->cast<c10::FunctionType>()) {
        callee = torch::jit::tryToGraphFunction(*function->function());
        if (callee) call->removeInput(0);  // the function constant: the callee's graph takes the rest (as Inline does)
      }
    } else if (const auto type = call->input(0)->type()->cast<c10::ClassType>()) {
      if (std::find(plain.begin(), plain.end(), call) == plain.end())
        if (const std::optional<attention_call> sizes = self_attention_call(module, call)) {
          plain.push_back(rewrite_attention_call(call, *sizes, matmuls));
          pending.push_back(plain.back());
          continue;
        }
      callee = torch::jit::tryToGraphFunction(type->getMethod(call->s(c10::attr::name)));
    }
    if (!callee) continue;
    torch::jit::Node* before = call->prev();
    torch::jit::Node* after = call->next();
    const c10::optional<torch::jit::InlinedCallStackPtr> outer = call->callstack();
    torch::jit::inlineCallTo(call, callee, callee->graph().get());
    put_under(before->next(), after, outer);
    for (torch::jit::Node* node = before->next(); node != after; node = node->next()) {
      if (node->kind() == c10::prim::CallMethod || node->kind() == c10::prim::CallFunction) pending.push_back(node);
      for (torch::jit::Block* nested : node->blocks()) collect_calls(nested, pending);
    }
  }
  torch::jit::EliminateDeadCode(graph);
  return graph;
}

TORCH_DELEGATE_INTERNAL void decompose_native_attention(const std::shared_ptr<torch::jit::Graph>& graph,
                                                        std::vector<torch::jit::Node*>& matmuls) {
  std::vector<torch::jit::Node*> found;
  std::vector<torch::jit::Block*> blocks{graph->block()};
  while (!blocks.empty()) {
    torch::jit::Block* block = blocks.back();
    blocks.pop_back();
    for (torch::jit::Node* node : block->nodes()) {
      if (node->kind() == c10::aten::_native_multi_head_attention) found.push_back(node);
      for (torch::jit::Block* nested : node->blocks()) blocks.push_back(nested);
    }
  }
  for (torch::jit::Node* node : found) {
    // (query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight, proj_bias, mask,
    //  need_weights, average_attn_weights, mask_type) -> (output, weights)
    if (node->inputs().size() != 13 || node->outputs().size() != 2 || node->output(1)->hasUses()) continue;
    if (node->input(0) != node->input(1) || node->input(1) != node->input(2) || !is_none(node->input(9))) continue;
    const c10::optional<c10::IValue> embed = torch::jit::toIValue(node->input(3)), heads = torch::jit::toIValue(node->input(4));
    if (!embed || !heads || !embed->isInt() || !heads->isInt() || heads->toInt() <= 0 || embed->toInt() % heads->toInt() != 0) continue;
    torch::jit::Node* before = node->prev();
    torch::jit::Value* out = nullptr;
    {
      torch::jit::WithInsertPoint here(node);
      out = insert_self_attention(*graph, node->input(0), embed->toInt(), heads->toInt(), true,
                                  {node->input(5), node->input(6), node->input(7), node->input(8)}, &matmuls);
    }
    place_as(before->next(), node, node);
    node->output(0)->replaceAllUsesWith(out);
    node->destroy();
  }
}

TORCH_DELEGATE_INTERNAL std::size_t decompose_encoder_layers(const std::shared_ptr<torch::jit::Graph>& graph) {
  const c10::Symbol layer = c10::Symbol::fromQualString("aten::_transformer_encoder_layer_fwd");
  std::vector<torch::jit::Node*> found;
  std::vector<torch::jit::Block*> blocks{graph->block()};
  while (!blocks.empty()) {
    torch::jit::Block* block = blocks.back();
    blocks.pop_back();
    for (torch::jit::Node* node : block->nodes()) {
      if (node->kind() == layer) found.push_back(node);
      for (torch::jit::Block* nested : node->blocks()) blocks.push_back(nested);
    }
  }
  std::size_t done = 0;
  for (torch::jit::Node* node : found) {
    // (src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu, norm_first,
    //  eps, norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2, ffn_weight_1, ffn_bias_1,
    //  ffn_weight_2, ffn_bias_2, mask, mask_type) -> Tensor
    if (node->inputs().size() != 20 || !is_none(node->input(18))) continue;
    const c10::optional<c10::IValue> embed = torch::jit::toIValue(node->input(1)), gelu = torch::jit::toIValue(node->input(7)),
                                     norm_first = torch::jit::toIValue(node->input(8)), eps = torch::jit::toIValue(node->input(9));
    if (!embed || !embed->isInt() || !gelu || !gelu->isBool() || !norm_first || !norm_first->isBool() || !eps || !eps->isDouble())
      continue;
    torch::jit::Node* before = node->prev();
    torch::jit::Value* out = nullptr;
    {
      torch::jit::WithInsertPoint here(node);
      torch::jit::Graph& g = *graph;
      torch::jit::Value* normalized = g.insertConstant(std::vector<std::int64_t>{embed->toInt()});
      const auto norm = [&](torch::jit::Value* x, std::size_t weight) {
        return g.insert(c10::aten::layer_norm, {x, normalized, node->input(weight), node->input(weight + 1), node->input(9), false});
      };
      const auto attend = [&](torch::jit::Value* x) {
        torch::jit::Node* attention = g.insertNode(g.create(c10::aten::_native_multi_head_attention,
            {x, x, x, node->input(1), node->input(2), node->input(3), node->input(4), node->input(5), node->input(6),
             g.insertConstant(c10::IValue()), g.insertConstant(false), g.insertConstant(true), g.insertConstant(c10::IValue())}, 2));
        attention->output(0)->setType(c10::TensorType::get());
        attention->output(1)->setType(c10::TensorType::get());
        return attention->output(0);
      };
      const auto feed_forward = [&](torch::jit::Value* x) {
        torch::jit::Value* hidden = g.insert(c10::aten::linear, {x, node->input(14), node->input(15)});
        hidden = gelu->toBool() ? g.insert(c10::aten::gelu, {hidden}) : g.insert(c10::aten::relu, {hidden});
        return g.insert(c10::aten::linear, {hidden, node->input(16), node->input(17)});
      };
      torch::jit::Value* src = node->input(0);
      if (norm_first->toBool()) {
        torch::jit::Value* x = g.insert(c10::aten::add, {src, attend(norm(src, 10))});
        out = g.insert(c10::aten::add, {x, feed_forward(norm(x, 12))});
      } else {
        torch::jit::Value* x = norm(g.insert(c10::aten::add, {src, attend(src)}), 10);
        out = norm(g.insert(c10::aten::add, {x, feed_forward(x)}), 12);
      }
    }
    place_as(before->next(), node, node);
    out->setType(node->output()->type());
    node->output()->replaceAllUsesWith(out);
    node->destroy();
    ++done;
  }
  return done;
}

}  // namespace torch_delegate::detail
