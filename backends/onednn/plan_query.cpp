// The debug query: the primitives of every plan the regions of a module have made (register_onednn.cpp
// registers it as the operator torch_delegate_onednn::plan_implementations).
#include "internal.hpp"

#include <torch_delegate/lowered_module.hpp>

namespace onednn_delegate {

std::vector<plan_implementation> plan_implementations(const torch::jit::Module& module) {
  std::vector<plan_implementation> listed;
  torch_delegate::for_each_compiled<OnednnBackend>(module, [&](const std::string&, const compiled_region& region) {
    region.plans->plans.for_each([&](const plan_key&, const runnable_plan& made) {
      listed.insert(listed.end(), made.plan->implementations.begin(), made.plan->implementations.end());
    });
  });
  return listed;
}

}  // namespace onednn_delegate
