// libonednn_backend.so: loading it registers the onednn backend (runtime and preprocess), e.g.
// with torch.ops.load_library or torch_delegate.load_backend("onednn") in Python, and its debug
// query, the operator torch_delegate_onednn::plan_implementations (docs/onednn.md).
#include "onednn_backend.hpp"

#include <torch_delegate/torch_delegate.hpp>

#include <torch/csrc/jit/runtime/custom_operator.h>

TORCH_DELEGATE_REGISTER_BACKEND(onednn_delegate::OnednnBackend);

namespace {

// An operator (not a TorchBind method): it takes any module, a whole lowering or a partial one whose
// regions are lowered children, and Python reaches it as torch.ops.torch_delegate_onednn.
// plan_implementations(module) once the library is loaded.
const torch::jit::RegisterOperators plan_implementations_operator({torch::jit::Operator(
    "torch_delegate_onednn::plan_implementations(Any module) -> ((str, str, str, str, str)[])",
    [](torch::jit::Stack& stack) {
      const c10::IValue module = torch::jit::pop(stack);
      TORCH_CHECK(module.isObject() && module.toObjectRef().type()->is_module(),
                  "torch_delegate_onednn::plan_implementations: expected a module (lowered to onednn, or with regions lowered "
                  "to it), got ", module.type()->repr_str());
      c10::impl::GenericList listed(
          c10::TupleType::create({c10::StringType::get(), c10::StringType::get(), c10::StringType::get(), c10::StringType::get(),
                                  c10::StringType::get()}));
      for (const auto& entry : onednn_delegate::plan_implementations(torch::jit::Module(module.toObject())))
        listed.push_back(c10::ivalue::Tuple::create({entry.method, entry.shapes, entry.step, entry.kind, entry.implementation}));
      torch::jit::push(stack, std::move(listed));
    },
    c10::AliasAnalysisKind::FROM_SCHEMA)});

}  // namespace
