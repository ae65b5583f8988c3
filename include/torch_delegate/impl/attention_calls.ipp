// Definitions for detail/attention_calls.hpp.
#pragma once

#include <torch_delegate/detail/attention_calls.hpp>
#include <torch_delegate/detail/locations.hpp>
#include <torch_delegate/detail/lowering_plan.hpp>

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/jit.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/inliner.h>

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

/// Which of query, key and value an nn.MultiheadAttention call passes as one value: all three
/// (self-attention: one projection of the packed weights, chunked), key and value (attention to a
/// memory, a decoder's: the query's projection and the key's and value's), or none.
enum class attention_form : std::int64_t { self = 0, shared_key_value = 1, separate = 2 };

/// What a call of nn.MultiheadAttention's forward needs to be written as straight-line attention:
/// `forward(self, query, key, value, key_padding_mask, need_weights, attn_mask, average_attn_weights)`
/// on a module in eval mode without bias_k/bias_v, add_zero_attn or separate Q/K/V sizes.
struct attention_call {
  std::int64_t embed = 0, heads = 0;
  bool batch_first = false;
  attention_form form = attention_form::self;
  at::Tensor in_weight, in_bias;  // the packed projections ([3E, E], [3E] or undefined)
};
inline std::optional<attention_call> self_attention_call(const torch::jit::Module& root, const torch::jit::Node* call) {
  if (call->kind() != c10::prim::CallMethod || call->s(c10::attr::name) != "forward" || call->inputs().size() != 8) return std::nullopt;
  if (!is_multihead_attention(call->input(0)->type()->cast<c10::ClassType>())) return std::nullopt;
  const attention_form form = call->input(1) == call->input(2) && call->input(2) == call->input(3) ? attention_form::self
                              : call->input(2) == call->input(3)                                   ? attention_form::shared_key_value
                                                                                                   : attention_form::separate;
  // The masks, need_weights and the ranks are the `if`'s to check (they fold where lowering knows
  // them, as TransformerEncoderLayer's None masks do once its own checks fold).
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
  const at::Tensor in_weight = module.attr("in_proj_weight").toTensor();
  const c10::IValue in_bias = module.attr("in_proj_bias");
  if (in_weight.dim() != 2 || in_weight.size(0) != 3 * embed.toInt() || (in_bias.isTensor() && in_bias.toTensor().numel() != in_weight.size(0)))
    return std::nullopt;
  return attention_call{embed.toInt(), heads.toInt(), flag("batch_first"), form, in_weight,
                        in_bias.isTensor() ? in_bias.toTensor() : at::Tensor()};
}

/// F.multi_head_attention_forward in eval mode, as plain operators, in TorchScript: `applies`
/// says whether a call's arguments are ones it computes for (batched, masks of a rank and dtype
/// it takes), `attend` computes it. The projections come as the packed weights (self-attention)
/// or as the query's, key's and value's parts; a boolean mask becomes an additive one (-inf where
/// True), which a region adds to the scores; the weights are computed only where asked for. With
/// `padding_as_bool` (aten::_native_multi_head_attention's), a key padding mask that is not bool
/// masks where it is not zero.
inline const char* attention_source() {
  return R"TS(
def applies(query: Tensor, key: Tensor, value: Tensor, attn_mask: Optional[Tensor], key_padding_mask: Optional[Tensor]) -> bool:
    if query.dim() != 3 or key.dim() != 3 or value.dim() != 3:
        return False
    if attn_mask is not None:
        if attn_mask.dtype != BOOL and not attn_mask.is_floating_point():
            return False
        if attn_mask.dim() != 2 and attn_mask.dim() != 3:
            return False
    if key_padding_mask is not None:
        if key_padding_mask.dim() != 2:
            return False
        if key_padding_mask.dtype != BOOL and not (key_padding_mask.is_floating_point() and attn_mask is None):
            return False
    return True

def additive(mask: Tensor, like: Tensor) -> Tensor:
    if mask.dtype == BOOL:
        return torch.zeros_like(mask, dtype=like.dtype).masked_fill(mask, float("-inf"))
    return mask

def attend(query: Tensor, key: Tensor, value: Tensor, w_in: Tensor, b_in: Optional[Tensor], w_q: Tensor, b_q: Optional[Tensor],
           w_k: Tensor, b_k: Optional[Tensor], w_v: Tensor, b_v: Optional[Tensor], w_out: Tensor, b_out: Optional[Tensor],
           attn_mask: Optional[Tensor], key_padding_mask: Optional[Tensor], need_weights: bool, average_attn_weights: bool,
           heads: int, size: int, embed: int, batch_first: bool, form: int, scale: float,
           padding_as_bool: bool) -> Tuple[Tensor, Optional[Tensor]]:
    if not batch_first:
        query = query.transpose(0, 1)
        key = key.transpose(0, 1)
        value = value.transpose(0, 1)
    # The masks first, as the additive masks the scores take: they come before the attention's
    # nodes, which then follow one another. Their views read only their own sizes: a number of the
    # attention's (its batch, its length) read outside its region would cut the region.
    mask: Optional[Tensor] = None
    if attn_mask is not None:
        mask = additive(attn_mask, query)
        if mask.dim() == 3:
            mask = mask.view([-1, heads, mask.size(1), mask.size(2)])
        else:
            mask = mask.unsqueeze(0).unsqueeze(0)
    padding: Optional[Tensor] = None
    if key_padding_mask is not None:
        padded = key_padding_mask
        if padding_as_bool and padded.dtype != BOOL:
            padded = padded != 0
        padding = additive(padded, query).unsqueeze(1).unsqueeze(1)
    batch = query.size(0)
    tokens = query.size(1)
    sources = key.size(1)
    if form == 0:
        q, k, v = torch.linear(query, w_in, b_in).chunk(3, -1)
    elif form == 1:
        q = torch.linear(query, w_q, b_q)
        k, v = torch.linear(key, w_k, b_k).chunk(2, -1)
    else:
        q = torch.linear(query, w_q, b_q)
        k = torch.linear(key, w_k, b_k)
        v = torch.linear(value, w_v, b_v)
    q = q.reshape([batch, tokens, heads, size]).transpose(1, 2)
    k = k.reshape([batch, sources, heads, size]).transpose(1, 2)
    v = v.reshape([batch, sources, heads, size]).transpose(1, 2)
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    if mask is not None:
        scores = scores + mask
    if padding is not None:
        scores = scores + padding
    weights = torch.softmax(scores, -1)
    out = torch.matmul(weights, v).transpose(1, 2).reshape([batch, tokens, embed])
    out = torch.linear(out, w_out, b_out)
    if not batch_first:
        out = out.transpose(0, 1)
    if need_weights:
        if average_attn_weights:
            return out, weights.mean(1)
        return out, weights
    return out, None
)TS";
}

/// nn.LSTM's, nn.GRU's and nn.RNN's forward for a batched tensor in eval mode, as one aten::lstm
/// (aten::gru, aten::rnn_tanh, aten::rnn_relu)
/// over the module's weights (what the module's forward calls once its checks pass): `applies`
/// says whether a call's input is one it computes for (batched: a rank lowering folds; an input of
/// other features than the module's is the region's error, as it is the module's);
/// `zero_state` is the initial state of a call that gives none. Dropout between layers does not
/// run in eval mode.
inline const char* recurrent_source() {
  return R"TS(
def recurrent_applies(input: Tensor) -> bool:
    return input.dim() == 3

def zero_state(input: Tensor, layers: int, bidirectional: bool, batch_first: bool, hidden: int) -> Tensor:
    directions = 2 if bidirectional else 1
    batch = input.size(0) if batch_first else input.size(1)
    return input.new_zeros([layers * directions, batch, hidden])

def lstm_layers(input: Tensor, h: Tensor, c: Tensor, weights: List[Tensor], biases: bool, layers: int, bidirectional: bool,
                batch_first: bool) -> Tuple[Tensor, Tuple[Tensor, Tensor]]:
    out, h_n, c_n = torch.lstm(input, [h, c], weights, biases, layers, 0.0, False, bidirectional, batch_first)
    return out, (h_n, c_n)

def gru_layers(input: Tensor, h: Tensor, weights: List[Tensor], biases: bool, layers: int, bidirectional: bool,
               batch_first: bool) -> Tuple[Tensor, Tensor]:
    out, h_n = torch.gru(input, h, weights, biases, layers, 0.0, False, bidirectional, batch_first)
    return out, h_n

def rnn_tanh_layers(input: Tensor, h: Tensor, weights: List[Tensor], biases: bool, layers: int, bidirectional: bool,
                    batch_first: bool) -> Tuple[Tensor, Tensor]:
    out, h_n = torch.rnn_tanh(input, h, weights, biases, layers, 0.0, False, bidirectional, batch_first)
    return out, h_n

def rnn_relu_layers(input: Tensor, h: Tensor, weights: List[Tensor], biases: bool, layers: int, bidirectional: bool,
                    batch_first: bool) -> Tuple[Tensor, Tensor]:
    out, h_n = torch.rnn_relu(input, h, weights, biases, layers, 0.0, False, bidirectional, batch_first)
    return out, h_n
)TS";
}

/// The graph of function `name` of `attention_source()` or `recurrent_source()`, with its calls inlined.
inline std::shared_ptr<torch::jit::Graph> layer_function(const std::string& name) {
  // BOOL: torch.bool's number (a dtype is an int in TorchScript; compiled outside Python, `torch.bool`
  // does not resolve).
  static const std::shared_ptr<torch::jit::CompilationUnit> unit = [] {
    std::string source = std::string(attention_source()) + recurrent_source();
    const std::string number = std::to_string(static_cast<int>(at::kBool));
    for (std::size_t at = source.find("BOOL"); at != std::string::npos; at = source.find("BOOL", at)) source.replace(at, 4, number);
    return torch::jit::compile(source);
  }();
  std::shared_ptr<torch::jit::Graph> graph = torch::jit::toGraphFunction(unit->get_function(name)).graph()->copy();
  torch::jit::Inline(*graph);
  return graph;
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

/// Replaces `call` by `if <taken>: <body> else: <call>`, `taken` inserted at the call by
/// `condition`, `body` (a graph of the call's inputs to its output) inlined as a method of the
/// call's module would be (its nodes in the call's frame: the report's "in encoder.layers.0.self_attn");
/// returns the `if` and the else branch's call, still to be inlined.
inline std::pair<torch::jit::Node*, torch::jit::Node*> guard_call(torch::jit::Node* call, torch::jit::Graph& body,
                                                                  const std::function<torch::jit::Value*(torch::jit::Graph&)>& condition) {
  torch::jit::Graph& graph = *call->owningGraph();
  torch::jit::Node* before = call->prev();
  torch::jit::Node* branch = nullptr;
  {
    torch::jit::WithInsertPoint here(call);
    branch = graph.create(c10::prim::If, {condition(graph)}, 1);
  }
  branch->insertBefore(call);
  branch->output()->setType(call->output()->type());
  const auto same = [](torch::jit::Value* value) { return value; };
  torch::jit::Block* straight = branch->addBlock();
  torch::jit::Node* inlined = straight->appendNode(graph.createClone(call, same));
  auto& forward = *torch::jit::tryToGraphFunction(call->input(0)->type()->expect<c10::ClassType>()->getMethod(call->s(c10::attr::name)));
  torch::jit::Value* result = torch::jit::inlineCallTo(inlined, &forward, &body).at(0);
  if (result->type() != call->output()->type()) {  // (Tensor, Optional[Tensor]) as the call's (Tensor, Tensor?)
    torch::jit::WithInsertPoint at(straight->return_node());
    torch::jit::Node* parts = graph.insertNode(graph.createTupleUnpack(result));
    result = graph.insertNode(graph.createTuple(parts->outputs()))->output();
    result->setType(call->output()->type());
  }
  straight->registerOutput(result);
  put_under(straight->nodes().front(), straight->return_node(), call->callstack());
  torch::jit::Block* other = branch->addBlock();
  torch::jit::Node* kept = other->appendNode(graph.createClone(call, same));
  other->registerOutput(kept->output());
  place_as(before->next(), branch, call);  // the checks
  branch->setSourceRange(call->sourceRange());
  if (call->callstack()) branch->setCallStack(*call->callstack());
  call->output()->replaceAllUsesWith(branch->output());
  call->destroy();
  return {branch, kept};
}

/// Replaces `call` (self_attention_call said yes) by `if applies(query, key, value, attn_mask,
/// key_padding_mask): attend(...) else: <call>` (attention_source()); returns the call of the else
/// branch, still to be inlined.
inline torch::jit::Node* rewrite_attention_call(torch::jit::Node* call, const attention_call& sizes,
                                                std::vector<torch::jit::Node*>& matmuls) {
  // The attention as the body of a method of the module, inlined where the call was, so that its
  // nodes get the call stack of one (the report's "in encoder.layers.encoder_layer_0.self_attention").
  auto body = std::make_shared<torch::jit::Graph>();
  std::vector<torch::jit::Value*> parameters;
  for (const torch::jit::Value* input : call->inputs()) parameters.push_back(body->addInput()->setType(input->type()));
  torch::jit::Value* self = parameters[0];
  torch::jit::Value* out_projection = body->insertGetAttr(self, "out_proj");
  torch::jit::Value* in_weight = body->insertGetAttr(self, "in_proj_weight");
  torch::jit::Value* in_bias = body->insertGetAttr(self, "in_proj_bias");
  // The query's, key's and value's projections, where they are not one: slices of the packed
  // weights, constants of the lowering (the backends take them as they take the module's).
  const std::int64_t e = sizes.embed;
  const auto rows = [&](const at::Tensor& tensor, std::int64_t from, std::int64_t to) -> torch::jit::Value* {
    if (!tensor.defined()) return body->insertConstant(c10::IValue());
    return body->insertConstant(tensor.slice(0, from, to).detach().clone());
  };
  const bool packed = sizes.form == attention_form::self;
  torch::jit::Value* w_q = packed ? in_weight : rows(sizes.in_weight, 0, e);
  torch::jit::Value* b_q = packed ? in_bias : rows(sizes.in_bias, 0, e);
  const std::int64_t k_end = sizes.form == attention_form::shared_key_value ? 3 * e : 2 * e;
  torch::jit::Value* w_k = packed ? in_weight : rows(sizes.in_weight, e, k_end);
  torch::jit::Value* b_k = packed ? in_bias : rows(sizes.in_bias, e, k_end);
  const bool separate = sizes.form == attention_form::separate;
  torch::jit::Value* w_v = separate ? rows(sizes.in_weight, 2 * e, 3 * e) : in_weight;
  torch::jit::Value* b_v = separate ? rows(sizes.in_bias, 2 * e, 3 * e) : in_bias;
  {
    const double scale = 1.0 / std::sqrt(static_cast<double>(sizes.embed / sizes.heads));
    const std::vector<torch::jit::Value*> arguments{
        parameters[1], parameters[2], parameters[3], in_weight, in_bias, w_q, b_q, w_k, b_k, w_v, b_v,
        body->insertGetAttr(out_projection, "weight"), body->insertGetAttr(out_projection, "bias"), parameters[6], parameters[4],
        parameters[5], parameters[7], body->insertConstant(sizes.heads),
        body->insertConstant(sizes.embed / sizes.heads), body->insertConstant(sizes.embed), body->insertConstant(sizes.batch_first),
        body->insertConstant(static_cast<std::int64_t>(sizes.form)), body->insertConstant(scale), body->insertConstant(false)};
    const std::vector<torch::jit::Value*> outputs = torch::jit::insertGraph(*body, *layer_function("attend"), arguments);
    body->registerOutput(outputs.at(0));
  }

  const auto [branch, kept] = guard_call(call, *body, [&](torch::jit::Graph& graph) {
    return torch::jit::insertGraph(graph, *layer_function("applies"), {call->input(1), call->input(2), call->input(3), call->input(6),
                                                                       call->input(4)})
        .at(0);
  });
  const std::function<void(torch::jit::Block*)> collect = [&](torch::jit::Block* block) {
    for (torch::jit::Node* node : block->nodes()) {
      if (node->kind() == c10::aten::matmul) matmuls.push_back(node);
      for (torch::jit::Block* nested : node->blocks()) collect(nested);
    }
  };
  collect(branch->blocks()[0]);
  return kept;
}


/// Whether `type` is torch.nn.LSTM's, torch.nn.GRU's or torch.nn.RNN's scripted class (not a subclass).
inline bool is_recurrent_layer(const c10::ClassTypePtr& type) {
  if (!type || !type->name()) return false;
  const std::string& name = type->name()->name();
  return (name == "LSTM" || name == "GRU" || name == "RNN") && type->name()->qualifiedName().rfind("__torch__.torch.nn.modules.rnn.", 0) == 0;
}

/// What a call of nn.LSTM's or nn.GRU's forward on a batched tensor needs to be one aten::lstm
/// (aten::gru): the module in eval mode, without projections (an LSTM's proj_size).
struct recurrent_call {
  bool lstm = true;
  std::string layers_function;  // recurrent_source()'s: lstm_layers, gru_layers, rnn_tanh_layers, rnn_relu_layers
  std::vector<std::string> weights;  // _flat_weights_names: per layer and direction, weight_ih, weight_hh (, bias_ih, bias_hh)
  bool biases = true, bidirectional = false, batch_first = false;
  std::int64_t layers = 1, hidden = 0, features = 0;
};
inline std::optional<recurrent_call> recurrent_call_of(const torch::jit::Module& root, const torch::jit::Node* call) {
  // forward(self, input, hx=None), the overload for a tensor (not a PackedSequence's).
  if (call->kind() != c10::prim::CallMethod || call->inputs().size() != 3 || !call->input(1)->type()->cast<c10::TensorType>())
    return std::nullopt;
  const std::string& method = call->s(c10::attr::name);  // forward, or an overload's forward__<n>
  if (method != "forward" && method.rfind("forward__", 0) != 0) return std::nullopt;
  const auto type = call->input(0)->type()->cast<c10::ClassType>();
  if (!is_recurrent_layer(type)) return std::nullopt;
  // Initial states: none, or given (a tuple of two for an LSTM); not a value that may be either.
  const c10::TypePtr& states = call->input(2)->type();
  const bool lstm = type->name()->name() == "LSTM";
  if (states->kind() != c10::TypeKind::NoneType &&
      !(lstm ? states->kind() == c10::TypeKind::TupleType && states->containedTypes().size() == 2 : states->kind() == c10::TypeKind::TensorType))
    return std::nullopt;
  const std::optional<c10::IValue> object = attribute_value(root, call->input(0));
  if (!object || !object->isObject()) return std::nullopt;
  const torch::jit::Module module(object->toObject());
  for (const char* name : {"training", "mode", "input_size", "hidden_size", "num_layers", "bias", "batch_first", "bidirectional",
                           "proj_size", "_flat_weights_names"})
    if (!module.hasattr(name)) return std::nullopt;
  const auto flag = [&](const char* name) -> std::optional<bool> {
    const c10::IValue value = module.attr(name);
    return value.isBool() ? std::optional<bool>(value.toBool()) : std::nullopt;
  };
  const auto number = [&](const char* name) -> std::int64_t {
    const c10::IValue value = module.attr(name);
    return value.isInt() ? value.toInt() : -1;
  };
  recurrent_call made;
  made.lstm = lstm;
  const c10::IValue mode = module.attr("mode");
  const std::string& name = type->name()->name();
  if (!mode.isString() || number("proj_size") != 0) return std::nullopt;
  if (name == "RNN" ? mode.toStringRef() != "RNN_TANH" && mode.toStringRef() != "RNN_RELU" : mode.toStringRef() != name) return std::nullopt;
  made.layers_function = name == "LSTM" ? "lstm_layers" : name == "GRU" ? "gru_layers" : mode.toStringRef() == "RNN_TANH" ? "rnn_tanh_layers" : "rnn_relu_layers";
  const std::optional<bool> training = flag("training"), biases = flag("bias"), bidirectional = flag("bidirectional"),
                            batch_first = flag("batch_first");
  if (training != std::optional<bool>(false) || !biases || !bidirectional || !batch_first) return std::nullopt;
  made.biases = *biases;
  made.bidirectional = *bidirectional;
  made.batch_first = *batch_first;
  made.layers = number("num_layers");
  made.hidden = number("hidden_size");
  made.features = number("input_size");
  if (made.layers < 1 || made.hidden < 1 || made.features < 1) return std::nullopt;
  const c10::IValue names = module.attr("_flat_weights_names");
  if (!names.isList()) return std::nullopt;
  for (const c10::IValue& name : names.toListRef()) {
    if (!name.isString() || !module.hasattr(name.toStringRef()) || !module.attr(name.toStringRef()).isTensor()) return std::nullopt;
    made.weights.push_back(name.toStringRef());
  }
  const std::size_t per = made.biases ? 4 : 2, directions = made.bidirectional ? 2 : 1;
  if (made.weights.size() != static_cast<std::size_t>(made.layers) * directions * per) return std::nullopt;
  return made;
}

/// Replaces `call` (recurrent_call_of said yes) by `if recurrent_applies(input):
/// lstm_layers(...) (gru_layers) else: <call>` (recurrent_source()); returns the else branch's call.
inline torch::jit::Node* rewrite_recurrent_call(torch::jit::Node* call, const recurrent_call& layer) {
  auto body = std::make_shared<torch::jit::Graph>();
  std::vector<torch::jit::Value*> parameters;
  for (const torch::jit::Value* input : call->inputs()) parameters.push_back(body->addInput()->setType(input->type()));
  // The initial states: zeros where the call gives none, else the call's (an LSTM's tuple unpacked).
  std::vector<torch::jit::Value*> arguments{parameters[1]};
  torch::jit::Value* given = parameters[2];
  if (given->type()->kind() == c10::TypeKind::NoneType) {
    torch::jit::Value* zeros =
        torch::jit::insertGraph(*body, *layer_function("zero_state"),
                                {parameters[1], body->insertConstant(layer.layers), body->insertConstant(layer.bidirectional),
                                 body->insertConstant(layer.batch_first), body->insertConstant(layer.hidden)})
            .at(0);
    arguments.insert(arguments.end(), layer.lstm ? 2 : 1, zeros);
  } else if (layer.lstm) {
    const auto unpacked = body->insertNode(body->createTupleUnpack(given))->outputs();
    arguments.insert(arguments.end(), unpacked.begin(), unpacked.end());
  } else {
    arguments.push_back(given);
  }
  // The weights after the states: the list and the call it goes to next to each other (the states'
  // numbers and zeros stay in TorchScript; a list of tensors does not leave a region).
  std::vector<torch::jit::Value*> weights;
  for (const std::string& name : layer.weights) weights.push_back(body->insertGetAttr(parameters[0], name));
  torch::jit::Value* list = body->insertNode(body->createList(c10::TensorType::get(), weights))->output();
  arguments.insert(arguments.end(), {list, body->insertConstant(layer.biases), body->insertConstant(layer.layers),
                                     body->insertConstant(layer.bidirectional), body->insertConstant(layer.batch_first)});
  body->registerOutput(torch::jit::insertGraph(*body, *layer_function(layer.layers_function), arguments).at(0));
  return guard_call(call, *body, [&](torch::jit::Graph& graph) {
           return torch::jit::insertGraph(graph, *layer_function("recurrent_applies"), {call->input(1)}).at(0);
         })
      .second;
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

TORCH_DELEGATE_INTERNAL bool has_recurrent_layers(const torch::jit::Module& module) {
  for (const torch::jit::Module& submodule : module.modules())
    if (is_recurrent_layer(submodule.type())) return true;
  return false;
}

TORCH_DELEGATE_INTERNAL std::shared_ptr<torch::jit::Graph> inlined_graph_with_attention(const torch::jit::Module& module,
                                                                                     const std::string& method,
                                                                                     std::vector<torch::jit::Node*>& matmuls) {
  if (!has_multihead_attention(module) && !has_recurrent_layers(module)) return inlined_graph(module, method);
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
      {
        if (const std::optional<attention_call> sizes = self_attention_call(module, call)) {
          plain.push_back(rewrite_attention_call(call, *sizes, matmuls));
          pending.push_back(plain.back());
          continue;
        }
        if (const std::optional<recurrent_call> layer = recurrent_call_of(module, call)) {
          plain.push_back(rewrite_recurrent_call(call, *layer));
          pending.push_back(plain.back());
          continue;
        }
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
    if (node->input(0) != node->input(1) || node->input(1) != node->input(2)) continue;
    const c10::optional<c10::IValue> embed = torch::jit::toIValue(node->input(3)), heads = torch::jit::toIValue(node->input(4));
    if (!embed || !heads || !embed->isInt() || !heads->isInt() || heads->toInt() <= 0 || embed->toInt() % heads->toInt() != 0) continue;
    // A mask: a key padding mask (mask_type 1) of [batch, keys] (the fused encoder layer's
    // src_key_padding_mask), as its recorded type shows; other masks keep the fused op.
    torch::jit::Value* mask = node->input(9);
    if (!is_none(mask)) {
      const c10::optional<c10::IValue> type = torch::jit::toIValue(node->input(12));
      const auto tensor = mask->type()->cast<c10::TensorType>();
      if (!type || !type->isInt() || type->toInt() != 1 || !tensor || !tensor->dim() || *tensor->dim() != 2) continue;
    }
    torch::jit::Node* before = node->prev();
    torch::jit::Value* out = nullptr;
    {
      torch::jit::WithInsertPoint here(node);
      if (is_none(mask)) {
        out = insert_self_attention(*graph, node->input(0), embed->toInt(), heads->toInt(), true,
                                    {node->input(5), node->input(6), node->input(7), node->input(8)}, &matmuls);
      } else {
        torch::jit::Graph& g = *graph;
        torch::jit::Value* none = g.insertConstant(c10::IValue());
        torch::jit::Value* x = node->input(0);
        const std::int64_t e = embed->toInt(), h = heads->toInt();
        const std::vector<torch::jit::Value*> arguments{
            x, x, x, node->input(5), node->input(6), node->input(5), node->input(6), node->input(5), node->input(6), node->input(5),
            node->input(6), node->input(7), node->input(8), none, mask, g.insertConstant(false), g.insertConstant(true),
            g.insertConstant(h), g.insertConstant(e / h), g.insertConstant(e), g.insertConstant(true),
            g.insertConstant(static_cast<std::int64_t>(attention_form::self)), g.insertConstant(1.0 / std::sqrt(static_cast<double>(e / h))),
            g.insertConstant(true)};
        out = torch::jit::insertGraph(g, *layer_function("attend"), arguments).at(0);
        torch::jit::Node* result = out->node();
        if (result->kind() == c10::prim::TupleConstruct) out = result->input(0);
        else out = g.insertNode(g.createTupleUnpack(out))->output(0);
        const std::function<void(torch::jit::Block*)> collect = [&](torch::jit::Block* block) {
          for (torch::jit::Node* n : block->nodes()) {
            if (n->kind() == c10::aten::matmul) matmuls.push_back(n);
            for (torch::jit::Block* nested : n->blocks()) collect(nested);
          }
        };
        for (torch::jit::Node* n = before->next(); n != node; n = n->next()) {
          if (n->kind() == c10::aten::matmul) matmuls.push_back(n);
          for (torch::jit::Block* nested : n->blocks()) collect(nested);
        }
      }
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
    if (node->inputs().size() != 20) continue;
    // With a mask: a key padding mask (mask_type 1), for decompose_native_attention.
    const c10::optional<c10::IValue> mask_type = torch::jit::toIValue(node->input(19));
    if (!is_none(node->input(18)) && (!mask_type || !mask_type->isInt() || mask_type->toInt() != 1)) continue;
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
             node->input(18), g.insertConstant(false), g.insertConstant(true), node->input(19)}, 2));
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
