// A target binary that only runs: it links the demo backend's runtime (compile, execute,
// is_available) and not its preprocess, and loads a module lowered by another process.
// If anything here needed preprocess, this program would fail to link.
// Usage: runtime_only <lowered module file>   (e.g. the file `demo` saves)
// [runtime-only]
#include <backend_with_compiler_demo/demo_backend.hpp>  // declares preprocess; its .cpp is not linked

#include <torch/script.h>

#include <iostream>

TORCH_DELEGATE_REGISTER_RUNTIME(demo::DemoBackend);

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: runtime_only <lowered module file>\n";
    return 2;
  }
  torch_delegate::keep_freed_memory();  // once, early: freed tensors stay in the heap, not faulted in again
  auto loaded = torch_delegate::load<demo::DemoBackend>(argv[1]);  // compile runs here
  const at::Tensor x = torch::rand({2, 3}), h = torch::rand({3});
  const at::Tensor y = loaded.method<at::Tensor(at::Tensor, at::Tensor)>("accum")(x, h);
  const bool ok = y.allclose(x + h) && loaded.forward({x, h}).toTensor().allclose(x);
  std::cout << (ok ? "runtime_only: ran a module preprocessed elsewhere" : "MISMATCH") << "\n";
  return ok ? 0 : 1;
}
// [runtime-only]
