// The skeleton of a preprocess that turns a region's graph into a payload over value ids: the
// map from graph values to ids (an unknown one is rejected naming the node), the region's results
// (never folded away), the nodes folded into the one before them, and constants stored once by
// content as named data (content_key). A backend's builder holds one and adds its own records.
#pragma once

#include "graph.hpp"

#include <torch_delegate/named_data.hpp>
#include <torch_delegate/preprocess.hpp>

#include <ATen/ATen.h>
#include <torch/csrc/jit/ir/ir.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace torch_delegate::toolkit {

/// Ids of a region's values, its folded nodes and its named data, for one preprocess.
class payload_builder {
 public:
  /// `backend` prefixes every diagnostic ("xnnpack: ..."), and every named-data key.
  payload_builder(const torch_delegate::method_to_lower& region, std::string backend)
      : region_(region), backend_(std::move(backend)) {
    for (const torch::jit::Value* result : region_results(*region.graph())) results_.insert(result);
  }

  const torch_delegate::method_to_lower& region() const { return region_; }
  const std::string& backend() const { return backend_; }

  /// The id of a value made before (a region input or a node's output); rejects another.
  std::int64_t id(const torch::jit::Value* value) const {
    auto found = ids_.find(value);
    if (found == ids_.end())
      region_.reject(value->node(), backend_ + ": %" + value->debugName() + " (" + value->type()->annotation_str() +
                                        ") is not a tensor this region makes or takes");
    return found->second;
  }
  /// Whether `value` has an id yet.
  bool has_id(const torch::jit::Value* value) const { return ids_.count(value) != 0; }
  /// Gives `value` the id `id` (a new value, or an alias of another: dropout's output is its input).
  void set_id(const torch::jit::Value* value, std::int64_t id) { ids_[value] = id; }
  /// Gives `value` the next id of a payload numbered 0, 1, 2, ... in definition order (inputs
  /// first); for a backend that keeps no value table of its own.
  std::int64_t next_id(const torch::jit::Value* value) { return ids_[value] = next_id_++; }
  /// The next id for a value the graph does not have (a step's intermediate result: a mean is
  /// a pooling, then a reshape).
  std::int64_t unnamed_id() { return next_id_++; }
  /// How many ids next_id has given.
  std::int64_t ids_given() const { return next_id_; }

  /// Whether `value` is one of the region's results (a fusion must not swallow it).
  bool is_result(const torch::jit::Value* value) const { return results_.count(value) != 0; }
  /// The predicate `is_result` as a callable (read_conv2d, fold_following take one).
  auto result_check() const {
    return [this](const torch::jit::Value* value) { return is_result(value); };
  }

  /// Nodes consumed by the node before them (a BatchNorm in its convolution, an activation).
  std::unordered_set<const torch::jit::Node*>& folded() { return folded_; }
  /// Whether preprocess skips `node`: folded, a constant, or the tuple of the region's results.
  bool skips(const torch::jit::Node* node) const {
    return folded_.count(node) || node->kind() == c10::prim::Constant || is_results_tuple(node);
  }

  /// Stores `tensor` as float, contiguous, 64-byte aligned named data, once per content; its key.
  std::string store_constant(const at::Tensor& tensor) {
    const at::Tensor data = tensor.to(at::kFloat).contiguous();
    std::string key = torch_delegate::content_key(backend_, data);
    named_data_.add_tensor(key, data, 64);
    return key;
  }
  /// The named data stored so far (preprocess_result's third member).
  torch_delegate::named_data_store take_named_data() { return std::move(named_data_); }

  /// Rejects `node` with "<backend>: <what>".
  [[noreturn]] void reject(const torch::jit::Node* node, const std::string& what) const { region_.reject(node, backend_ + ": " + what); }
  /// Rejects `node` as not supported here (supports() accepted it, preprocess has no emitter).
  [[noreturn]] void reject_unsupported(const torch::jit::Node* node) const {
    reject(node, std::string(node->kind().toQualString()) + " is not supported here");
  }

 private:
  const torch_delegate::method_to_lower& region_;
  std::string backend_;
  std::unordered_map<const torch::jit::Value*, std::int64_t> ids_;
  std::int64_t next_id_ = 0;
  std::unordered_set<const torch::jit::Value*> results_;
  std::unordered_set<const torch::jit::Node*> folded_;
  torch_delegate::named_data_store named_data_;
};

}  // namespace torch_delegate::toolkit
