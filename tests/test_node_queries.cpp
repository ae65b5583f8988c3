// Node queries (node_queries.hpp): constants, values known at lowering, sizes from example inputs.
#include "helpers.hpp"

#include <torch_delegate/node_queries.hpp>

TEST_CASE("node queries: constants, values known at lowering, sizes from example inputs") {
  torch::jit::Module module("m");
  module.register_parameter("w", torch::ones({2, 3}), false);
  module.define(R"(
def forward(self, x):
    return torch.add(x, self.w, alpha=2)
)");
  auto graph = module.get_method("forward").graph()->copy();
  const torch::jit::Node* add = nullptr;
  for (const torch::jit::Node* node : graph->nodes())
    if (node->kind() == c10::aten::add) add = node;
  REQUIRE(add != nullptr);
  CHECK(torch_delegate::constant_is(add->input(2), c10::IValue(std::int64_t{2})));
  CHECK(!torch_delegate::constant_is(add->input(2), c10::IValue(std::int64_t{1})));
  CHECK(torch_delegate::constant_of(add->input(2))->toInt() == 2);
  CHECK(!torch_delegate::constant_of(add->input(0)));
  CHECK(!torch_delegate::known_at_lowering(add->input(0)));  // the method's argument
  CHECK(torch_delegate::known_at_lowering(add->input(1)));   // a parameter read
  CHECK(torch_delegate::known_at_lowering(add->input(2)));
  CHECK(!torch_delegate::known_sizes(add->input(0)));  // no example inputs: not known
  CHECK(!torch_delegate::known_sizes(add->input(2)));  // not a tensor
  add->input(0)->setType(c10::TensorType::create(torch::rand({2, 3})));
  CHECK(*torch_delegate::known_sizes(add->input(0)) == std::vector<std::int64_t>{2, 3});
}

TEST_CASE("node queries: an attribute of an object the method makes is not known at lowering") {
  // torchvision's detection models read their batched images as `images.tensors`, an attribute of
  // the ImageList the method builds: not a weight (onednn refused their first convolution as a
  // step on weights alone).
  auto unit = std::make_shared<torch::jit::CompilationUnit>();
  const auto images_type = c10::ClassType::create(c10::QualifiedName("__torch__.ImageList"), unit, /*is_module=*/false);
  images_type->addAttribute("tensors", c10::TensorType::get());
  torch::jit::Module module("m");
  module.register_parameter("w", torch::ones({2}), false);
  torch::jit::Graph graph;
  torch::jit::Value* self = graph.addInput("self")->setType(module.type());
  torch::jit::Value* images = graph.addInput("images")->setType(images_type);
  torch::jit::Value* tensors = graph.insertNode(graph.createGetAttr(images, "tensors"))->output();
  torch::jit::Value* weight = graph.insertNode(graph.createGetAttr(self, "w"))->output();
  CHECK(!torch_delegate::known_at_lowering(tensors));
  CHECK(torch_delegate::known_at_lowering(weight));
}
