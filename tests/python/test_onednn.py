"""The onednn backend (backends/onednn) through torch_delegate.lower(..., partial=True): each op
against eager over random parameters (scripted and frozen), torchvision's ResNets end to end in
one region, what it leaves in TorchScript and why, save/load in stock Python and the lite
interpreter, fallback where it is unavailable, and a priority list with xnnpack where a replayed
plan sends a region xnnpack lost to onednn.

Environment: PYTHONPATH (the built package), TD_ONEDNN_LIBRARY (libonednn_backend.so),
TD_XNNPACK_LIBRARY (optional), TD_WORKDIR (a scratch directory).
"""
import io
import os
import subprocess
import sys
import unittest
from typing import List

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_delegate

from torchvision_models import randomized, selected

LIBRARY = os.environ["TD_ONEDNN_LIBRARY"]
WORKDIR = os.environ.get("TD_WORKDIR", ".")
torch.ops.load_library(LIBRARY)
torch.set_num_threads(2)


def lowered(model, x, frozen=False, backends="onednn", **knobs):
    scripted = torch.jit.script(model.eval())
    if frozen:
        scripted = torch.jit.freeze(scripted)
    return torch_delegate.lower(scripted, backends, partial=True, example_inputs=(x,), **knobs)


def kept(module):
    return {node.kind: node.reason for method in torch_delegate.report(module).methods for node in method.kept}


def regions(module):
    return torch_delegate.report(module).methods[0].regions


def relative_error(got, want):
    return ((got - want).abs().max() / want.abs().max().clamp_min(1e-12)).item()


class Residual(nn.Module):
    """conv-BN-relu, conv-BN, the sum with the block's input (or a strided 1x1 projection), relu."""

    def __init__(self, channels, stride=1, groups=1, dilation=1):
        super().__init__()
        out = channels * stride
        self.conv1 = nn.Conv2d(channels, out, 3, stride, padding=dilation, dilation=dilation, groups=groups, bias=False)
        self.bn1 = nn.BatchNorm2d(out)
        self.conv2 = nn.Conv2d(out, out, 3, 1, 1, bias=True)
        self.bn2 = nn.BatchNorm2d(out)
        self.project = nn.Conv2d(channels, out, 1, stride) if stride > 1 else None

    def forward(self, x):
        y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        shortcut = self.project(x) if self.project is not None else x
        return torch.relu(y + shortcut)


# torchvision CNNs one region each: a smoke set in `meson test`, every one in the sweep
# (torchvision_models.py).
ONE_REGION_CNNS = selected(["regnet_y_400mf", "efficientnet_b0", "mobilenet_v2", "mobilenet_v3_small", "squeezenet1_0",
                            "convnext_tiny", "alexnet", "vgg11_bn"], smoke=["regnet_y_400mf", "mobilenet_v3_small", "alexnet"])
RESNETS = selected(["resnet18", "resnet50"], smoke=["resnet18"])
# Video classifiers: 3-d convolutions, poolings and batch norms; S3D's cats of four branches and its mean.
VIDEO = selected(["r3d_18", "mc3_18", "r2plus1d_18", "s3d"], smoke=["r2plus1d_18"])


class Ops(unittest.TestCase):
    def check(self, model, x, regions_expected=1):
        with torch.no_grad():
            want = model(x)
        for frozen in (False, True):
            with self.subTest(frozen=frozen):
                low = lowered(model, x, frozen=frozen)
                given = x.clone()
                with torch.no_grad():
                    got = low(given)
                    again = low(given)
                self.assertLess(relative_error(got, want), 1e-4)
                self.assertLess(relative_error(again, want), 1e-4)
                self.assertTrue(torch.equal(given, x), "the region wrote into its input")
                self.assertEqual(len(regions(low)), regions_expected, kept(low))
                self.assertTrue(all(r.backend == "onednn" for r in regions(low)))

    def test_residual_blocks_over_random_parameters(self):
        torch.manual_seed(0)
        for stride, groups, dilation in [(1, 1, 1), (2, 1, 1), (1, 4, 1), (1, 1, 2)]:
            with self.subTest(stride=stride, groups=groups, dilation=dilation):
                model = randomized(nn.Sequential(Residual(8, stride, groups, dilation), Residual(8 * stride)))
                self.check(model, torch.randn(2, 8, 15, 17))

    def test_a_grouped_convolution_then_an_add_and_an_activation(self):
        # The add's first operand is the grouped convolution's, in its 4- or 8-channel blocks: on
        # AVX-512, oneDNN 2.6's binary got the fused ReLU wrong there and wrote past its result.
        class Block(nn.Module):
            def __init__(self, channels, groups, act):
                super().__init__()
                self.stem = nn.Sequential(nn.Conv2d(3, channels, 3, 2, 1), nn.BatchNorm2d(channels), nn.ReLU())
                self.grouped = nn.Sequential(nn.Conv2d(channels, channels, 3, 1, 1, groups=groups), nn.BatchNorm2d(channels))
                self.act = act

            def forward(self, x):
                x = self.stem(x)
                return F.adaptive_avg_pool2d(self.act(self.grouped(x) + x), 1)

        torch.manual_seed(3)
        for channels, groups in [(8, 2), (12, 3), (24, 3), (64, 16)]:
            for act in (nn.ReLU(), nn.Hardswish()):
                with self.subTest(channels=channels, groups=groups, act=type(act).__name__):
                    self.check(randomized(Block(channels, groups, act)), torch.rand(1, 3, 32, 32))

    def test_an_add_in_place_into_a_region_input_leaves_the_callers_tensor(self):
        # x is read once, by the add: the sum goes in place into the region's oneDNN copy of x.
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(4, 4, 3, padding=1)

            def forward(self, x, y):
                return x + self.conv(y)

        torch.manual_seed(5)
        model = Model().eval()
        x, y = torch.rand(1, 4, 8, 8), torch.rand(1, 4, 8, 8)
        low = torch_delegate.lower(torch.jit.script(model), "onednn", partial=True, example_inputs=(x, y))
        self.assertEqual([sorted(r.kinds) for r in regions(low)], [["aten::add", "aten::conv2d"]])
        given = x.clone()
        with torch.no_grad():
            self.assertLess(relative_error(low(given, y), model(x, y)), 1e-4)
            self.assertLess(relative_error(low(given, y), model(x, y)), 1e-4)
        self.assertTrue(torch.equal(given, x), "the add wrote into the caller's tensor")

    def test_stem_pooling_and_head(self):
        torch.manual_seed(1)
        model = randomized(nn.Sequential(nn.Conv2d(3, 16, 7, 2, 3, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
                                         nn.MaxPool2d(3, 2, 1), nn.Conv2d(16, 16, 1), nn.MaxPool2d(2, ceil_mode=True),
                                         nn.AdaptiveAvgPool2d(1)))
        self.check(model, torch.rand(1, 3, 45, 45))

    def test_activations_squeeze_excitation_and_cat(self):
        # Each activation after a convolution (folded into it as a post-op) and on its own, a
        # squeeze-excitation (its scale broadcast over H and W, on either side of the mul), a
        # relu'd convolution plus the block's input (two post-ops), and a cat of two branches.
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.convs = nn.ModuleList([nn.Conv2d(8, 8, 3, padding=1, groups=g) for g in (1, 8, 2, 1, 1, 1)])
                self.reduce = nn.Conv2d(8, 2, 1)
                self.expand = nn.Conv2d(2, 8, 1)
                self.left = nn.Conv2d(8, 4, 1)
                self.right = nn.Conv2d(8, 6, 3, padding=1)

            def forward(self, x):
                c = self.convs
                y = nn.functional.silu(c[0](x))
                y = nn.functional.hardswish(c[1](y))
                y = nn.functional.hardsigmoid(c[2](y))
                y = nn.functional.relu6(c[3](y) * 3.0)  # times a number, then hardtanh: both post-ops
                y = torch.clamp(torch.sigmoid(c[4](y)), 0.2, 0.7)
                scale = torch.sigmoid(self.expand(torch.relu(self.reduce(nn.functional.adaptive_avg_pool2d(y, 1)))))
                y = y * scale
                y = scale * torch.relu(y)
                y = torch.relu(c[5](y)) + x
                return torch.cat([torch.relu(self.left(y)), torch.relu(self.right(y))], 1)

        torch.manual_seed(6)
        model = Model().eval()
        x = torch.randn(2, 8, 9, 11)
        with torch.no_grad():
            want = model(x)
        low = lowered(model, x)
        with torch.no_grad():
            self.assertLess(relative_error(low(x), want), 1e-4)
            self.assertLess(relative_error(low(x), want), 1e-4)
        self.assertNotIn("aten::mul", kept(low))
        kinds = set().union(*(r.kinds for r in regions(low)))
        for kind in ("aten::conv2d", "aten::silu", "aten::hardswish", "aten::hardsigmoid", "aten::relu6", "aten::clamp",
                     "aten::sigmoid", "aten::relu", "aten::adaptive_avg_pool2d", "aten::mul", "aten::cat", "aten::add"):
            self.assertIn(kind, kinds)

    def test_transformer_ops_and_a_convnext_block(self):
        # A ConvNeXt block as torchvision writes it: a depthwise convolution, Permute (dims read from
        # a module attribute: the region holds them as a constant), layer_norm, linear, GELU (a
        # post-op of the linear), linear, the permute back, a layer scale (a parameter) and the
        # residual add; then flatten and a linear head. And a transformer's MLP on 3-d
        # tokens with its residual add, for both GELUs.
        import torchvision
        torch.manual_seed(8)
        block = torchvision.models.convnext.CNBlock(16, layer_scale=0.5, stochastic_depth_prob=0.0)
        block.layer_scale.data.uniform_(0.5, 1.5)
        model = nn.Sequential(block, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2), nn.Linear(16, 5)).eval()
        x = torch.randn(2, 16, 9, 10)
        low = lowered(model, x)
        with torch.no_grad():
            self.assertLess(relative_error(low(x), model(x)), 1e-4)
        self.assertEqual(len(regions(low)), 1, kept(low))
        self.assertLessEqual(set(kept(low)), {"prim::GetAttr"})
        kinds = set(regions(low)[0].kinds)
        for kind in ("aten::conv2d", "aten::permute", "aten::layer_norm", "aten::linear", "aten::gelu", "aten::mul", "aten::add",
                     "aten::flatten"):
            self.assertIn(kind, kinds)

        class Mlp(nn.Module):
            def __init__(self, approximate):
                super().__init__()
                self.norm, self.up, self.down = nn.LayerNorm(12, eps=1e-6), nn.Linear(12, 48), nn.Linear(48, 12)
                self.approximate = approximate

            def forward(self, x):
                return x + self.down(nn.functional.gelu(self.up(self.norm(x)), approximate=self.approximate))

        for approximate in ("none", "tanh"):
            with self.subTest(approximate=approximate):
                mlp = Mlp(approximate).eval()
                mlp.norm.weight.data.uniform_(0.5, 1.5)
                mlp.norm.bias.data.uniform_(-0.5, 0.5)
                tokens = torch.randn(1, 7, 12)
                low = lowered(mlp, tokens)
                with torch.no_grad():
                    self.assertLess(relative_error(low(tokens), mlp(tokens)), 1e-4)
                self.assertEqual(len(regions(low)), 1, kept(low))

    def test_another_input_shape_is_planned_again(self):
        # Without example inputs (no input spec), each new input shape gets its own oneDNN plan.
        torch.manual_seed(7)
        model = randomized(nn.Sequential(nn.Conv2d(8, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                                         nn.MaxPool2d(3, 2, ceil_mode=True), nn.Conv2d(8, 4, 1), nn.AdaptiveAvgPool2d(1)))
        low = torch_delegate.lower(torch.jit.freeze(torch.jit.script(model)), "onednn", partial=True)
        self.assertEqual(len(regions(low)), 1, kept(low))
        with torch.no_grad():
            for shape in [(1, 8, 16, 16), (3, 8, 21, 13), (1, 8, 16, 16)]:
                x = torch.rand(shape)
                self.assertLess(relative_error(low(x), model(x)), 1e-4, shape)

    def test_what_stays_in_torchscript(self):
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.norm = nn.BatchNorm2d(4)  # not after a convolution: a depthwise 1x1 convolution
                self.conv = nn.Conv2d(4, 4, 3, padding=1)
                self.bias = nn.Parameter(torch.randn(1, 4, 1, 1))

            def forward(self, x):
                y = self.conv(self.norm(x))
                y = y + self.bias  # broadcasting: oneDNN's sum takes one shape
                y = torch.max_pool2d(y, 2, 2, 0, 2)  # dilation
                # ceil_mode, and padding not counted: not the depthwise convolution's sums
                return F.avg_pool2d(y, 2, 2, 0, True), F.avg_pool2d(y, 3, 2, 1, False, False)

        model = randomized(Model())
        x = torch.rand(1, 4, 12, 12)
        low = lowered(model, x)
        reasons = kept(low)
        for kind in ("aten::add", "aten::max_pool2d", "aten::avg_pool2d"):
            self.assertEqual(reasons.get(kind), "unsupported kind", reasons)
        with torch.no_grad():
            for got, want in zip(low(x), model(x)):
                self.assertLess(relative_error(got, want), 1e-4)
        self.assertEqual([r.kinds for r in regions(low)], [["aten::batch_norm", "aten::conv2d"]])

    def test_a_region_without_a_convolution_or_linear_is_refused_with_its_reason(self):
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(4, 4, 3, padding=1)
                self.bias = nn.Parameter(torch.randn(1, 4, 1, 1))

            def forward(self, x):
                y = self.conv(x) + self.bias  # broadcasting: kept, and the run is cut there
                return torch.sigmoid(torch.relu(y))

        model = randomized(Model())
        x = torch.rand(1, 4, 8, 8)
        low = lowered(model, x)
        details = {node.kind: (node.reason, node.detail) for node in torch_delegate.report(low).methods[0].kept}
        for kind in ("aten::relu", "aten::sigmoid"):
            self.assertEqual(details[kind], ("refused by the backend", "2-node region: no convolution or linear: not worth a call"))
        self.assertIn("refused by the backend (2-node region: no convolution or linear: not worth a call)",
                      str(torch_delegate.report(low)))
        with torch.no_grad():
            self.assertLess(relative_error(low(x), model(x)), 1e-5)

    def test_adaptive_pools_to_sizes_that_divide_the_input(self):
        # AlexNet's and VGG's classifier heads: fixed windows (12x14 to 6x7: 2x2) and the map's own
        # size (a copy) in the region; 12 rows into 5 (windows of 2 and 3 rows) stays in TorchScript.
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(3, 8, 3, padding=1)
                self.linear = nn.Linear(8 * 6 * 7, 10)

            def forward(self, x):
                y = torch.relu(self.conv(x))
                same = F.adaptive_avg_pool2d(y, (12, 14))
                head = self.linear(torch.flatten(F.adaptive_avg_pool2d(same, (6, 7)), 1))
                return head, F.adaptive_avg_pool2d(y, (5, 7))

        model = randomized(Model())
        x = torch.rand(2, 3, 12, 14)
        low = lowered(model, x)
        with torch.no_grad():
            for got, want in zip(low(x), model(x)):
                self.assertLess(relative_error(got, want), 1e-5)
        self.assertEqual(kept(low).get("aten::adaptive_avg_pool2d"), "unsupported kind")
        self.assertEqual(len(regions(low)), 1, kept(low))
        self.assertIn("aten::adaptive_avg_pool2d", regions(low)[0].kinds)
        # The windows come from the example's sizes: another size is refused (the input spec's
        # error, or the step's when the region re-plans), or, with on_other_shapes="torchscript",
        # the region's TorchScript runs (windows of 4x4 there). A size whose windows would give the
        # same output (13x15 in windows of 2x2) is refused too, not pooled with the wrong windows.
        bigger = torch.rand(2, 3, 24, 28)
        with torch.no_grad():
            with self.assertRaisesRegex(Exception, r"its input spec when the method was lowered"):
                lowered(model, x, on_other_shapes="error")(bigger)
            for size in ((24, 28), (13, 15)):
                with self.assertRaisesRegex(Exception, r"was made for an input ending in \[12, 14\] \(an adaptive pool's windows"):
                    low(torch.rand(2, 3, *size))
            elsewhere = lowered(model, x, on_other_shapes="torchscript")
            for got, want in zip(elsewhere(bigger), model(bigger)):
                self.assertLess(relative_error(got, want), 1e-5)

    def test_a_linear_whose_bias_is_computed_in_the_call(self):
        # Swin V2's qkv: the bias cloned and its keys' third zeroed in every call. The clone and
        # zero_ stay in TorchScript; the linear takes their result as a region input, and reads
        # it in each call (a changed parameter changes the result), after the zero_.
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.qkv, self.proj = nn.Linear(32, 96), nn.Linear(96, 32)

            def forward(self, x):
                bias = self.qkv.bias.clone()
                third = bias.numel() // 3
                bias[third:2 * third].zero_()
                return self.proj(torch.relu(F.linear(x, self.qkv.weight, bias)))

        model = randomized(Model())
        x = torch.rand(2, 49, 32)
        low = lowered(model, x)
        self.assertEqual(len(regions(low)), 1, kept(low))
        self.assertEqual((regions(low)[0].node_count, regions(low)[0].kinds), (3, ["aten::linear", "aten::relu"]))
        self.assertEqual(kept(low).get("aten::zero_"), "unsupported kind")
        self.assertNotIn("aten::linear", kept(low))
        with torch.no_grad():
            self.assertLess(relative_error(low(x), model(x)), 1e-5)
            for module in (low, model):
                module.qkv.bias.add_(0.5)
            self.assertLess(relative_error(low(x), model(x)), 1e-5)
            path = os.path.join(WORKDIR, f"onednn_given_bias_{os.getpid()}.pt")
            low.save(path)
            self.assertLess(relative_error(torch_delegate.load(path)(x), model(x)), 1e-5)
            os.remove(path)

    def test_densenet_blocks_are_one_region(self):
        # DenseNet's dense block: a list of features grown by appends, each layer a cat of all of
        # them, then BatchNorm (after the cat: a depthwise 1x1 convolution), ReLU, convolutions;
        # the transition's avg_pool2d as a depthwise convolution.
        class Layer(nn.Module):
            def __init__(self, channels, growth):
                super().__init__()
                self.norm = nn.BatchNorm2d(channels)
                self.conv = nn.Conv2d(channels, growth, 3, padding=1, bias=False)

            def forward(self, features: List[torch.Tensor]):
                return self.conv(torch.relu(self.norm(torch.cat(features, 1))))

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList([Layer(8 + 4 * k, 4) for k in range(3)])
                self.pool = nn.AvgPool2d(2, 2)
                self.padded = nn.AvgPool2d(3, 1, padding=1)  # padding counted: the same sums

            def forward(self, x):
                features = [x]
                for layer in self.layers:
                    features.append(layer(features))
                y = torch.cat(features, 1)
                return self.pool(y) + self.padded(y)[:, :, ::2, ::2]

        model = randomized(Block())
        for batch in (1, 2):
            x = torch.rand(batch, 8, 10, 10)
            low = lowered(model, x)
            with torch.no_grad():
                self.assertLess(relative_error(low(x), model(x)), 1e-5)
            self.assertNotIn("aten::append", kept(low))
            self.assertEqual(kept(low).get("aten::batch_norm"), None)
            self.assertEqual(kept(low).get("aten::avg_pool2d"), None)
        # torchvision's own DenseNet-121 is one region, scripted or frozen (scripted, its head's
        # F.adaptive_avg_pool2d checks `len(output_size)` of a constant list: folded).
        import torchvision
        model = randomized(torchvision.models.densenet121(weights=None))
        x = torch.rand(1, 3, 64, 64)
        for frozen in (False, True):
            low = lowered(model, x, frozen=frozen)
            with torch.no_grad():
                self.assertLess(relative_error(low(x), model(x)), 1e-4)
            self.assertEqual(len(regions(low)), 1, kept(low))

    def test_3d_convolutions_poolings_and_batch_norms(self):
        # A video model's ops on [N, C, T, H, W]: 3x3x3, 1x3x3 and 3x1x1 convolutions (strided,
        # dilated, grouped, depthwise), batch norms folded into them and on their own (after a cat),
        # a residual add, max and average poolings (ceil mode, padding), a global pooling and a mean
        # over T, H and W, then a linear.
        torch.manual_seed(3)

        class Clip(nn.Module):
            def __init__(self):
                super().__init__()
                self.stem = nn.Sequential(nn.Conv3d(3, 16, (3, 7, 7), (1, 2, 2), (1, 3, 3), bias=False), nn.BatchNorm3d(16),
                                          nn.ReLU(inplace=True), nn.MaxPool3d((1, 3, 3), (1, 2, 2), (0, 1, 1)))
                self.spatial = nn.Conv3d(16, 32, (1, 3, 3), padding=(0, 1, 1))
                self.temporal = nn.Sequential(nn.Conv3d(32, 16, (3, 1, 1), padding=(1, 0, 0)), nn.BatchNorm3d(16))
                self.grouped = nn.Conv3d(16, 16, 3, padding=2, dilation=2, groups=4)
                self.depthwise = nn.Conv3d(16, 16, 3, padding=1, groups=16)
                self.norm = nn.BatchNorm3d(32)
                self.pool = nn.MaxPool3d(2, 2, ceil_mode=True)
                self.average = nn.AvgPool3d((1, 2, 2))
                self.head = nn.Linear(32, 10)

            def forward(self, x):
                x = self.stem(x)
                y = self.temporal(torch.relu(self.spatial(x)))
                y = torch.relu(self.grouped(y) + x)
                z = torch.cat([y, torch.sigmoid(self.depthwise(y))], 1)
                z = self.pool(torch.relu(self.norm(z)))
                pooled = torch.flatten(nn.functional.adaptive_avg_pool3d(self.average(z), 1), 1)
                return self.head(pooled) + self.head(z.mean((2, 3, 4)))

        model = randomized(Clip())
        self.check(model, torch.rand(1, 3, 8, 40, 44))
        low = lowered(model, torch.rand(1, 3, 8, 40, 44))
        for kind in ("aten::conv3d", "aten::batch_norm", "aten::max_pool3d", "aten::avg_pool3d", "aten::adaptive_avg_pool3d",
                     "aten::mean", "aten::cat"):
            self.assertNotIn(kind, kept(low))

    def test_1d_convolutions_that_follow_one_another(self):
        # An audio model's [N, C, L]: strided, dilated, grouped and depthwise Conv1d with
        # BatchNorm1d folded and on its own, and ReLUs, one after another: one region.
        torch.manual_seed(5)
        model = randomized(nn.Sequential(nn.Conv1d(1, 32, 11, 2, 5, bias=False), nn.BatchNorm1d(32), nn.ReLU(),
                                         nn.Conv1d(32, 32, 3, padding=2, dilation=2, groups=4), nn.ReLU(), nn.BatchNorm1d(32),
                                         nn.Conv1d(32, 32, 3, padding=4, dilation=4, groups=32),
                                         nn.Conv1d(32, 48, 5, 1, 2), nn.BatchNorm1d(48), nn.ReLU(), nn.Conv1d(48, 16, 1)))
        self.check(model, torch.rand(1, 1, 400))
        # Frozen, BatchNorm1d's input check (`dim() != 2 and dim() != 3`) is gone and the whole model
        # is one region, at another batch too. (Unfrozen, the checks of this small model stay in
        # TorchScript: fewer nodes than shape folding's least, and they cut the region before the
        # last convolution.)
        low = lowered(model, torch.rand(2, 1, 400), frozen=True)
        self.assertEqual(set(kept(low)), set())

    def test_a_batch_norm_after_a_convolution_left_in_torchscript_without_example_inputs(self):
        # padding='same' keeps the convolution in TorchScript; its BatchNorm is then a step of its
        # own, whose input's rank is not known without example inputs: after a Conv2d an image's
        # is assumed; after a Conv1d it stays in TorchScript.
        torch.manual_seed(7)
        image = nn.Sequential(nn.Conv2d(3, 8, 3, padding="same"), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 3))
        sound = nn.Sequential(nn.Conv1d(3, 8, 3, padding="same"), nn.BatchNorm1d(8), nn.ReLU(), nn.Conv1d(8, 8, 3), nn.ReLU(),
                              nn.Conv1d(8, 8, 1))  # two 1-d convolutions chained: a region
        for model, x in ((image, torch.rand(1, 3, 12, 12)), (sound, torch.rand(1, 3, 40))):
            with self.subTest(input=list(x.shape)):
                model = randomized(model)
                # Frozen without the numerics passes (which would fold the batch norm into the
                # convolution): the BatchNorm's input check is gone, and the convolution's result
                # is read by the batch norm alone, which a region takes.
                frozen = torch.jit.freeze(torch.jit.script(model.eval()), optimize_numerics=False)
                low = torch_delegate.lower(frozen, "onednn", partial=True)
                with torch.no_grad():
                    self.assertLess(relative_error(low(x), model(x)), 1e-4)
                in_regions = {kind for region in regions(low) for kind in region.kinds}
                self.assertEqual("aten::batch_norm" in in_regions, x.dim() == 4)
                self.assertIn("aten::conv1d" if x.dim() == 3 else "aten::conv2d", in_regions)

    def test_a_lone_1d_convolution_is_refused_with_its_reason(self):
        # Between steps that stay in TorchScript (ConvTasNet's PReLUs), a 1-d convolution alone
        # runs slower lowered than in TorchScript: the region is refused, and says why.
        torch.manual_seed(6)
        model = nn.Sequential(nn.Conv1d(8, 16, 1), nn.PReLU(), nn.Conv1d(16, 8, 3, padding=1), nn.PReLU())
        low = lowered(model, torch.rand(1, 8, 50))
        self.assertEqual(len(regions(low)), 0)
        details = {(node.kind, node.reason, node.detail) for node in torch_delegate.report(low).methods[0].kept}
        self.assertIn(("aten::conv1d", "refused by the backend",
                       "1-node region: its only convolutions are 1-d ones that read none of each other's results: their layout "
                       "conversions cost more than they save"), details)

    def test_a_list_that_escapes_keeps_its_appends(self):
        class Escapes(nn.Module):
            def forward(self, x):
                features = [x]
                features.append(torch.relu(x))
                joined = torch.cat(features, 1)
                features.append(joined)  # read by what is not a cat: the list stays as it is
                return joined, features

        x = torch.rand(1, 4, 6, 6)
        low = lowered(Escapes(), x)
        got, listed = low(x)
        want, listed_eager = Escapes()(x)
        self.assertTrue(torch.equal(got, want))
        self.assertEqual(len(listed), 3)
        self.assertIn("aten::append", kept(low))


class Models(unittest.TestCase):
    def test_torchvision_cnns_in_one_region(self):
        # Squeeze-excitation (RegNet-Y, EfficientNet, MobileNetV3), SiLU, hardswish, ReLU6, cat;
        # AlexNet's and VGG's adaptive pools to 6x6 and 7x7.
        import torchvision
        for name in ONE_REGION_CNNS:
            with self.subTest(model=name):
                torch.manual_seed(0)
                model = getattr(torchvision.models, name)(weights=None).eval()
                x = torch.rand(1, 3, 224, 224)
                low = lowered(model, x)
                with torch.no_grad():
                    self.assertLess(relative_error(low(x), model(x)), 1e-4)
                # The whole model, classifier included, is one region.
                self.assertEqual(len(regions(low)), 1, kept(low))
                self.assertLessEqual(set(kept(low)), {"prim::GetAttr"})

    def test_resnets_in_one_region(self):
        import torchvision
        for name in RESNETS:
            for frozen in (False, True):
                with self.subTest(model=name, frozen=frozen):
                    torch.manual_seed(0)
                    model = getattr(torchvision.models, name)(weights=None).eval()
                    x = torch.rand(1, 3, 224, 224)
                    low = lowered(model, x, frozen=frozen)
                    with torch.no_grad():
                        self.assertLess(relative_error(low(x), model(x)), 1e-4)
                    # The whole model, stem to classifier, is one region.
                    self.assertEqual(len(regions(low)), 1, kept(low))
                    self.assertLessEqual(set(kept(low)), {"prim::GetAttr"})

    def test_video_models_in_one_region(self):
        import torchvision
        for name in VIDEO:
            with self.subTest(model=name):
                torch.manual_seed(0)
                model = randomized(getattr(torchvision.models.video, name)(weights=None))
                # S3D's last pooling takes a 2x7x7 window: 16 frames of 224x224 make one.
                x = torch.rand(1, 3, 16, 224, 224) if name == "s3d" else torch.rand(1, 3, 4, 64, 64)
                low = lowered(model, x)
                with torch.no_grad():
                    self.assertLess(relative_error(low(x), model(x)), 1e-4)
                self.assertEqual(len(regions(low)), 1, kept(low))
                self.assertLessEqual(set(kept(low)), {"prim::GetAttr"})

    def test_wav2letter_in_one_region(self):
        # torchaudio's Wav2Letter: twelve Conv1d with ReLUs; its log_softmax stays in TorchScript.
        import torchaudio
        torch.manual_seed(0)
        model = torchaudio.models.Wav2Letter(num_classes=40, input_type="waveform", num_features=1).eval()
        x = torch.rand(1, 1, 8000)
        low = lowered(model, x)
        with torch.no_grad():
            self.assertLess(relative_error(low(x), model(x)), 1e-4)
        self.assertEqual(len(regions(low)), 1, kept(low))
        self.assertLessEqual(set(kept(low)), {"prim::GetAttr", "aten::log_softmax"})

    def test_a_detection_model_whose_roi_pool_sets_its_scales_on_the_first_call(self):
        # FasterRCNN: its MultiScaleRoIAlign assigns self.scales on the first call (folded to
        # None, the example run raised), and its IntermediateLayerGetter looks up
        # self.return_layers after each block (unfolded, a region per block).
        import torchvision
        torch.manual_seed(0)
        model = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_320_fpn(
            weights=None, weights_backbone=None, box_score_thresh=0.0).eval()
        scripted = torch.jit.script(model)
        image = torch.rand(3, 320, 320)
        low = torch_delegate.lower(scripted, "onednn", partial=True, example_inputs=([image], None),
                                   on_other_shapes="torchscript")
        self.assertIsNone(scripted.roi_heads.box_roi_pool.scales)  # the user's module, as it was
        self.assertIsNone(low.roi_heads.box_roi_pool.scales)       # its first call sets them
        # Every convolution is delegated: the stem reads `images.tensors` (an ImageList's, not a
        # weight), the feature pyramid's and heads' results go into lists (alias analysis: written).
        for kind in ("aten::conv2d", "aten::batch_norm", "aten::hardswish_", "aten::add_"):
            self.assertNotIn(kind, kept(low))
        other = torch.rand(3, 240, 400)  # another size, its first call
        with torch.no_grad():
            want, got = scripted([other])[1][0], low([other])[1][0]
        self.assertEqual(low.roi_heads.box_roi_pool.scales, scripted.roi_heads.box_roi_pool.scales)
        self.assertEqual(got["scores"].shape, want["scores"].shape)
        self.assertTrue(torch.allclose(got["scores"], want["scores"], atol=1e-5))

    def test_segmentation_backbones_behind_intermediate_layer_getter(self):
        # LRASPP reads two feature maps off its backbone: a region up to each, not one per block.
        import torchvision
        torch.manual_seed(0)
        model = torchvision.models.segmentation.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None).eval()
        x = torch.rand(1, 3, 224, 224)
        low = lowered(model, x)
        self.assertLessEqual(len(regions(low)), 4, kept(low))
        self.assertNotIn("aten::__contains__", kept(low))
        with torch.no_grad():
            self.assertLess(relative_error(low(x)["out"], model(x)["out"]), 1e-4)


class OtherShapes(unittest.TestCase):
    """on_other_shapes="replan": a region lowered at one shape plans others on their first call,
    the sizes it holds computed again from their size programs (docs/onednn.md, Other shapes)."""

    def planned_shapes(self, module):
        return {shapes for _, shapes, _, _, _ in torch.ops.torch_delegate_onednn.plan_implementations(module._c)}

    def test_torchvision_cnns_at_other_batches_and_sizes(self):
        # Squeeze-excitation (its broadcast operand's view), the channel shuffle's views, a mean's.
        import torchvision
        for name in ("mobilenet_v3_small", "shufflenet_v2_x0_5", "efficientnet_b0"):
            with self.subTest(model=name):
                torch.manual_seed(0)
                model = getattr(torchvision.models, name)(weights=None).eval()
                low = lowered(model, torch.rand(1, 3, 96, 96), on_other_shapes="replan")
                self.assertEqual(len(regions(low)), 1, kept(low))
                for sizes in ((3, 3, 96, 96), (1, 3, 64, 128), (2, 3, 128, 96), (1, 3, 96, 96)):
                    x = torch.rand(*sizes)
                    with torch.no_grad():
                        self.assertLess(relative_error(low(x), model(x)), 1e-4, sizes)
                    self.assertIn(str(list(sizes)), self.planned_shapes(low))

    def test_attention_reshapes_follow_the_batch(self):
        # ViT: the patches' reshape from x.shape, heads split and merged, the class token x[:, 0].
        import torchvision
        torch.manual_seed(0)
        model = torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32,
                                                     mlp_dim=64, num_classes=10).eval()
        low = lowered(model, torch.rand(1, 3, 32, 32), on_other_shapes="replan")
        for batch in (3, 5, 1):
            x = torch.rand(batch, 3, 32, 32)
            with torch.no_grad():
                self.assertLess(relative_error(low(x), model(x)), 1e-4, batch)
            self.assertIn(str([batch, 3, 32, 32]), self.planned_shapes(low))

    def test_warm_up_plans_the_shapes_a_server_will_see(self):
        import torchvision
        torch.manual_seed(0)
        model = torchvision.models.mobilenet_v3_small(weights=None).eval()
        low = lowered(model, torch.rand(1, 3, 96, 96))
        seconds = torch_delegate.warm_up(low, (4, 3, 96, 96), torch.rand(1, 3, 64, 64))
        self.assertEqual(len(seconds), 2)
        self.assertTrue(all(s > 0 for s in seconds))
        self.assertLessEqual({"[4, 3, 96, 96]", "[1, 3, 64, 64]"}, self.planned_shapes(low))
        with self.assertRaisesRegex(TypeError, r"warm_up: shape 1 must be a tensor's sizes \(a tuple of ints\), a tensor, "):
            torch_delegate.warm_up(low, "big")
        with self.assertRaisesRegex(ValueError, r"warm_up: the module has no method 'predict'"):
            torch_delegate.warm_up(low, (1, 3, 96, 96), method="predict")

    def test_a_chunk_made_for_one_size_refuses_another(self):
        class Halves(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(4, 4, 3, padding=1)

            def forward(self, x):
                top, bottom = self.conv(x).chunk(2, dim=2)
                return torch.relu(top) + bottom

        torch.manual_seed(0)
        model = Halves().eval()
        low = lowered(model, torch.rand(1, 4, 8, 8), on_other_shapes="replan")
        with torch.no_grad():
            x = torch.rand(2, 4, 8, 8)  # another batch: the chunk's dimension is the same
            self.assertLess(relative_error(low(x), model(x)), 1e-4)
            with self.assertRaisesRegex(RuntimeError, r"a part of a chunk of dimension 2 made for size 8, given \[1, 4, 12, 8\]"):
                low(torch.rand(1, 4, 12, 8))

    def test_declared_ranges_are_served_checked_at_their_ends_and_saved(self):
        import torchvision
        torch.manual_seed(0)
        model = torchvision.models.mobilenet_v3_small(weights=None).eval()
        shape = torch_delegate.Input(min_shape=(1, 3, 64, 64), opt_shape=(2, 3, 96, 96), max_shape=(4, 3, 128, 128))
        low = lowered(model, shape, on_other_shapes="error")
        # The ends were planned (and checked against the original) at lowering: their plans stay.
        self.assertLessEqual({"[1, 3, 64, 64]", "[2, 3, 96, 96]", "[4, 3, 128, 128]"}, self.planned_shapes(low))
        outside = r"method 'forward': argument 'x' has sizes \[5, 3, 96, 96\], outside those it was lowered for: " \
                  r"\[1..4, 3, 64..128, 64..128\] \(partition_options::shape_ranges; on_other_shapes = error refuses the others\)"
        saved = os.path.join(os.environ.get("TD_WORKDIR", "."), f"ranges_{os.getpid()}.pt")
        low.save(saved)
        loaded = torch_delegate.load(saved)
        os.remove(saved)
        # A loaded module plans its ranges on the first calls, or at start: warm_up() reads them.
        self.assertEqual(len(torch_delegate.warm_up(loaded)), 3)
        self.assertLessEqual({"[1, 3, 64, 64]", "[2, 3, 96, 96]", "[4, 3, 128, 128]"}, self.planned_shapes(loaded))
        for module in (low, loaded):
            with torch.no_grad():
                for sizes in ((3, 3, 80, 112), (1, 3, 128, 64)):  # within the range: re-planned, not refused
                    x = torch.rand(*sizes)
                    self.assertLess(relative_error(module(x), model(x)), 1e-4, sizes)
                with self.assertRaisesRegex(torch.jit.Error, "torch-delegate: " + outside):
                    module(torch.rand(5, 3, 96, 96))
                with self.assertRaisesRegex(torch.jit.Error, r"has sizes \[1, 3, 96\], outside"):
                    module(torch.rand(1, 3, 96))
        # "automatic": the range is checked at lowering, and the shapes outside it are served too.
        served = lowered(model, shape)
        with torch.no_grad():
            x = torch.rand(5, 3, 96, 96)
            self.assertLess(relative_error(served(x), model(x)), 1e-4)
        with self.assertRaisesRegex(ValueError, r"warm_up: no shapes given, and 'forward' was lowered without declared ranges"):
            torch_delegate.warm_up(lowered(model, torch.rand(1, 3, 96, 96)))

    def test_a_range_a_region_cannot_serve_is_refused_at_lowering(self):
        class Halves(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(4, 4, 3, padding=1)

            def forward(self, x):
                top, bottom = self.conv(x).chunk(2, dim=2)
                return torch.relu(top) + bottom

        model = Halves().eval()
        batches = torch_delegate.Input((1, 4, 8, 8), (2, 4, 8, 8), (8, 4, 8, 8))
        low = lowered(model, batches, on_other_shapes="error")  # the chunk's dimension does not vary
        with torch.no_grad():
            x = torch.rand(8, 4, 8, 8)
            self.assertLess(relative_error(low(x), model(x)), 1e-4)
        heights = torch_delegate.Input((1, 4, 8, 8), (1, 4, 8, 8), (1, 4, 12, 8))
        with self.assertRaisesRegex(RuntimeError, r"(?s)method 'forward': shape_ranges: at the ranges' max \(argument 0 "
                                                  r"\[1, 4, 12, 8\]\), the lowered method fails \(narrow the range, or keep the "
                                                  r"region that cannot take it in TorchScript\): .*a part of a chunk of dimension 2 "
                                                  r"made for size 8, given \[1, 4, 12, 8\]"):
            lowered(model, heights)
        with self.assertRaisesRegex(RuntimeError, r"shape_ranges are served by the backends .* give other_shapes::automatic"):
            lowered(model, batches, on_other_shapes="torchscript")
        with self.assertRaisesRegex(ValueError, r"torch_delegate.Input: each dimension must have min <= opt <= max, got "
                                                r"min \(2, 4, 8, 8\), opt \(1, 4, 8, 8\)"):
            torch_delegate.Input((2, 4, 8, 8), (1, 4, 8, 8), (4, 4, 8, 8))
        with self.assertRaisesRegex(TypeError, r"torch_delegate.Input: max_shape must be sizes"):
            torch_delegate.Input((1, 4), (1, 4), "big")
        # C++'s checks, through the options the package fills.
        options = torch_delegate._C.PartitionOptions()
        options.example_inputs = {"forward": [torch.rand(1, 4, 8, 8)]}
        for ranges, error in (({"forward": [torch_delegate._C.ShapeRange([1, 4, 8], [2, 4, 8])]},
                               r"shape_ranges: argument 0: min \[1, 4, 8\] and max \[2, 4, 8\] must have the example's 4 "
                               r"dimensions \(its sizes: \[1, 4, 8, 8\]\)"),
                              ({"forward": [torch_delegate._C.ShapeRange([2, 4, 8, 8], [4, 4, 8, 8])]},
                               r"the example's sizes \[1, 4, 8, 8\] must lie within the range \[2..4, 4, 8, 8\]"),
                              ({"predict": [None]}, r"method 'predict': shape_ranges: the method has no example_inputs"),
                              ({"forward": [None, None]}, r"shape_ranges: 2 given, the method takes 1 arguments")):
            with self.subTest(ranges=ranges):
                options.shape_ranges = ranges
                with self.assertRaisesRegex(RuntimeError, error):
                    torch_delegate._C.lower_partially(torch.jit.script(model)._c, ["onednn"], [{}], options)


class SavedAndElsewhere(unittest.TestCase):
    def test_a_module_saved_by_an_earlier_main_loads(self):
        # Saved at 24403c3, when the backend ran ATen's oneDNN tensors (tests/data/README.md).
        data = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data")
        saved = torch.load(os.path.join(data, "onednn_format1_by_24403c3.io.pt"))
        for load in (torch.jit.load, torch_delegate.load):
            with self.subTest(load=load.__module__), torch.no_grad():
                module = load(os.path.join(data, "onednn_format1_by_24403c3.pt"))
                self.assertLess(relative_error(module(saved["x"]), saved["want"]), 1e-5)


    def test_video_and_audio_modules_saved_by_an_earlier_main_load(self):
        # Saved at 57f8c6e, the first build with 3-d steps, and at c700280, the first with 1-d
        # convolutions (tests/data/README.md).
        data = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data")
        for stem in ("onednn_video_by_57f8c6e", "onednn_audio_by_c700280"):
            saved = torch.load(os.path.join(data, stem + ".io.pt"))
            for load in (torch.jit.load, torch_delegate.load):
                with self.subTest(module=stem, load=load.__module__), torch.no_grad():
                    module = load(os.path.join(data, stem + ".pt"))
                    self.assertLess(relative_error(module(saved["x"]), saved["want"]), 1e-5)

    def setUp(self):
        torch.manual_seed(3)
        self.model = randomized(nn.Sequential(Residual(4), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3)))
        self.x = torch.rand(1, 4, 10, 10)
        with torch.no_grad():
            self.want = self.model(self.x)

    def test_save_load_stock_package_and_lite(self):
        low = lowered(self.model, self.x)
        path = os.path.join(WORKDIR, "onednn_small.pt")
        low.save(path)
        self.assertEqual(torch_delegate.backends_needed(path), ["onednn"])
        for load in (torch.jit.load, torch_delegate.load):
            with self.subTest(load=load.__module__), torch.no_grad():
                self.assertLess(relative_error(load(path)(self.x), self.want), 1e-4)
        from torch.jit.mobile import _load_for_lite_interpreter
        low._save_for_lite_interpreter(path + "l")
        with torch.no_grad():
            self.assertLess(relative_error(_load_for_lite_interpreter(path + "l")(self.x), self.want), 1e-4)
        # Loaded, the region keeps only its reordered weights: the module cannot be saved again.
        with self.assertRaises(RuntimeError) as raised:
            torch_delegate.load(path).save(os.path.join(WORKDIR, "onednn_again.pt"))
        self.assertIn("cannot save this lowered module: its backend released the named data", str(raised.exception))

    def test_the_file_holds_each_weight_once(self):
        model = randomized(nn.Sequential(Residual(64), Residual(64)))
        x = torch.rand(1, 64, 8, 8)
        frozen = torch.jit.freeze(torch.jit.script(model))
        low = torch_delegate.lower(frozen, "onednn", partial=True, example_inputs=(x,))
        sizes = []
        for module in (frozen, low):
            buffer = io.BytesIO()
            torch.jit.save(module, buffer)
            sizes.append(len(buffer.getvalue()))
        self.assertLessEqual(sizes[1], 1.05 * sizes[0], sizes)

    def test_concurrent_calls_on_one_module(self):
        import threading
        low = lowered(self.model, self.x)
        inputs = [torch.rand(1, 4, 10, 10) for _ in range(4)]
        with torch.no_grad():
            wants = [self.model(x) for x in inputs]
        errors = []

        def run(k):
            with torch.no_grad():
                for _ in range(20):
                    errors.append(relative_error(low(inputs[k]), wants[k]))

        threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.assertEqual(len(errors), 80)
        self.assertLess(max(errors), 1e-4)

    def test_fallback_where_the_backend_is_unavailable(self):
        low = lowered(self.model, self.x, fallback=True)
        path = os.path.join(WORKDIR, "onednn_fallback.pt")
        low.save(path)
        torch.save(self.x, os.path.join(WORKDIR, "onednn_x.pt"))
        torch.save(self.want, os.path.join(WORKDIR, "onednn_want.pt"))
        script = ("import sys, torch; torch.ops.load_library(sys.argv[1]); m = torch.jit.load(sys.argv[2]); "
                  "x = torch.load(sys.argv[3]); print(m.__delegate.td_is_available(), float((m(x) - torch.load(sys.argv[4])).abs().max()))")
        out = subprocess.run([sys.executable, "-c", script, LIBRARY, path, os.path.join(WORKDIR, "onednn_x.pt"),
                              os.path.join(WORKDIR, "onednn_want.pt")], env=dict(os.environ, TD_ONEDNN_UNAVAILABLE="1"),
                             capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        available, error = out.stdout.split()
        self.assertEqual(available, "False")
        self.assertLess(float(error), 1e-4)
        # Without fallback, the text LibTorch users match on.
        strict = lowered(self.model, self.x)
        strict.save(path)
        out = subprocess.run([sys.executable, "-c", script, LIBRARY, path, os.path.join(WORKDIR, "onednn_x.pt"),
                              os.path.join(WORKDIR, "onednn_want.pt")], env=dict(os.environ, TD_ONEDNN_UNAVAILABLE="1"),
                             capture_output=True, text=True)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("Backend is not available.", out.stderr)


@unittest.skipUnless(os.environ.get("TD_XNNPACK_LIBRARY"), "TD_XNNPACK_LIBRARY not set")
class WithXnnpack(unittest.TestCase):
    """["xnnpack", "onednn"]: xnnpack takes what it supports first; a region it loses (here by a
    replayed plan, as measuring decides on a machine where oneDNN is faster) goes to onednn."""

    def test_a_region_xnnpack_lost_goes_to_onednn(self):
        torch.ops.load_library(os.environ["TD_XNNPACK_LIBRARY"])
        torch.manual_seed(4)
        model = randomized(nn.Sequential(Residual(8), Residual(8)))
        x = torch.rand(1, 8, 16, 16)
        both = ["xnnpack", "onednn"]
        by_rule = torch_delegate.plan(torch.jit.script(model), both, example_inputs=(x,))
        self.assertEqual([r.backend for r in by_rule.methods[0].regions], ["xnnpack"])
        lost = torch_delegate.plan(torch.jit.script(model), "onednn", example_inputs=(x,))  # xnnpack's region lost
        low = torch_delegate.lower(torch.jit.script(model), both, partial=True, example_inputs=(x,), replay=lost)
        self.assertEqual([r.backend for r in regions(low)], ["onednn"])
        with torch.no_grad():
            self.assertLess(relative_error(low(x), model(x)), 1e-4)


if __name__ == "__main__":
    unittest.main(verbosity=2)
