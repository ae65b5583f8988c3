// A process that knows nothing of the demo backend at compile time gets it from
// libbackend_with_compiler_demo.so, either dlopen-ed (what torch.ops.load_library does) or
// linked (the loader runs its static initialiser). Then LibTorch's own to_backend path lowers
// a module with it, saves, loads and runs it.
#include <torch_delegate/load.hpp>

#include <torch/csrc/jit/backends/backend_detail.h>
#include <torch/custom_class.h>
#include <torch/script.h>

#include <dlfcn.h>

#include <cstdio>
#include <iostream>
#include <string>

namespace {
const char* const class_name = "__torch__.torch.classes.__backends__.backend_with_compiler_demo";

int fail(const std::string& why) {
  std::cerr << "FAIL: " << why << "\n";
  return 1;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return fail("usage: shared_library_registration dlopen|linked|unregistered <library|model> [path]");
  const std::string mode = argv[1];
  if (mode == "unregistered") {
    // argv[2]: a module lowered to the demo backend, which this process has not registered.
    try {
      torch_delegate::load(argv[2]);
    } catch (const c10::Error& error) {
      const std::string expected = "torch-delegate: backend 'backend_with_compiler_demo': the module '" +
                                   std::string(argv[2]) + "' delegates to this backend, which is not registered in this process.";
      const std::string message = error.what_without_backtrace();
      if (message.rfind(expected, 0) != 0) return fail("unexpected message: " + message);
      std::cout << "ok: " << message << "\n";
      return 0;
    }
    return fail("loading a module of an unregistered backend did not fail");
  }
  if (mode == "dlopen") {
    if (torch::getCustomClass(class_name)) return fail("the backend is registered before the library is loaded");
    if (!dlopen(argv[2], RTLD_NOW | RTLD_GLOBAL)) return fail(std::string("dlopen: ") + dlerror());
  }
  if (!torch::getCustomClass(class_name)) return fail("loading the library did not register the backend");

  torch::jit::Module module("m");
  module.define("def forward(self, x, h):\n    return x + h - h + h\n");
  c10::Dict<c10::IValue, c10::IValue> spec(c10::StringType::get(), c10::AnyType::get());
  spec.insert("forward", c10::Dict<c10::IValue, c10::IValue>(c10::StringType::get(), c10::AnyType::get()));
  auto lowered = torch::jit::detail::codegen_backend_module(
      "backend_with_compiler_demo", module, spec, c10::DictType::create(c10::StringType::get(), c10::AnyType::get()));
  const std::string path = std::string(argc > 3 ? argv[3] : "shared_library_registration.pt") + "." + mode;
  lowered.save(path);
  auto loaded = torch::jit::load(path);
  std::remove(path.c_str());
  const at::Tensor x = torch::rand({2, 3}), h = torch::rand({3});
  if (!loaded.forward({x, h}).toTensor().allclose(x + h)) return fail("wrong result");
  std::cout << "ok: backend registered by the shared library (" << mode << ")\n";
  return 0;
}
