"""Traced models delegate like scripted ones: torchvision's models traced (torch.jit.trace) and
frozen-traced (torch.jit.freeze(torch.jit.trace(...))) get the same regions, with the same node
kinds and counts, as the same model scripted and frozen-scripted, for each shipped backend that
was built (onednn, xnnpack); the lowered traced model matches eager. Small traced convolutions
(1-d, 2-d, transposed, 3-d) check what the canonical graph rewrites aten::_convolution to, what it
leaves, and that the sizes a trace recorded are not taken for every call's; a traced attention
whose undefined result has no type to record.

Environment: PYTHONPATH (the built package), TD_ONEDNN_LIBRARY and TD_XNNPACK_LIBRARY (either may
be empty: that backend was not built), TD_POINTWISE_LIBRARY (libpointwise_fusion.so),
TD_MODELS (optional: a comma-separated list of the models below, or "all"; default: four of them).

Inputs are 1x3x64x64 to keep the sweep within the suite's time.
"""
import os
import unittest
import warnings

import torch
import torch.nn as nn
import torchvision

import torch_delegate

from torchvision_models import randomized, selected

torch.set_num_threads(2)
torch.ops.load_library(os.environ["TD_POINTWISE_LIBRARY"])
BACKENDS = []
for backend, variable in (("onednn", "TD_ONEDNN_LIBRARY"), ("xnnpack", "TD_XNNPACK_LIBRARY")):
    if os.environ.get(variable):
        torch.ops.load_library(os.environ[variable])
        BACKENDS.append(backend)

SIZE = 64
# Each model: its torchvision constructor's arguments, and whether the traced forms must get
# exactly the scripted forms' regions (node counts and kinds) or the same number of regions:
# tracing unrolls DenseNet's feature list (appended to in a loop when scripted: aten::append, which
# no backend takes), so its traced torch.cat joins the regions; and torch.jit.freeze folds more of
# its BatchNorms into convolutions in the traced graph than in the scripted one; ShuffleNetV2's
# channel shuffle computes its view's sizes through more nodes when traced (prim::NumToTensor,
# aten::floor_divide, aten::Int instead of aten::floordiv), which join onednn's regions with it.
MODELS = {
    "resnet18": ({}, True),
    "mobilenet_v3_small": ({}, True),
    "shufflenet_v2_x1_0": ({}, False),
    "squeezenet1_0": ({}, True),
    "mobilenet_v2": ({}, True),
    "efficientnet_b0": ({}, True),
    "regnet_y_400mf": ({}, True),
    "googlenet": ({"aux_logits": False, "init_weights": True}, True),
    "convnext_tiny": ({}, True),
    "densenet121": ({}, False),
}
# `meson test` runs two; the sweep every one (torchvision_models.py).
SELECTED = selected(MODELS, smoke=["resnet18", "shufflenet_v2_x1_0"])


def traced(model, x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        with torch.no_grad():
            return torch.jit.trace(model, (x,))


def shape(report):
    """What a plan delegates, for comparison: per region, its backend, node count and kinds."""
    return [(region.backend, region.node_count, tuple(region.kinds)) for region in report.methods[0].regions]


def relative_error(got, want):
    return ((got - want).abs().max() / want.abs().max().clamp_min(1e-12)).item()


def kinds_kept(report):
    return {node.kind for node in report.methods[0].kept}


class TorchvisionTraced(unittest.TestCase):
    def test_traced_models_get_the_scripted_regions(self):
        self.assertTrue(BACKENDS, "neither onednn nor xnnpack was built")
        for name in SELECTED:
            arguments, exact = MODELS[name]
            torch.manual_seed(0)
            model = randomized(getattr(torchvision.models, name)(weights=None, **arguments))
            x = torch.randn(1, 3, SIZE, SIZE)
            with torch.no_grad():
                want = model(x)
            scripted, trace = torch.jit.script(model), traced(model, x)
            forms = {  # torch.jit.freeze freezes a copy
                "traced": (trace, scripted),
                "frozen traced": (torch.jit.freeze(trace), torch.jit.freeze(scripted)),
            }
            for backend in BACKENDS:
                expected_plans = {}
                for form, (module, reference) in forms.items():
                    with self.subTest(model=name, backend=backend, form=form):
                        expected = expected_plans[form] = torch_delegate.plan(reference, [backend], example_inputs=(x,))
                        got = torch_delegate.plan(module, [backend], example_inputs=(x,))
                        self.assertGreater(expected.methods[0].delegated_nodes, 0)
                        if exact:
                            self.assertEqual(shape(got), shape(expected))
                        else:
                            self.assertEqual(got.region_count, expected.region_count)
                        self.assertNotIn("aten::_convolution", kinds_kept(got))
                with self.subTest(model=name, backend=backend, form="traced, lowered"):
                    lowered = torch_delegate.lower(trace, [backend], partial=True, example_inputs=(x,))
                    if exact:
                        self.assertEqual(shape(torch_delegate.report(lowered)), shape(expected_plans["traced"]))
                    with torch.no_grad():
                        self.assertLess(relative_error(lowered(x), want), 1e-4)


class Convolutions(nn.Module):
    """Every convolution a trace spells aten::_convolution: 1-d, 2-d (grouped, strided, dilated),
    transposed 2-d (output_padding), 3-d."""

    def __init__(self):
        super().__init__()
        self.conv1d = nn.Conv1d(3, 6, 3, padding=1)
        self.conv2d = nn.Conv2d(3, 6, 3, stride=2, padding=2, dilation=2, groups=3)
        self.transposed = nn.ConvTranspose2d(6, 4, 3, stride=2, padding=1, output_padding=1)
        self.conv3d = nn.Conv3d(4, 2, 1)

    def forward(self, x):
        line = self.conv1d(x.flatten(2)).sum()
        y = self.transposed(torch.relu(self.conv2d(x)))
        return self.conv3d(y.unsqueeze(2)).squeeze(2) + line


class SmallTraced(unittest.TestCase):
    def test_each_convolution_becomes_its_scripted_kind(self):
        torch.manual_seed(0)
        model = Convolutions().eval()
        x = torch.randn(1, 3, 9, 9)
        # pointwise_fusion takes none of the convolutions: each stays in TorchScript, and the
        # report names its kind in the canonical graph.
        report = torch_delegate.plan(traced(model, x), "pointwise_fusion", example_inputs=(x,))
        kept = [node.kind for node in report.methods[0].kept if "conv" in node.kind]
        self.assertEqual(kept, ["aten::conv1d", "aten::conv2d", "aten::conv_transpose2d", "aten::conv3d"])
        lowered = torch_delegate.lower(traced(model, x), "pointwise_fusion", partial=True, example_inputs=(x,))
        with torch.no_grad():
            self.assertLess(relative_error(lowered(x), model(x)), 1e-5)
            other = torch.randn(2, 3, 9, 9)  # the traced model takes other batch sizes as before
            self.assertLess(relative_error(lowered(other), model(other)), 1e-5)

    def test_an_undefined_tensor_result_has_no_type_to_record(self):
        # A traced nn.MultiheadAttention (ViT's) calls aten::_native_multi_head_attention at the
        # top level, whose second result is an undefined tensor when need_weights is False.
        class Attention(nn.Module):
            def __init__(self):
                super().__init__()
                self.attention = nn.MultiheadAttention(16, 2, batch_first=True)

            def forward(self, x):
                y, _ = self.attention(x, x, x, need_weights=False)
                return torch.relu(y) * 2.0 + x

        torch.manual_seed(0)
        model = Attention().eval()
        x = torch.randn(1, 5, 16)
        module = traced(model, x)
        self.assertIn("aten::_native_multi_head_attention", [node.kind() for node in module.inlined_graph.nodes()])
        self.assertEqual(torch_delegate.plan(module, "pointwise_fusion", example_inputs=(x,)).region_count, 1)
        lowered = torch_delegate.lower(module, "pointwise_fusion", partial=True, example_inputs=(x,))
        with torch.no_grad():
            self.assertLess(relative_error(lowered(x), model(x)), 1e-5)

    @unittest.skipUnless("onednn" in BACKENDS, "onednn was not built")
    def test_a_plan_without_example_inputs_does_not_take_the_traced_sizes(self):
        # A trace records every tensor's sizes in its type; the scripted model knows none. Without
        # example inputs both plans are the same, and the lowered traced model runs other image sizes.
        torch.manual_seed(0)
        model = randomized(torchvision.models.resnet18(weights=None))
        x = torch.randn(1, 3, SIZE, SIZE)
        got = torch_delegate.plan(traced(model, x), ["onednn"])
        self.assertEqual(shape(got), shape(torch_delegate.plan(torch.jit.script(model), ["onednn"])))
        lowered = torch_delegate.lower(traced(model, x), ["onednn"], partial=True)
        other = torch.randn(1, 3, 96, 80)
        with torch.no_grad():
            self.assertLess(relative_error(lowered(other), model(other)), 1e-4)


if __name__ == "__main__":
    unittest.main()
