// compile-cost, runtime side: what a target binary compiles (it loads and runs modules lowered
// elsewhere): the add backend's runtime half, registered, from <torch_delegate/runtime.hpp> only.
#include <torch_delegate/runtime.hpp>

#include <ATen/ATen.h>  // at::add

namespace bench {
struct RuntimeAddBackend {
  static constexpr std::string_view name = "bench_ours_add";
  static bool is_available() { return true; }
  static std::string compile(const std::string& payload) { return payload; }
  static at::Tensor execute(std::string&, const at::Tensor& x, const at::Tensor& h) { return at::add(x, h); }
};
}  // namespace bench

TORCH_DELEGATE_REGISTER_RUNTIME(bench::RuntimeAddBackend);

torch_delegate::lowered_module<bench::RuntimeAddBackend> load_add(const std::string& path) {
  return torch_delegate::load<bench::RuntimeAddBackend>(path);
}
