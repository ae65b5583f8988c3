// The benchmark's whole-tensor add backend written with torch-delegate: the same work as
// upstream_add_backend.hpp.
#pragma once

#include <torch_delegate/torch_delegate.hpp>

#include <ATen/ATen.h>  // at::add

namespace bench {

// -- torch-delegate ------------------------------------------------------------------------------
struct OurAddBackend {
  static constexpr std::string_view name = "bench_ours_add";
  static std::string preprocess(const torch_delegate::method_to_lower&) { return "add"; }
  static bool is_available() { return true; }
  static std::string compile(const std::string& payload) { return payload; }
  static at::Tensor execute(std::string&, const at::Tensor& x, const at::Tensor& h) { return at::add(x, h); }
};

}  // namespace bench
