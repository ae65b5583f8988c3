// backend_with_compiler_demo: LibTorch's demo "compiler" backend written with torch-delegate.
// Preprocess turns each method's graph into a textual instruction list with debug handles;
// compile parses it; execute runs it over whole float tensors, with broadcasting.
#pragma once

// Runtime headers only: the host side (lower.hpp, preprocess.hpp) is for binaries that lower.
#include <torch_delegate/lowered_module.hpp>
#include <torch_delegate/runtime.hpp>

#include <torch/csrc/jit/ir/ir.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

namespace demo {

/// One parsed instruction: `op out a b alpha handle` (add/sub), `const out value`,
/// `ret slot...`.
struct instruction {
  std::string op;                // "add", "sub", "const", "ret"
  std::vector<std::int64_t> slots;
  double value = 0;              // const: the number; add/sub: unused
  std::int64_t debug_handle = -1;
};

/// A compiled method: its instructions and how many value slots they use.
struct program {
  std::int64_t input_count = 0;
  std::int64_t slot_count = 0;
  std::vector<instruction> instructions;
};

// [struct]
struct DemoBackend {
  static constexpr std::string_view name = "backend_with_compiler_demo";

  // [supports]
  /// What this compiler accepts, in one place: preprocess rejects every other node, and
  /// torch_delegate::coverage<DemoBackend> reports on it before lowering.
  static bool supports(const torch::jit::Node* node) {
    static constexpr std::string_view kinds[] = {"prim::Constant", "aten::add", "aten::sub", "prim::TupleConstruct"};
    const std::string_view kind = node->kind().toQualString();
    if (std::find(std::begin(kinds), std::end(kinds), kind) == std::end(kinds)) return false;
    // Its instructions read tensors computed at run time; a number (a scalar operand, alpha)
    // must be a constant; a tensor constant it does not take (partial lowering copies a
    // zero-dimensional one into the region, where the demo's compiler has no instruction for it).
    return std::all_of(node->inputs().begin(), node->inputs().end(), [](const torch::jit::Value* input) {
      const bool constant = input->node()->kind() == c10::prim::Constant;
      return input->type()->kind() == c10::TypeKind::TensorType ? !constant : constant;
    });
  }
  // [supports]

  // host side (demo_backend_preprocess.cpp): graph -> instruction text
  static std::string preprocess(const torch_delegate::method_to_lower& method);

  // runtime side (demo_backend_runtime.hpp)
  static bool is_available() { return true; }
  static program compile(const std::string& payload);
  using execute_signatures = torch_delegate::signatures<at::Tensor(at::Tensor, at::Tensor)>;
  static at::Tensor execute(program& program, const at::Tensor& x, const at::Tensor& h);
  static std::vector<c10::IValue> execute(program& program, torch_delegate::inputs inputs);
};
// [struct]

}  // namespace demo

#include "demo_backend_runtime.hpp"
