"""The xnnpack backend (backends/xnnpack) through torch_delegate.lower(..., partial=True,
example_inputs=...): every op it runs against eager over random parameters, torchvision's CNNs
end to end (scripted and frozen), save/load in stock Python and the lite interpreter, fallback
where the backend is unavailable, the input-spec error, and the forms XNNPACK 2022 cannot run
kept in TorchScript with their reason.

Environment: PYTHONPATH (the built package), TD_XNNPACK_LIBRARY (libxnnpack_backend.so),
TD_WORKDIR (a scratch directory).
"""
import io
import os
import random
import subprocess
import sys
import unittest

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_delegate

from torchvision_models import selected

LIBRARY = os.environ["TD_XNNPACK_LIBRARY"]
WORKDIR = os.environ.get("TD_WORKDIR", ".")
torch.ops.load_library(LIBRARY)
torch.set_num_threads(2)


def lowered(model, x, frozen=False, **knobs):
    scripted = torch.jit.script(model.eval())
    if frozen:
        scripted = torch.jit.freeze(scripted)
    return torch_delegate.lower(scripted, "xnnpack", partial=True, example_inputs=(x,), **knobs)


def kept_kinds(module):
    return {node.kind: node.reason for method in torch_delegate.report(module).methods for node in method.kept}


def delegated_kinds(module):
    return {kind for method in torch_delegate.report(module).methods for region in method.regions for kind in region.kinds}


def relative_error(got, want):
    return ((got - want).abs().max() / want.abs().max().clamp_min(1e-12)).item()


class Ops(unittest.TestCase):
    """Each op against eager, scripted and frozen (frozen folds conv+BatchNorm itself)."""

    def check(self, model, x, must_delegate, frozen_too=True):
        model.eval()
        with torch.no_grad():
            want = model(x)
        for frozen in ([False, True] if frozen_too else [False]):
            with self.subTest(frozen=frozen):
                low = lowered(model, x, frozen=frozen)
                with torch.no_grad():
                    got = low(x)
                self.assertLess(relative_error(got, want), 1e-4)
                kinds = delegated_kinds(low)
                for kind in must_delegate:
                    if frozen and kind == "aten::batch_norm":
                        continue  # frozen: folded into the convolution by torch.jit.freeze
                    self.assertIn(kind, kinds, f"{kind} not delegated; kept: {kept_kinds(low)}")

    def test_convolutions_over_random_parameters(self):
        rng = random.Random(7)
        for trial in range(12):
            groups = rng.choice([1, 1, 2, 3])
            cin = groups * rng.randint(1, 5)
            cout = groups * rng.randint(1, 6)
            kernel = rng.choice([1, 2, 3, 5])
            stride = rng.choice([1, 2])
            padding = rng.randint(0, kernel // 2 + 1)
            dilation = rng.choice([1, 1, 2])
            bias = rng.choice([True, False])
            size = rng.randint(kernel * dilation + 1, 17)
            with self.subTest(trial=trial, groups=groups, cin=cin, cout=cout, kernel=kernel, stride=stride,
                              padding=padding, dilation=dilation, bias=bias, size=size):
                torch.manual_seed(trial)
                model = nn.Sequential(nn.Conv2d(cin, cout, kernel, stride, padding, dilation, groups, bias),
                                      nn.BatchNorm2d(cout), nn.ReLU())
                model[1].running_mean.uniform_(-1, 1)
                model[1].running_var.uniform_(0.5, 2)
                self.check(model, torch.rand(1, cin, size, size + 1), ["aten::conv2d", "aten::batch_norm"])

    def test_depthwise_with_multiplier_and_relu6(self):
        torch.manual_seed(1)
        for channels, multiplier in [(8, 1), (5, 2), (3, 3)]:
            with self.subTest(channels=channels, multiplier=multiplier):
                model = nn.Sequential(nn.Conv2d(channels, channels * multiplier, 3, 2, 1, groups=channels, bias=False),
                                      nn.BatchNorm2d(channels * multiplier), nn.ReLU6(inplace=True))
                self.check(model, torch.rand(2, channels, 15, 15), ["aten::conv2d"])

    def test_activations(self):
        torch.manual_seed(2)
        for activation in [nn.Hardswish(), nn.Hardsigmoid(), nn.Sigmoid(), nn.SiLU(), nn.ReLU6(),
                           nn.Hardtanh(-0.5, 0.7), nn.ReLU(inplace=True)]:
            with self.subTest(activation=type(activation).__name__):
                model = nn.Sequential(nn.Conv2d(4, 6, 3, padding=1), activation)
                self.check(model, torch.randn(1, 4, 9, 9), ["aten::conv2d"])

    def test_pooling(self):
        torch.manual_seed(3)
        for pool in [nn.MaxPool2d(3, 2, 1), nn.MaxPool2d(3, 2, ceil_mode=True), nn.MaxPool2d(2),
                     nn.AvgPool2d(2), nn.AvgPool2d(3, 1), nn.AdaptiveAvgPool2d((1, 1))]:
            with self.subTest(pool=repr(pool)):
                model = nn.Sequential(nn.Conv2d(3, 5, 3), pool)
                self.check(model, torch.randn(1, 3, 14, 13), ["aten::conv2d"])

    def test_adaptive_pools_to_sizes_that_divide_the_input(self):
        # A 12x11 map to 6x11 (windows of 2x1) and to its own size (windows of one: a copy, the
        # ReLU after it folded in): delegated; to 5x5 (windows of unequal sizes): kept in TorchScript.
        torch.manual_seed(3)
        for size in [(6, 11), (12, 11)]:
            with self.subTest(size=size):
                model = nn.Sequential(nn.Conv2d(3, 5, 3), nn.AdaptiveAvgPool2d(size), nn.ReLU(), nn.Flatten(),
                                      nn.Linear(5 * size[0] * size[1], 4))
                self.check(model, torch.randn(2, 3, 14, 13), ["aten::conv2d", "aten::adaptive_avg_pool2d", "aten::linear"])
        model = nn.Sequential(nn.Conv2d(3, 5, 3), nn.AdaptiveAvgPool2d((5, 5))).eval()
        low = lowered(model, torch.randn(1, 3, 14, 13))
        self.assertEqual(kept_kinds(low).get("aten::adaptive_avg_pool2d"), "unsupported kind")

    def test_squeeze_excitation_broadcast_mul_and_residual_add(self):
        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(8, 8, 3, padding=1)
                self.fc1 = nn.Conv2d(8, 4, 1)
                self.fc2 = nn.Conv2d(4, 8, 1)

            def forward(self, x):
                y = self.conv(x)
                s = F.adaptive_avg_pool2d(y, 1)
                s = torch.sigmoid(self.fc2(F.relu(self.fc1(s))))
                return F.relu(y * s + x)

        torch.manual_seed(4)
        self.check(Block(), torch.randn(1, 8, 10, 10), ["aten::conv2d", "aten::mul", "aten::add"])

    def test_classifier_head(self):
        torch.manual_seed(5)
        model = nn.Sequential(nn.Conv2d(3, 16, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2),
                              nn.Linear(16, 10), nn.Softmax(dim=1))
        self.check(model, torch.randn(2, 3, 12, 12), ["aten::linear", "aten::softmax", "aten::flatten"])


class Models(unittest.TestCase):
    """torchvision's CNNs, random weights, end to end against eager."""

    def test_models(self):
        import torchvision
        for name in selected(["resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0", "regnet_y_400mf"],
                             smoke=["resnet18", "mobilenet_v3_small"]):  # every one in the sweep (torchvision_models.py)
            for frozen in [True, False]:
                with self.subTest(model=name, frozen=frozen):
                    torch.manual_seed(0)
                    model = getattr(torchvision.models, name)(weights=None).eval()
                    x = torch.rand(1, 3, 224, 224)
                    with torch.no_grad():
                        want = model(x)
                        low = lowered(model, x, frozen=frozen)
                        got = low(x)
                    self.assertLess(relative_error(got, want), 1e-4)
                    kept = kept_kinds(low)
                    # Every convolution and linear delegated.
                    self.assertNotIn("aten::conv2d", kept)
                    self.assertNotIn("aten::linear", kept)
                    # The whole network in one region, frozen or not (scripted: attributes are read once,
                    # as freezing reads them; eval-mode dropout and StochasticDepth's checks fold away).
                    self.assertEqual(len(torch_delegate.report(low).methods[0].regions), 1, kept)

    def test_frozen_file_holds_each_weight_once(self):
        import torchvision
        model = torchvision.models.mobilenet_v2(weights=None).eval()
        x = torch.rand(1, 3, 224, 224)
        frozen = torch.jit.freeze(torch.jit.script(model))
        low = torch_delegate.lower(frozen, "xnnpack", partial=True, example_inputs=(x,))
        sizes = []
        for module in (frozen, low):
            buffer = io.BytesIO()
            torch.jit.save(module, buffer)
            sizes.append(len(buffer.getvalue()))
        self.assertLessEqual(sizes[1], 1.05 * sizes[0], sizes)


class SavedAndElsewhere(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(6)
        self.model = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.BatchNorm2d(8), nn.Hardswish(),
                                   nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4)).eval()
        self.x = torch.rand(1, 3, 16, 16)
        with torch.no_grad():
            self.want = self.model(self.x)

    def test_save_load_stock_and_package(self):
        low = lowered(self.model, self.x)
        path = os.path.join(WORKDIR, "xnnpack_small.pt")
        low.save(path)
        for load in (torch.jit.load, torch_delegate.load):
            with self.subTest(load=load.__module__):
                with torch.no_grad():
                    self.assertLess(relative_error(load(path)(self.x), self.want), 1e-4)

    def test_a_module_saved_by_an_earlier_main_loads(self):
        # Saved before xnnpack was split by concern (tests/data/README.md): every op the backend
        # runs, in three regions; loading compiles its payload with this build.
        data = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data")
        saved = torch.load(os.path.join(data, "xnnpack_payload1_by_417cb5f.io.pt"))
        for load in (torch.jit.load, torch_delegate.load):
            with self.subTest(load=load.__module__), torch.no_grad():
                module = load(os.path.join(data, "xnnpack_payload1_by_417cb5f.pt"))
                self.assertLess(relative_error(module(saved["x"]), saved["want"]), 1e-5)
                self.assertLess(relative_error(module(saved["x"]), saved["got"]), 1e-6)

    def test_outputs_kept_by_the_caller_are_not_overwritten(self):
        low = lowered(self.model, self.x)
        other = torch.rand(1, 3, 16, 16)
        with torch.no_grad():
            first = low(self.x)
            view = low(other).view(-1)  # a view of the second output: its storage is still held
            third = low(self.x)
            self.assertLess(relative_error(first, self.want), 1e-4)
            self.assertLess(relative_error(view, self.model(other).view(-1)), 1e-4)
            self.assertLess(relative_error(third, self.want), 1e-4)

    def test_a_loaded_module_released_its_unpacked_weights(self):
        # Where no region may be re-planned: re-planning keeps the weights it packs again from.
        low = lowered(self.model, self.x, on_other_shapes="error")
        path = os.path.join(WORKDIR, "xnnpack_released.pt")
        low.save(path)
        loaded = torch_delegate.load(path)
        with self.assertRaises(RuntimeError) as raised:
            loaded.save(os.path.join(WORKDIR, "xnnpack_released_again.pt"))
        self.assertIn("cannot save this lowered module: its backend released the named data", str(raised.exception))

    def test_lite_interpreter(self):
        from torch.jit.mobile import _load_for_lite_interpreter
        low = lowered(self.model, self.x)
        path = os.path.join(WORKDIR, "xnnpack_small.ptl")
        low._save_for_lite_interpreter(path)
        with torch.no_grad():
            self.assertLess(relative_error(_load_for_lite_interpreter(path)(self.x), self.want), 1e-4)

    def test_fallback_where_the_backend_is_unavailable(self):
        low = lowered(self.model, self.x, fallback=True)
        path = os.path.join(WORKDIR, "xnnpack_fallback.pt")
        low.save(path)
        script = ("import sys, torch; torch.ops.load_library(sys.argv[1]); m = torch.jit.load(sys.argv[2]); "
                  "x = torch.load(sys.argv[3]); print(m.__delegate.td_is_available(), float((m(x) - torch.load(sys.argv[4])).abs().max()))")
        torch.save(self.x, os.path.join(WORKDIR, "xnnpack_x.pt"))
        torch.save(self.want, os.path.join(WORKDIR, "xnnpack_want.pt"))
        env = dict(os.environ, TD_XNNPACK_UNAVAILABLE="1")
        out = subprocess.run([sys.executable, "-c", script, LIBRARY, path, os.path.join(WORKDIR, "xnnpack_x.pt"),
                              os.path.join(WORKDIR, "xnnpack_want.pt")], env=env, capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        available, error = out.stdout.split()
        self.assertEqual(available, "False")
        self.assertLess(float(error), 1e-4)

    def test_another_shape_is_the_input_spec_error(self):
        low = lowered(self.model, self.x, on_other_shapes="error")
        with self.assertRaises(RuntimeError) as raised:
            low(torch.rand(1, 3, 20, 20))
        message = str(raised.exception)
        self.assertIn("backend 'xnnpack', method 'forward_region_0': argument 1 ('input_0') must be Float [1, 3, 16, 16]", message)
        self.assertIn("got Float [1, 3, 20, 20]", message)

    def test_wrong_dtype(self):
        for other_shapes in ("error", "automatic", "replan"):  # another dtype is never re-planned
            with self.subTest(on_other_shapes=other_shapes):
                low = lowered(self.model, self.x, on_other_shapes=other_shapes)
                with self.assertRaises(RuntimeError) as raised:
                    low(self.x.double())
                self.assertIn("must be Float [1, 3, 16, 16]", str(raised.exception))
                self.assertIn("got Double [1, 3, 16, 16]", str(raised.exception))

    def test_another_shape_is_served_by_default(self):
        low = lowered(self.model, self.x)
        x = torch.rand(2, 3, 20, 20)
        with torch.no_grad():
            self.assertLess(relative_error(low(x), self.model(x)), 1e-4)

    def test_other_shapes_can_run_the_regions_torchscript(self):
        for frozen in (False, True):
            with self.subTest(frozen=frozen):
                low = lowered(self.model, self.x, frozen=frozen, on_other_shapes="torchscript")
                other = torch.rand(2, 3, 20, 18)
                with torch.no_grad():
                    self.assertLess(relative_error(low(other), self.model(other)), 1e-4)
                    self.assertLess(relative_error(low(self.x), self.want), 1e-4)

    def test_on_other_shapes_needs_example_inputs(self):
        with self.assertRaises(torch_delegate.Error) as raised:
            torch_delegate.lower(torch.jit.script(self.model), "xnnpack", partial=True, on_other_shapes="torchscript")
        self.assertIn("on_other_shapes: it applies to the shapes recorded from example_inputs, and none are given",
                      str(raised.exception))
        with self.assertRaises(ValueError):
            lowered(self.model, self.x, on_other_shapes="retry")
        with self.assertRaises(ValueError) as raised:
            lowered(self.model, self.x, on_other_shapes="replan", max_replans=0)
        self.assertIn("max_replans must be an int >= 1, got 0", str(raised.exception))

    def test_other_shapes_replanned(self):
        """on_other_shapes="replan": each region compiled again for the new sizes (batch and
        spatial), kept (at most max_replans per region), after save/load too; ceil-mode pooling
        (SqueezeNet's) and a flatten follow the new sizes."""
        import torchvision
        models = [("small", self.model, self.x)]
        for name in ("squeezenet1_0", "resnet18"):
            torch.manual_seed(0)
            models.append((name, getattr(torchvision.models, name)(weights=None).eval(), torch.rand(1, 3, 96, 96)))
        for name, model, x in models:
            with self.subTest(model=name):
                low = lowered(model, x, on_other_shapes="replan", max_replans=2)
                path = os.path.join(WORKDIR, f"xnnpack_replan_{name}.pt")
                low.save(path)
                loaded = torch.jit.load(path)
                sizes = [tuple(x.shape), (2,) + tuple(x.shape[1:]), (1, 3, x.shape[2] + 13, x.shape[3] + 7), (3, 3, 65, 71)]
                for module in (low, loaded):
                    for shape in sizes + sizes[::-1]:  # the second pass meets dropped and kept plans
                        other = torch.rand(*shape)
                        with torch.no_grad():
                            self.assertLess(relative_error(module(other), model(other)), 1e-4, shape)

    def test_adaptive_pools_follow_a_new_input_size(self):
        # The region ends at the pool: its output is the pool's size at every input size (windows
        # of 2 at 12x12, 3 at 18x18; a copy at 6x6); a size it does not divide is refused, named.
        torch.manual_seed(3)
        for size, shapes in [((6, 6), [(2, 3, 14, 14), (1, 3, 20, 26), (1, 3, 8, 8)]), ((12, 12), [(2, 3, 14, 14), (1, 3, 26, 38)])]:
            with self.subTest(size=size):
                model = nn.Sequential(nn.Conv2d(3, 5, 3), nn.AdaptiveAvgPool2d(size), nn.ReLU()).eval()
                low = lowered(model, torch.randn(1, 3, 14, 14), on_other_shapes="replan")
                self.assertNotIn("aten::adaptive_avg_pool2d", kept_kinds(low))
                for shape in shapes:
                    x = torch.randn(*shape)
                    with torch.no_grad():
                        got, want = low(x), model(x)
                    self.assertEqual(got.shape, want.shape, shape)
                    self.assertLess(relative_error(got, want), 1e-4, shape)
                with self.assertRaisesRegex(RuntimeError, r"adaptive_avg_pool2d to %dx%d is given 13x13: windows of unequal sizes"
                                                          % size):
                    low(torch.randn(1, 3, 15, 15))

    def test_another_rank_is_never_replanned(self):
        # Re-planning serves other sizes; another rank (or dtype) is the input spec's error, which
        # names the region (the backend's own refusals: tests/xnnpack_shape_inference.cpp).
        low = lowered(self.model, self.x, on_other_shapes="replan")
        with self.assertRaises(RuntimeError) as raised:
            low(torch.rand(3, 16, 16))
        message = str(raised.exception)
        self.assertIn("backend 'xnnpack', method 'forward_region_0': argument 1 ('input_0') must be Float [1, 3, 16, 16]", message)
        self.assertIn("got Float [3, 16, 16]", message)

    def test_pointwise_fusion_replans_as_it_is(self):
        # (A backend without replan is refused at lowering: tests/test_partition_boundaries.cpp.)
        import torch_delegate as td
        if not os.environ.get("TD_POINTWISE_LIBRARY"):
            self.skipTest("TD_POINTWISE_LIBRARY not set")
        torch.ops.load_library(os.environ["TD_POINTWISE_LIBRARY"])
        model = nn.Sequential(nn.GELU(), nn.SiLU())
        low = td.lower(torch.jit.script(model), "pointwise_fusion", partial=True, example_inputs=(self.x,), on_other_shapes="replan")
        other = torch.rand(2, 3, 20, 24)
        with torch.no_grad():
            self.assertLess(relative_error(low(other), model(other)), 1e-5)

    def test_concurrent_calls_on_one_module(self):
        import threading
        low = lowered(self.model, self.x)
        inputs = [torch.rand(1, 3, 16, 16) for _ in range(8)]
        with torch.no_grad():
            wanted = [self.model(x) for x in inputs]
        failures = []

        def worker(offset):
            with torch.no_grad():
                for call in range(40):
                    k = (offset + call) % len(inputs)
                    if relative_error(low(inputs[k]), wanted[k]) > 1e-4:
                        failures.append((offset, call))

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.assertEqual(failures, [])

    def test_without_example_inputs_preprocess_asks_for_them(self):
        with self.assertRaises(torch_delegate.Error) as raised:
            torch_delegate.lower(torch.jit.script(self.model), "xnnpack", partial=True)
        self.assertIn("is not known at lowering time: lower with example inputs", str(raised.exception))


class Conversions(unittest.TestCase):
    def test_conversions_are_placed_and_reported(self):
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Conv2d(3, 8, 3)
                self.same = nn.Conv2d(8, 8, 3, padding="same")  # the str overload: left to ATen
                self.b = nn.Conv2d(8, 4, 3)

            def forward(self, x):
                return self.b(F.relu(self.same(F.relu(self.a(x)))))

        torch.manual_seed(9)
        model = Model().eval()
        x = torch.rand(1, 3, 16, 16)
        low = lowered(model, x)
        with torch.no_grad():
            self.assertLess(relative_error(low(x), model(x)), 1e-4)
        regions = torch_delegate.report(low).methods[0].regions
        self.assertEqual(len(regions), 2, torch_delegate.report(low))
        self.assertRegex(regions[0].conversions[0], r"^input 0 \(method argument x(\.\d+)?\): to channels_last on entry$")
        self.assertTrue(regions[0].conversions[1].startswith("output 0: to contiguous before aten::conv2d at "),
                        regions[0].conversions)
        self.assertEqual(regions[1].conversions, ["input 0 (aten::conv2d): to channels_last on entry"])
        self.assertIn("aten::contiguous", str(low.forward.graph))
        # The weights the regions own left the method: only the reads TorchScript still makes are kept.
        kept_reads = sorted(k.detail for k in torch_delegate.report(low).methods[0].kept if k.kind == "prim::GetAttr")
        self.assertEqual(kept_reads, ["self.same", "self.same.bias", "self.same.weight"])
        self.assertIn("conversion: output 0: to contiguous before aten::conv2d", str(torch_delegate.report(low)))

    def test_none_between_two_regions(self):
        torch.manual_seed(10)
        model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()).eval()
        x = torch.rand(1, 3, 8, 8)
        low = lowered(model, x, frozen=True)
        regions = torch_delegate.report(low).methods[0].regions
        self.assertEqual(len(regions), 1)
        self.assertEqual(len(regions[0].conversions), 1, regions[0].conversions)
        self.assertRegex(regions[0].conversions[0], r"^input 0 \(method argument input(\.\d+)?\): to channels_last on entry$")


class SeveralBackends(unittest.TestCase):
    """["xnnpack", "pointwise_fusion"]: convolutions to xnnpack, the elementwise chains it cannot run
    (tanh, gelu) to pointwise_fusion, one child each; saved and loaded in stock Python and the
    lite interpreter; with fallback, a process without xnnpack still runs pointwise_fusion's regions."""

    def setUp(self):
        if not os.environ.get("TD_POINTWISE_LIBRARY"):
            self.skipTest("TD_POINTWISE_LIBRARY not set")
        torch.ops.load_library(os.environ["TD_POINTWISE_LIBRARY"])
        torch.manual_seed(2)

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(3, 8, 3, padding=1)
                self.bn = nn.BatchNorm2d(8)
                self.head = nn.Conv2d(8, 4, 1)

            def forward(self, x):
                y = torch.relu(self.bn(self.conv(x)))
                z = torch.tanh(y) * 0.5 + F.gelu(y)  # neither tanh nor gelu is in XNNPACK 2022
                return self.head(z)

        self.model = Block().eval()
        self.x = torch.rand(1, 3, 12, 12)
        with torch.no_grad():
            self.want = self.model(self.x)

    def lowered(self, **knobs):
        return torch_delegate.lower(torch.jit.script(self.model), ["xnnpack", "pointwise_fusion"], partial=True,
                                    example_inputs=(self.x,), **knobs)

    def test_each_region_goes_to_the_first_backend_that_takes_it(self):
        low = self.lowered()
        report = torch_delegate.report(low)
        self.assertEqual(report.backends, ["xnnpack", "pointwise_fusion"])
        by_backend = {}
        for region in report.methods[0].regions:
            by_backend.setdefault(region.backend, set()).update(region.kinds)
        self.assertIn("aten::conv2d", by_backend["xnnpack"])
        self.assertTrue({"aten::tanh", "aten::gelu"} <= by_backend["pointwise_fusion"], by_backend)
        self.assertNotIn("aten::conv2d", by_backend["pointwise_fusion"])
        with torch.no_grad():
            self.assertLess(relative_error(low(self.x), self.want), 1e-4)
        path = os.path.join(WORKDIR, "two_backends.pt")
        low.save(path)
        self.assertEqual(sorted(torch_delegate.backends_needed(path)), ["pointwise_fusion", "xnnpack"])
        with torch.no_grad():
            self.assertLess(relative_error(torch.jit.load(path)(self.x), self.want), 1e-4)
        from torch.jit.mobile import _load_for_lite_interpreter
        low._save_for_lite_interpreter(path + "l")
        with torch.no_grad():
            self.assertLess(relative_error(_load_for_lite_interpreter(path + "l")(self.x), self.want), 1e-4)
        plan = torch_delegate.plan(torch.jit.script(self.model), ["xnnpack", "pointwise_fusion"], example_inputs=(self.x,))
        self.assertEqual(plan.methods, report.methods)  # the dry run says what lowering did

    def test_fallback_with_one_backend_missing(self):
        low = self.lowered(fallback=True)
        path = os.path.join(WORKDIR, "two_backends_fallback.pt")
        low.save(path)
        torch.save(self.x, os.path.join(WORKDIR, "two_x.pt"))
        torch.save(self.want, os.path.join(WORKDIR, "two_want.pt"))
        script = ("import sys, torch; torch.ops.load_library(sys.argv[1]); torch.ops.load_library(sys.argv[2]); "
                  "m = torch.jit.load(sys.argv[3]); x = torch.load(sys.argv[4]); "
                  "print(m.__delegate.td_is_available(), m.__delegate_pointwise_fusion.td_is_available(), "
                  "float(((m(x) - torch.load(sys.argv[5])).abs().max())))")
        env = dict(os.environ, TD_XNNPACK_UNAVAILABLE="1")
        out = subprocess.run([sys.executable, "-c", script, LIBRARY, os.environ["TD_POINTWISE_LIBRARY"], path,
                              os.path.join(WORKDIR, "two_x.pt"), os.path.join(WORKDIR, "two_want.pt")],
                             env=env, capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        xnnpack_available, pointwise_available, error = out.stdout.split()
        self.assertEqual((xnnpack_available, pointwise_available), ("False", "True"))
        self.assertLess(float(error), 1e-4)

    def test_measured_then_replayed(self):
        """measure=True: each candidate region timed on its backend and in TorchScript, delegated only
        where the backend is faster; replay= repeats a plan's decisions without timing."""
        plan = torch_delegate.plan(torch.jit.script(self.model), ["xnnpack", "pointwise_fusion"], example_inputs=(self.x,),
                                   measure=True)
        for region in plan.methods[0].regions:
            self.assertGreaterEqual(region.backend_ms, 0)
            # Faster beyond the spread, or not separable and given by the list's order (issue 40).
            if region.decision.startswith("faster on "):
                self.assertLessEqual(region.backend_ms, region.torchscript_ms)
            else:
                self.assertTrue(region.decision.startswith("not separable: of "), region.decision)
        measured_kept = [node for node in plan.methods[0].kept
                         if node.reason in ("slower on the backend", "gain below the minimum")]
        for node in measured_kept:
            self.assertIn("ms in TorchScript", node.detail)
        # Not vacuous: candidate regions were measured (delegated, or kept for their times).
        self.assertTrue(plan.methods[0].regions or measured_kept)
        low = self.lowered(replay=plan)
        self.assertEqual(torch_delegate.report(low).methods[0].regions, plan.methods[0].regions)
        with torch.no_grad():
            self.assertLess(relative_error(low(self.x), self.want), 1e-4)
        with self.assertRaises(TypeError):
            self.lowered(replay="a plan")
        with self.assertRaises(ValueError):  # a partial-lowering knob
            torch_delegate.lower(torch.jit.script(self.model), "xnnpack", measure=True)
        with self.assertRaises(ValueError):
            torch_delegate.lower(torch.jit.script(self.model), "xnnpack", min_gain=0.5)

    def test_min_gain(self):
        """min_gain: no region saves 99 % of its method, so each region measured faster stays in
        TorchScript as gaining too little, with the saving and the method's time; one slower stays
        as slower; one whose times do not separate goes by the list's order (issue 40)."""
        plan = torch_delegate.plan(torch.jit.script(self.model), ["xnnpack", "pointwise_fusion"], example_inputs=(self.x,),
                                   measure=True, min_gain=0.99)
        for region in plan.methods[0].regions:
            self.assertTrue(region.decision.startswith("not separable: of "), region.decision)
            self.assertTrue(region.decision.endswith("; delegated, as the list's order says"), region.decision)
        # Each candidate region is measured; which way each goes depends on the machine
        # (tests/test_partition_tuning.cpp checks the rule by sleeps).
        kept = {node.reason for node in plan.methods[0].kept} & {"gain below the minimum", "slower on the backend"}
        self.assertTrue(kept or plan.methods[0].regions)
        for node in plan.methods[0].kept:
            if node.reason == "gain below the minimum":
                self.assertRegex(node.detail, r" ms in TorchScript: saves [0-9.e-]+ ms(; the [0-9]+ regions that save least "
                                              r"save [0-9.e-]+ ms together)?, less than 99 % of forward "
                                              r"\([0-9.e-]+ ms, min_gain\)$")
        low = torch_delegate.lower(torch.jit.script(self.model), ["xnnpack", "pointwise_fusion"], partial=True,
                                   example_inputs=(self.x,), replay=plan)
        self.assertEqual(torch_delegate.report(low).methods[0].regions, plan.methods[0].regions)
        with torch.no_grad():
            self.assertLess(relative_error(low(self.x), self.want), 1e-4)
        # choose_order: the list's order, another backend first, or (where a lowering mixes
        # backends) one backend alone, whichever runs the method faster.
        low = torch_delegate.lower(torch.jit.script(self.model), ["xnnpack", "pointwise_fusion"], partial=True,
                                   example_inputs=(self.x,), measure=True, choose_order=True)
        self.assertIn(torch_delegate.report(low).backends,
                      (["xnnpack", "pointwise_fusion"], ["pointwise_fusion", "xnnpack"], ["xnnpack"], ["pointwise_fusion"]))
        with torch.no_grad():
            self.assertLess(relative_error(low(self.x), self.want), 1e-4)
        with self.assertRaisesRegex(torch_delegate.Error, "choose_order compares measured lowerings: set measure"):
            torch_delegate.lower(torch.jit.script(self.model), ["xnnpack", "pointwise_fusion"], partial=True,
                                 example_inputs=(self.x,), choose_order=True)
        with self.assertRaises(ValueError):  # a partial-lowering knob
            torch_delegate.lower(torch.jit.script(self.model), "xnnpack", choose_order=True)
        for bad in (-0.1, 1.0, True, "1%"):
            with self.assertRaises(ValueError) as caught:
                torch_delegate.plan(torch.jit.script(self.model), "xnnpack", example_inputs=(self.x,), measure=True,
                                    min_gain=bad)
            self.assertEqual(str(caught.exception), "torch_delegate.plan: min_gain must be a share of the method's time "
                                                    f"in [0, 1) (0.01: 1 %), got {bad!r}")

    def test_transformer_layer(self):
        """A BERT-shaped encoder layer, written out: its Linears go to xnnpack, GELU to
        pointwise_fusion, attention's matmuls and the layer norms stay in TorchScript."""
        class Layer(nn.Module):
            def __init__(self, d=32, heads=4, ff=64):
                super().__init__()
                self.heads = heads
                self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
                self.ff1, self.ff2 = nn.Linear(d, ff), nn.Linear(ff, d)
                self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)

            def forward(self, x):
                b, t, d = x.shape
                q, k, v = self.qkv(x).chunk(3, dim=-1)
                q = q.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
                k = k.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
                v = v.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
                attention = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * 0.25, dim=-1)
                x = self.norm1(x + self.out(torch.matmul(attention, v).transpose(1, 2).reshape(b, t, d)))
                return self.norm2(x + self.ff2(F.gelu(self.ff1(x))))

        model, x = Layer().eval(), torch.rand(2, 10, 32)
        low = torch_delegate.lower(torch.jit.script(model), ["xnnpack", "pointwise_fusion"], partial=True,
                                   example_inputs=(x,))
        by_backend = {}
        for region in torch_delegate.report(low).methods[0].regions:
            by_backend.setdefault(region.backend, set()).update(region.kinds)
        self.assertIn("aten::linear", by_backend["xnnpack"])
        self.assertIn("aten::gelu", by_backend["pointwise_fusion"])
        self.assertIn("aten::matmul", kept_kinds(low))
        self.assertIn("aten::layer_norm", kept_kinds(low))
        with torch.no_grad():
            self.assertLess(relative_error(low(x), model(x)), 1e-4)

    def test_errors(self):
        with self.assertRaises(ValueError) as raised:
            torch_delegate.lower(torch.jit.script(self.model), ["xnnpack", "pointwise_fusion"])
        self.assertIn("several backends (xnnpack, pointwise_fusion) need partial=True", str(raised.exception))
        with self.assertRaises(TypeError):
            torch_delegate.lower(torch.jit.script(self.model), [], partial=True)
        with self.assertRaises(torch_delegate.Error) as raised:
            torch_delegate.lower(torch.jit.script(self.model), ["xnnpack", "xnnpack"], partial=True, example_inputs=(self.x,))
        self.assertIn("the backend is listed twice in the priority list (xnnpack, xnnpack)", str(raised.exception))


class KeptWithTheirReason(unittest.TestCase):
    def test_reflect_padding_cat_and_training_stay_in_torchscript(self):
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.reflect = nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect")
                self.conv = nn.Conv2d(8, 4, 3)

            def forward(self, x):
                y = self.reflect(x)
                return self.conv(torch.cat([y, y], 1))

        torch.manual_seed(8)
        model = Model().eval()
        x = torch.rand(1, 3, 12, 12)
        low = lowered(model, x)
        with torch.no_grad():
            self.assertLess(relative_error(low(x), model(x)), 1e-4)
        kept = kept_kinds(low)
        self.assertEqual(str(kept["aten::pad"] if "aten::pad" in kept else kept.get("aten::reflection_pad2d")),
                         "unsupported kind")
        self.assertEqual(str(kept["aten::cat"]), "unsupported kind")
        self.assertIn("aten::conv2d", delegated_kinds(low))

    def test_dropout_in_training_mode(self):
        """p = 0 is the identity in any mode (Swin calls its attention dropout so): gone from the
        graph partitioning sees, conv and relu in one region; p > 0 in training mode is random: kept."""
        class Model(nn.Module):
            def __init__(self, p):
                super().__init__()
                self.p = p
                self.conv = nn.Conv2d(3, 4, 3)

            def forward(self, x):
                return torch.relu(F.dropout(self.conv(x), self.p, True))

        x = torch.rand(1, 3, 8, 8)
        identity = Model(0.0).eval()
        low = lowered(identity, x)
        self.assertNotIn("aten::dropout", kept_kinds(low))
        self.assertEqual(delegated_kinds(low), {"aten::conv2d", "aten::relu"})
        with torch.no_grad():
            self.assertLess(relative_error(low(x), identity(x)), 1e-4)
        self.assertEqual(str(kept_kinds(lowered(Model(0.5).eval(), x))["aten::dropout"]), "unsupported kind")

    def test_region_in_a_branch_without_shapes_is_refused(self):
        """Example inputs give shapes to the top level only: a linear in an if body (as in
        nn.MultiheadAttention) is refused with its reason instead of failing the lowering."""
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = nn.Linear(8, 8)
                self.outer = nn.Linear(8, 8)

            def forward(self, x, flag: bool):
                if flag:
                    x = self.inner(x)
                return self.outer(x)

        model, x = Model().eval(), torch.rand(2, 8)
        low = torch_delegate.lower(torch.jit.script(model), "xnnpack", partial=True, example_inputs=(x, True))
        self.assertEqual(str(kept_kinds(low)["aten::linear"]), "refused by the backend")
        kept = next(k for k in torch_delegate.report(low).methods[0].kept if k.kind == "aten::linear")
        self.assertEqual(kept.detail, "1-node region: in an if or loop body, aten::linear's sizes are not known from the "
                                      "example inputs")
        self.assertIn("aten::linear", delegated_kinds(low))  # the top-level one
        with torch.no_grad():
            for flag in (True, False):
                self.assertLess(relative_error(low(x, flag), model(x, flag)), 1e-4)


if __name__ == "__main__":
    unittest.main(verbosity=2)
