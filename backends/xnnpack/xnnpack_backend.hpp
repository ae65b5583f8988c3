// xnnpack: a CPU backend that runs whole CNN bodies as XNNPACK subgraphs (Debian's libxnnpack,
// the 2022 snapshot LibTorch itself links). A region of a partially lowered model becomes one
// XNNPACK runtime: NHWC inside, convolution and BatchNorm folded at preprocess, activations as
// clamps (XNNPACK fuses them into the op before), weights packed once at compile. The regions own
// their parameters (owns_parameters): preprocess reads the weights and stores them as named data.
// Shapes come from example inputs (partition_options::example_inputs): the runtime is built at
// compile, not at the first call. docs/xnnpack.md: ops, layouts, threads, figures, limits.
#pragma once

#include <torch_delegate/backend.hpp>
#include <torch_delegate/preprocess.hpp>

#include <torch/csrc/jit/ir/ir.h>

#include <boost/hana/adapt_struct.hpp>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace xnnpack_delegate {

/// One value of a region's subgraph: its XNNPACK dims (NHWC for 4-d tensors), its external id
/// (-1: internal) and, for a static value (weights), its named-data key.
struct value_record {
  std::vector<std::int64_t> dims;
  std::int64_t external = -1;
  std::string key;
};
/// One node: its op code, its integer operands (value ids first, then parameters: written and read
/// as the op's typed record, xnnpack_internal.hpp), its floats (an output range {min, max}).
struct node_record {
  std::int64_t op = 0;
  std::vector<std::int64_t> ints;
  std::vector<double> floats;
};
/// The payload of a region (a Boost.Hana struct: saved as a tuple of its fields): values, nodes,
/// per output its NCHW sizes (what execute allocates), and how many inputs it takes.
struct region_payload {
  std::vector<value_record> values;
  std::vector<node_record> nodes;
  std::vector<std::vector<std::int64_t>> output_sizes;
  std::int64_t inputs = 0;
};

struct runtime_state;  // xnnpack_internal.hpp: the XNNPACK runtime, the statics it reads, a mutex
struct region_recipe;  // xnnpack_internal.hpp: the payload and weights a re-planned region is built from

/// What compile makes of a region: a built XNNPACK runtime, set up again only when the
/// external pointers change; one call at a time (XNNPACK runtimes are not re-entrant). A region
/// that may be re-planned (other_shapes::replan) keeps its recipe; others drop their weights.
struct compiled_region {
  std::shared_ptr<runtime_state> state;
  std::shared_ptr<const region_recipe> recipe;
};

// [struct]
struct XnnpackBackend {
  static constexpr std::string_view name = "xnnpack";
  /// Regions take the parameters and buffers they read as constants: preprocess folds and packs
  /// them, and they are not passed per call.
  static constexpr bool owns_parameters = true;
  /// Regions take and return 4-d tensors channels-last (NHWC memory): none is converted between
  /// two regions; the report says where conversions are placed.
  static constexpr bool channels_last = true;

  /// The CNN ops it runs (docs/xnnpack.md lists the forms XNNPACK 2022 takes).
  static bool supports(const torch::jit::Node* node);
  /// A region worth a call: one with a convolution, a linear or a pooling op (a lone add stays).
  static torch_delegate::region_verdict accepts_region(std::span<const torch::jit::Node* const> region);

  torch_delegate::preprocess_result<region_payload> preprocess(const torch_delegate::method_to_lower& region);

  bool is_available();
  compiled_region compile(const region_payload& payload, const torch_delegate::compile_context& context);
  std::vector<c10::IValue> execute(compiled_region& region, torch_delegate::inputs inputs);
  /// The region built again for other input sizes (other_shapes::replan): every value's dims
  /// computed from the new inputs', a new XNNPACK runtime from the kept weights.
  compiled_region replan(compiled_region& compiled, const torch_delegate::given_inputs& given);
};
// [struct]

}  // namespace xnnpack_delegate

BOOST_HANA_ADAPT_STRUCT(xnnpack_delegate::value_record, dims, external, key);
BOOST_HANA_ADAPT_STRUCT(xnnpack_delegate::node_record, op, ints, floats);
BOOST_HANA_ADAPT_STRUCT(xnnpack_delegate::region_payload, values, nodes, output_sizes, inputs);
