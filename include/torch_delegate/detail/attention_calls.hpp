// nn.MultiheadAttention as the canonical graph spells it for an inference lowering: its scripted
// forward (the fast path's checks, the slow path's masks and dropout, all behind `if`s that keep
// the attention out of every region) and a trace's aten::_native_multi_head_attention (a fused
// op that no backend takes and that has no derivative) both become straight-line self-attention:
// one Q/K/V linear, the heads split by views, a scaled matmul, softmax, a matmul, the heads
// merged, the output linear. docs/partial-lowering.md, "Attention".
#pragma once

#include <torch_delegate/detail/config.hpp>

#include <torch/csrc/jit/api/module.h>

#include <memory>
#include <string>
#include <vector>

namespace torch_delegate::detail {

/// Whether `module` or one of its submodules is an nn.MultiheadAttention.
TORCH_DELEGATE_INTERNAL bool has_multihead_attention(const torch::jit::Module& module);
/// Whether `module` or one of its submodules is an nn.LSTM, nn.GRU or nn.RNN.
TORCH_DELEGATE_INTERNAL bool has_recurrent_layers(const torch::jit::Module& module);

/// The method's graph with every call inlined, as detail::inlined_graph makes it, except that each
/// call of an nn.MultiheadAttention's forward on a module in eval mode (no bias_k/bias_v, no
/// add_zero_attn, one embedding size) becomes `if <its arguments are ones straight-line attention
/// computes for: batched, masks bool or float of 2 or 3 dims, a key padding mask of 2>:
/// <straight-line attention> else: <the call>`; the ranks and dtypes example inputs give, the
/// conditions decided at lowering and the constants fold the `if` away. Self-attention (query, key
/// and value one value) projects with the packed weights once; attention to a memory (key and value
/// one value) and separate key and value with their parts. Masks become additive, computed before
/// the attention. Each call of an nn.LSTM's, nn.GRU's or nn.RNN's forward on a tensor (eval mode, no
/// projections) becomes `if <its input is batched, of the module's features>: <one aten::lstm
/// (aten::gru) over the module's weights, zeros as the initial states it is not given> else:
/// <the call>`. Other calls are inlined as they are. The attention's matmul nodes are appended to
/// `matmuls`.
TORCH_DELEGATE_INTERNAL std::shared_ptr<torch::jit::Graph> inlined_graph_with_attention(const torch::jit::Module& module,
                                                                                     const std::string& method,
                                                                                     std::vector<torch::jit::Node*>& matmuls);

/// Each aten::_native_multi_head_attention (a trace's, or a fused encoder layer's) in any block that
/// is self-attention without a mask or with a key padding mask (mask_type 1, [batch, keys]), whose
/// weights result nothing reads and whose sizes are constants, becomes the same straight-line
/// attention (its matmul nodes appended to `matmuls`).
TORCH_DELEGATE_INTERNAL void decompose_native_attention(const std::shared_ptr<torch::jit::Graph>& graph,
                                                        std::vector<torch::jit::Node*>& matmuls);

/// Each aten::_transformer_encoder_layer_fwd (nn.TransformerEncoderLayer's fast path, which no
/// backend takes) without a mask or with a key padding mask, whose sizes and switches are constants,
/// becomes what it computes:
/// layer norms, a residual add, an aten::_native_multi_head_attention (for decompose_native_attention),
/// the feed-forward Linears and activation. Returns how many.
TORCH_DELEGATE_INTERNAL std::size_t decompose_encoder_layers(const std::shared_ptr<torch::jit::Graph>& graph);

}  // namespace torch_delegate::detail

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/attention_calls.ipp>
#endif
