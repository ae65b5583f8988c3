// The two backends compared by the benchmark: the same work (a whole-tensor add), written the
// upstream way (upstream_add_backend.hpp) and with torch-delegate (our_add_backend.hpp).
#pragma once

#include "our_add_backend.hpp"
#include "upstream_add_backend.hpp"

#include <torch/script.h>

namespace bench {

inline torch::jit::Module scripted_add(const std::string& class_name = "AddModule") {
  torch::jit::Module module(class_name);
  module.define("def forward(self, x, h):\n    return x + h\n");
  return module;
}

}  // namespace bench
