// Definitions for coverage.hpp.
#pragma once

#include <torch_delegate/coverage.hpp>
#include <torch_delegate/detail/canonical_graph.hpp>
#include <torch_delegate/detail/lowering_plan.hpp>

namespace torch_delegate::detail {

TORCH_DELEGATE_INTERNAL void cover_block(const torch::jit::Block* block, int depth, supports_function supports, method_coverage& out) {
  for (const torch::jit::Node* node : block->nodes()) {
    const debug_location where = locate(node);
    node_coverage entry{where.node_kind, where.file_line, where.source, supports(node), depth};
    (entry.supported ? out.supported : out.unsupported) += 1;
    out.nodes.push_back(std::move(entry));
    for (const torch::jit::Block* nested : node->blocks()) cover_block(nested, depth + 1, supports, out);
  }
}

TORCH_DELEGATE_DECL coverage_report coverage_of(std::string_view backend, const torch::jit::Module& module,
                                   const std::vector<std::string>& methods, supports_function supports) {
  coverage_report report{std::string(backend), module.type()->name()->qualifiedName(), {}};
  for (const std::string& name : methods) {
    schema_of(module, name, {backend, name});
    auto graph = canonical_graph(module, name);  // the graph partial lowering partitions
    method_coverage method{name, {}, 0, 0};
    cover_block(graph->block(), 0, supports, method);
    report.methods.push_back(std::move(method));
  }
  return report;
}

}  // namespace torch_delegate::detail
