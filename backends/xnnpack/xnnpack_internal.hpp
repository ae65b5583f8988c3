// What the xnnpack backend's files share (not installed): the payload's op codes and typed node
// records, the preprocess builder and its op table, the per-family emitters (graph -> records) and
// definers (records -> XNNPACK nodes), shape inference for re-planning, and the runtime state.
//
// The backend, by concern (ExecuTorch's backends/xnnpack is the model):
//   support.cpp          the op table: per node kind its support rule and emitter; supports()
//   preprocess.cpp       the builder (value ids, NHWC dims, constants, fused activations); preprocess()
//   convolution.cpp      conv2d (depthwise or not, BatchNorm folded) and linear: emit and define
//   pooling.cpp          max, average and global average pooling: emit and define
//   elementwise.cpp      clamps, add, mul, sigmoid, hardswish, silu, hardsigmoid, BatchNorm alone, softmax
//   shape_ops.cpp        flatten (a static reshape) and dropout (an alias)
//   shape_inference.cpp  every value's dims for new input sizes (other_shapes::replan)
//   runtime.cpp          the XNNPACK runtime: build, compile, replan, execute, is_available
#pragma once

#include "xnnpack_backend.hpp"

#include "toolkit/fused_activation.hpp"
#include "toolkit/op_table.hpp"
#include "toolkit/payload_builder.hpp"
#include "toolkit/payload_record.hpp"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/csrc/jit/ir/ir.h>

#include <boost/hana/adapt_struct.hpp>

#include <pthreadpool.h>
#include <xnnpack.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace xnnpack_delegate {

/// A node's op code in the payload. Saved in lowered modules: never renumber, only append.
enum op : std::int64_t {
  conv2d = 0,
  depthwise_conv2d = 1,
  fully_connected = 2,
  clamp = 3,
  add2 = 4,
  multiply2 = 5,
  sigmoid = 6,
  hardswish = 7,
  max_pool2d = 8,
  avg_pool2d = 9,
  global_avg_pool2d = 10,
  reshape = 11,
  softmax = 12,
};

/// The name of an op code, for diagnostics ("?" for an unknown one).
const char* op_name(std::int64_t code);

// -- typed node records: node_record::ints, field by field (payload_record.hpp) --------------
// Value ids first, then parameters; XNNPACK's argument order (padding top, right, bottom, left).

/// conv2d: a grouped convolution, filter [O, kh, kw, I/groups].
struct convolution_record {
  std::int64_t input = 0, filter = 0, bias = 0, output = 0;
  std::int64_t padding_top = 0, padding_right = 0, padding_bottom = 0, padding_left = 0;
  std::int64_t kernel_height = 1, kernel_width = 1, stride_height = 1, stride_width = 1, dilation_height = 1, dilation_width = 1;
  std::int64_t groups = 1, group_input_channels = 0, group_output_channels = 0;
};
/// depthwise_conv2d: one group per input channel, filter [1, kh, kw, C_out].
struct depthwise_record {
  std::int64_t input = 0, filter = 0, bias = 0, output = 0;
  std::int64_t padding_top = 0, padding_right = 0, padding_bottom = 0, padding_left = 0;
  std::int64_t kernel_height = 1, kernel_width = 1, stride_height = 1, stride_width = 1, dilation_height = 1, dilation_width = 1;
  std::int64_t depth_multiplier = 1, input_channels = 0;
};
/// fully_connected: filter [O, I] over the last dimension, every leading one a batch.
struct fully_connected_record {
  std::int64_t input = 0, filter = 0, bias = 0, output = 0;
};
/// max_pool2d. ceil_mode was appended later: a payload without it says -1 (ceil mode is then
/// read from the padding: bottom or right beyond top or left).
struct max_pooling_record {
  std::int64_t input = 0, output = 0;
  std::int64_t padding_top = 0, padding_right = 0, padding_bottom = 0, padding_left = 0;
  std::int64_t kernel_height = 1, kernel_width = 1, stride_height = 1, stride_width = 1, dilation_height = 1, dilation_width = 1;
  std::int64_t ceil_mode = -1;
  static constexpr std::size_t oldest_fields = 12;
};
/// avg_pool2d (no padding in PyTorch's terms; XNNPACK's is kept for the format). An
/// adaptive_avg_pool2d to a size that divides the input's is one too, with its output size
/// (appended later: 0 in older payloads, whose windows stay as planned): a re-plan computes its
/// windows again from the new input, and a window of one is a copy.
struct average_pooling_record {
  std::int64_t input = 0, output = 0;
  std::int64_t padding_top = 0, padding_right = 0, padding_bottom = 0, padding_left = 0;
  std::int64_t kernel_height = 1, kernel_width = 1, stride_height = 1, stride_width = 1;
  std::int64_t adaptive_height = 0, adaptive_width = 0;
  static constexpr std::size_t oldest_fields = 10;
};
/// clamp, sigmoid, hardswish, softmax, global_avg_pool2d: one value in, one out.
struct unary_record {
  std::int64_t input = 0, output = 0;
};
/// add2, multiply2: numpy broadcasting.
struct binary_record {
  std::int64_t first = 0, second = 0, output = 0;
};
/// reshape: the dims it makes (NHWC order of what it makes; a flatten's are 2-d).
struct reshape_record {
  std::int64_t input = 0, output = 0;
  std::vector<std::int64_t> shape;
};

}  // namespace xnnpack_delegate

BOOST_HANA_ADAPT_STRUCT(xnnpack_delegate::convolution_record, input, filter, bias, output, padding_top, padding_right,
                        padding_bottom, padding_left, kernel_height, kernel_width, stride_height, stride_width, dilation_height,
                        dilation_width, groups, group_input_channels, group_output_channels);
BOOST_HANA_ADAPT_STRUCT(xnnpack_delegate::depthwise_record, input, filter, bias, output, padding_top, padding_right,
                        padding_bottom, padding_left, kernel_height, kernel_width, stride_height, stride_width, dilation_height,
                        dilation_width, depth_multiplier, input_channels);
BOOST_HANA_ADAPT_STRUCT(xnnpack_delegate::fully_connected_record, input, filter, bias, output);
BOOST_HANA_ADAPT_STRUCT(xnnpack_delegate::max_pooling_record, input, output, padding_top, padding_right, padding_bottom,
                        padding_left, kernel_height, kernel_width, stride_height, stride_width, dilation_height, dilation_width,
                        ceil_mode);
BOOST_HANA_ADAPT_STRUCT(xnnpack_delegate::average_pooling_record, input, output, padding_top, padding_right, padding_bottom, padding_left,
                        kernel_height, kernel_width, stride_height, stride_width, adaptive_height, adaptive_width);
BOOST_HANA_ADAPT_STRUCT(xnnpack_delegate::unary_record, input, output);
BOOST_HANA_ADAPT_STRUCT(xnnpack_delegate::binary_record, first, second, output);
BOOST_HANA_ADAPT_STRUCT(xnnpack_delegate::reshape_record, input, output, shape);

namespace xnnpack_delegate {

namespace toolkit = torch_delegate::toolkit;

/// A node's output range: node_record::floats {min, max}, unbounded when it has none.
struct output_range {
  double min = -toolkit::unbounded, max = toolkit::unbounded;
};
inline output_range range_of(const node_record& node) {
  return node.floats.size() >= 2 ? output_range{node.floats[0], node.floats[1]} : output_range{};
}

/// `node`'s ints read as `Record`; a payload too short for it is an error naming the op.
template <class Record>
Record read_node(const node_record& node) {
  auto record = toolkit::read_record<Record>(node.ints);
  TORCH_CHECK(record, "xnnpack: the payload's ", op_name(node.op), " node has ", node.ints.size(), " ints, fewer than its fields (",
              toolkit::field_names<Record>(), "): the payload is corrupted or from a newer build");
  return std::move(*record);
}

/// NHWC dims of an NCHW-sized 4-d tensor; other ranks as they are.
std::vector<std::int64_t> xnn_dims(std::vector<std::int64_t> sizes);
/// NCHW sizes of NHWC dims of a 4-d value; other ranks as they are.
std::vector<std::int64_t> nchw_sizes(std::vector<std::int64_t> dims);

// -- preprocess ----------------------------------------------------------------------------

/// The payload being built for one region: its values (inputs, then outputs, then the rest), its
/// nodes, and through the toolkit's payload_builder the value ids, folded nodes and named data.
class subgraph_builder : public toolkit::payload_builder {
 public:
  explicit subgraph_builder(const torch_delegate::method_to_lower& region);

  std::vector<value_record> values;
  std::vector<node_record> nodes;
  std::unordered_map<const torch::jit::Value*, std::int64_t> output_ids;  // region outputs -> external id
  std::int64_t inputs = 0;

  /// Defines `value`, made by a node: its region-output id, or a new internal one; its dims the
  /// NHWC dims of its recorded sizes.
  std::int64_t define(const torch::jit::Value* value);
  /// A static value (weights) of `dims`, stored once by content as named data.
  std::int64_t constant(const at::Tensor& tensor, std::vector<std::int64_t> dims);
  /// A new internal value with the dims of `like`.
  std::int64_t internal_like(std::int64_t like);
  /// The clamp that alone reads `output`, folded into the node that makes it: its range
  /// (unbounded when there is none), `output` then the clamp's output.
  output_range fused_activation(const torch::jit::Value*& output);
  /// y = x op c for a per-channel or scalar constant c (broadcast against NHWC); `output` the
  /// value it makes, or null for a new internal one. Its id.
  std::int64_t with_constant(std::int64_t x, op code, const at::Tensor& c, const torch::jit::Value* output);

  /// Appends a node of `code` whose ints are `record`'s fields.
  template <class Record>
  void add_node(op code, const Record& record, std::vector<double> floats = {}) {
    nodes.push_back(node_record{code, toolkit::record_ints(record), std::move(floats)});
  }
  /// Appends a node with an output range.
  template <class Record>
  void add_node(op code, const Record& record, output_range range) {
    add_node(code, record, std::vector<double>{range.min, range.max});
  }
};

/// The op table: every node kind the backend runs, its support rule and its emitter (support.cpp).
const toolkit::op_table<subgraph_builder>& xnnpack_ops();

// Emitters, one family per file: what preprocess adds to the payload for a node.
void emit_convolution(subgraph_builder& builder, const torch::jit::Node* node);  // convolution.cpp
void emit_linear(subgraph_builder& builder, const torch::jit::Node* node);
void emit_pooling(subgraph_builder& builder, const torch::jit::Node* node);  // pooling.cpp
void emit_adaptive_pooling(subgraph_builder& builder, const torch::jit::Node* node);
void emit_clamp(subgraph_builder& builder, const torch::jit::Node* node);  // elementwise.cpp
void emit_batch_norm(subgraph_builder& builder, const torch::jit::Node* node);
void emit_binary(subgraph_builder& builder, const torch::jit::Node* node);
void emit_unary(subgraph_builder& builder, const torch::jit::Node* node);
void emit_silu(subgraph_builder& builder, const torch::jit::Node* node);
void emit_hardsigmoid(subgraph_builder& builder, const torch::jit::Node* node);
void emit_softmax(subgraph_builder& builder, const torch::jit::Node* node);
void emit_flatten(subgraph_builder& builder, const torch::jit::Node* node);  // shape_ops.cpp
void emit_dropout(subgraph_builder& builder, const torch::jit::Node* node);

// -- runtime: XNNPACK nodes from records -----------------------------------------------------

/// Throws the XNNPACK call that failed, with its status.
void check(xnn_status status, const char* what);

/// What a definer is given: the subgraph, and per payload value its XNNPACK id.
struct definition_context {
  xnn_subgraph_t subgraph;
  const std::vector<std::uint32_t>& ids;
  std::uint32_t id(std::int64_t value) const { return ids.at(static_cast<std::size_t>(value)); }
};

// Definers, one family per file; each returns false for an op of another family.
bool define_convolution(const definition_context& context, const node_record& node);  // convolution.cpp
bool define_pooling(const definition_context& context, const node_record& node);      // pooling.cpp
bool define_elementwise(const definition_context& context, const node_record& node);  // elementwise.cpp
bool define_shape_op(const definition_context& context, const node_record& node);     // shape_ops.cpp

/// The static values of `node` that XNNPACK packs when the runtime is created (a convolution's
/// or fully-connected's filter and bias): none for other ops (convolution.cpp).
std::vector<std::int64_t> packed_values(const node_record& node);

// -- shape inference (shape_inference.cpp) ----------------------------------------------------

/// Why a region cannot be re-planned for the inputs given (replanned_payload names the region).
struct cannot_replan : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A 2-d window (convolution or pooling) as XNNPACK reads it.
struct window_2d {
  std::int64_t padding_top = 0, padding_right = 0, padding_bottom = 0, padding_left = 0;
  std::int64_t kernel_height = 1, kernel_width = 1, stride_height = 1, stride_width = 1, dilation_height = 1, dilation_width = 1;
};
/// The window of a convolution, depthwise convolution or pooling record.
template <class Record>
window_2d window_of(const Record& r) {
  window_2d w{r.padding_top, r.padding_right, r.padding_bottom, r.padding_left, r.kernel_height, r.kernel_width,
              r.stride_height, r.stride_width};
  if constexpr (requires { r.dilation_height; }) {
    w.dilation_height = r.dilation_height;
    w.dilation_width = r.dilation_width;
  }
  return w;
}

/// NHWC dims after a window over NHWC `input`, with `channels` output channels.
std::vector<std::int64_t> window_output_dims(const std::vector<std::int64_t>& input, const window_2d& window, std::int64_t channels);
/// A max pooling's bottom and right padding for NHWC `input` in ceil mode (PyTorch's output size;
/// max pooling ignores padding, so this is exact); the record as it is otherwise.
max_pooling_record with_ceil_mode_padding(max_pooling_record record, const std::vector<std::int64_t>& input);
/// An adaptive pool's windows for a new input (NHWC dims), from its output size; an avg_pool2d as
/// it is. Throws cannot_replan where the output size does not divide the input's.
average_pooling_record adaptive_windows(average_pooling_record record, const std::vector<std::int64_t>& input);
/// A fully-connected's output dims: the input's, the last one `output_features`.
std::vector<std::int64_t> fully_connected_dims(std::vector<std::int64_t> input, std::int64_t output_features);
/// The dims of a binary op's output: numpy broadcasting.
std::vector<std::int64_t> broadcast_dims(const std::vector<std::int64_t>& first, const std::vector<std::int64_t>& second);
/// A global average pooling's output dims: [N, 1, 1, C].
std::vector<std::int64_t> global_pool_dims(const std::vector<std::int64_t>& input);
/// A flatten's dims for `input`, planned as `planned` for an input of `recorded` dims: the batch
/// dimension follows the input's, the features must stay.
std::vector<std::int64_t> reshape_dims(const std::vector<std::int64_t>& input, const std::vector<std::int64_t>& recorded,
                                       std::vector<std::int64_t> planned);
/// `recorded` for inputs of `given` sizes (NCHW): every value's dims computed from the inputs',
/// node by node as XNNPACK does, the output sizes (NCHW) from those. Throws naming `method`.
region_payload replanned_payload(const region_payload& recorded, const torch_delegate::given_inputs& given,
                                 const std::string& method);

// -- runtime state (runtime.cpp) ---------------------------------------------------------------

struct runtime_state {
  xnn_runtime_t runtime = nullptr;
  std::string method;
  std::vector<at::Tensor> statics;  // the static data the runtime reads at run time (binary ops' constants)
  std::vector<std::uint32_t> external_ids;  // inputs, then outputs
  std::vector<std::vector<std::int64_t>> output_sizes;
  std::size_t inputs = 0;
  std::size_t threads = 1;  // the pool's size (at::get_num_threads() when it was built)
  std::vector<const void*> bound;  // the pointers of the last setup
  // Buffers kept from call to call, so that the pointers stay the same and the runtime is not
  // set up again (xnn_setup_runtime re-runs every operator's setup): per input, the NHWC copy of
  // an input given in another layout; per output, the last output, reused once its caller has
  // dropped it (this state holds the only reference).
  std::vector<at::Tensor> staged;
  std::vector<at::Tensor> outputs;
  std::mutex mutex;
  ~runtime_state() {
    if (runtime) xnn_delete_runtime(runtime);
  }
};

/// What a region that may be re-planned keeps: its payload and its static values' data.
struct region_recipe {
  region_payload payload;
  std::map<std::string, at::Tensor> data;
};

}  // namespace xnnpack_delegate
