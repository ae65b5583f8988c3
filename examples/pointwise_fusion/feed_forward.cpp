// A transformer feed-forward block, partially lowered to pointwise_fusion: the two Linears stay
// in TorchScript, the GELU written out as 8 elementwise ops and the residual add and scale are
// fused into one loop each. Prints the delegation report, checks the outputs against the
// original, and saves both modules (for tests/python/test_pointwise.py: stock Python loads and
// runs them).   Usage: feed_forward [fused.pt original.pt]
#include "pointwise_backend.hpp"

#include <torch_delegate/partition.hpp>
#include <torch_delegate/torch_delegate.hpp>

#include <torch/script.h>

#include <iostream>

int main(int argc, char** argv) {
  const std::string fused_path = argc > 1 ? argv[1] : "feed_forward_fused.pt";
  const std::string original_path = argc > 2 ? argv[2] : "feed_forward_original.pt";
  const std::int64_t d_model = 64, hidden = 256;

  // [model]
  torch::jit::Module block("FeedForward");
  block.register_parameter("w1", torch::randn({hidden, d_model}) / 8, /*requires_grad=*/false);
  block.register_parameter("b1", torch::zeros({hidden}), /*requires_grad=*/false);
  block.register_parameter("w2", torch::randn({d_model, hidden}) / 16, /*requires_grad=*/false);
  block.register_parameter("b2", torch::zeros({d_model}), /*requires_grad=*/false);
  block.define(R"(
def forward(self, x):
    h = torch.linear(x, self.w1, self.b1)
    g = 0.5 * h * (1.0 + torch.tanh(0.7978845608028654 * (h + 0.044715 * torch.pow(h, 3.0))))
    return (x + torch.linear(g, self.w2, self.b2)) * 0.5
)");
  // [model]

  // [lower]
  std::cout << "--- output: report ---\n"
            << torch_delegate::delegation_plan<pointwise::PointwiseBackend>(block).to_string() << "--- end output ---\n";
  torch::jit::Module fused = torch_delegate::lower_partially<pointwise::PointwiseBackend>(block);
  fused.save(fused_path);  // a plain TorchScript module: load it where libpointwise_fusion is loaded
  // [lower]
  block.save(original_path);

  const at::Tensor x = torch::randn({128, d_model});
  const at::Tensor expected = block.forward({x}).toTensor();
  const at::Tensor got = torch::jit::load(fused_path).forward({x}).toTensor();
  const bool close = got.allclose(expected, /*rtol=*/1e-5, /*atol=*/1e-6);
  std::cout << (close ? "fused outputs equal the original's (rtol 1e-5, atol 1e-6)" : "DIFFERENT") << '\n';
  return close ? 0 : 1;
}
