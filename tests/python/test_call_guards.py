"""What a call of a lowered model does with inputs a backend cannot run as asked (issue 37):
empty tensors (a batch of 0, a zero-sized spatial dimension) and autograd (grad mode on and an
input that requires grad). Every backend and path: whole regions with fixed shapes, re-planned
shapes, the TorchScript path kept by fallback_when_unavailable=True or on_other_shapes="torchscript", in process
and after save/load. Never an abort: eager's result, or the error that names the way out.

Environment: PYTHONPATH (the built package), TD_XNNPACK_LIBRARY, TD_ONEDNN_LIBRARY (empty when
not built), TD_POINTWISE_LIBRARY, TD_WORKDIR (a scratch directory).
"""
import io
import os
import re
import unittest

import torch
import torch.nn as nn

import torch_delegate

WORKDIR = os.environ.get("TD_WORKDIR", ".")
LIBRARIES = {name: os.environ.get(variable, "") for name, variable in
             (("xnnpack", "TD_XNNPACK_LIBRARY"), ("onednn", "TD_ONEDNN_LIBRARY"), ("pointwise_fusion", "TD_POINTWISE_LIBRARY"))}
for library in LIBRARIES.values():
    if library:
        torch.ops.load_library(library)
CNN_BACKENDS = [name for name in ("xnnpack", "onednn") if LIBRARIES[name]]
torch.set_num_threads(2)


class SmallNet(nn.Module):
    """A CNN body and head as torchvision writes them: conv, BatchNorm, ReLU, a residual add,
    pooling, flatten, a linear classifier."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True))
        self.body = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        y = self.stem(x)
        y = torch.relu(self.body(y) + y)
        return self.fc(torch.flatten(self.pool(y), 1))


def small_net():
    torch.manual_seed(37)
    model = SmallNet().eval()
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):  # statistics that are not the identity
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
            module.weight.data.uniform_(0.5, 1.5)
            module.bias.data.uniform_(-0.5, 0.5)
    return model


X = torch.randn(1, 3, 32, 32)


def lowered(backend, frozen=True, **knobs):
    scripted = torch.jit.script(small_net())
    if frozen:
        scripted = torch.jit.freeze(scripted)
    return torch_delegate.lower(scripted, [backend], partial=True, example_inputs=(X,), **knobs)


def reloaded(module):
    buffer = io.BytesIO()
    torch.jit.save(module, buffer)
    buffer.seek(0)
    return torch.jit.load(buffer)


def both(module):
    """The lowered module in process and after save/load."""
    return (("in process", module), ("saved and loaded", reloaded(module)))


def empty_error(backend, sizes):
    return (r"torch-delegate: backend '" + backend + r"', method 'forward_region_\d+': argument \d+ \('[^']+'\) is empty "
            r"\(Float \[" + re.escape(", ".join(str(s) for s in sizes)) + r"\]\): backend '" + backend + r"' does not run "
            r"tensors with no elements\. Skip empty inputs before the call, or lower with fallback_when_unavailable=True or "
            r"on_other_shapes=\"torchscript\" \(C\+\+: partition_options::fallback_when_unavailable, other_shapes::torchscript\) "
            r"so that TorchScript runs them")


def autograd_error(backend):
    return (r"torch-delegate: backend '" + backend + r"', method 'forward_region_\d+': autograd: argument \d+ \('[^']+'\) "
            r"requires grad and grad mode is on, but output 1 comes back from backend '" + backend + r"' without autograd "
            r"history \(the backend runs outside autograd\): its gradient would be silently lost\. Call the model under "
            r"torch\.no_grad\(\) or torch\.inference_mode\(\) \(C\+\+: torch::NoGradGuard or c10::InferenceMode\), or lower "
            r"it with fallback_when_unavailable=True or on_other_shapes=\"torchscript\" so that such calls run in TorchScript")


@unittest.skipUnless(CNN_BACKENDS, "neither xnnpack nor onednn is built")
class EmptyInputs(unittest.TestCase):
    """A batch of 0 and a zero-sized spatial dimension, on each path."""

    @unittest.skipUnless(LIBRARIES["xnnpack"], "xnnpack is not built")
    def test_replanned_shapes_refuse_empty_tensors_with_the_way_out(self):
        # XNNPACK asserted (input_data != NULL) and ended the process here. (onednn does not
        # re-plan: with example inputs its regions have fixed shapes.)
        for backend in ["xnnpack"]:
            for where, module in both(lowered(backend, on_other_shapes="replan")):
                for sizes in ((0, 3, 32, 32), (1, 3, 0, 32), (2, 3, 32, 0)):
                    with self.subTest(backend=backend, where=where, sizes=sizes), torch.no_grad():
                        with self.assertRaisesRegex(RuntimeError, empty_error(backend, sizes)):
                            module(torch.randn(*sizes))
                with self.subTest(backend=backend, where=where, after="a non-empty call"), torch.no_grad():
                    # The module is intact: other shapes still re-plan and match eager.
                    x = torch.randn(2, 3, 40, 40)
                    torch.testing.assert_close(module(x), small_net()(x), rtol=1e-4, atol=1e-4)

    def test_fixed_shapes_refuse_them_before_the_input_spec(self):
        # The empty tensor is named as such (not only as another shape), with the way out; with
        # on_other_shapes="error", another shape is the input spec's error (by default it re-plans).
        for backend in CNN_BACKENDS:
            for where, module in both(lowered(backend, on_other_shapes="error")):
                with self.subTest(backend=backend, where=where), torch.no_grad():
                    with self.assertRaisesRegex(RuntimeError, empty_error(backend, (0, 3, 32, 32))):
                        module(torch.randn(0, 3, 32, 32))
                    with self.assertRaisesRegex(RuntimeError, r"must be Float \[1, 3, 32, 32\].*got Float \[2, 3, 32, 32\]"):
                        module(torch.randn(2, 3, 32, 32))

    def test_the_torchscript_path_gives_eagers_result(self):
        want = small_net()(torch.randn(0, 3, 32, 32))
        self.assertEqual(tuple(want.shape), (0, 10))
        for backend in CNN_BACKENDS:
            replan = [{"fallback": True, "on_other_shapes": "replan"}] if backend == "xnnpack" else []
            for knobs in [{"on_other_shapes": "torchscript"}, {"fallback": True}] + replan:
                module = lowered(backend, **knobs)
                self.assertTrue(torch_delegate.report(module).methods[0].regions, knobs)
                for where, loaded in both(module):
                    with self.subTest(backend=backend, knobs=knobs, where=where), torch.no_grad():
                        got = loaded(torch.randn(0, 3, 32, 32))
                        self.assertEqual(tuple(got.shape), (0, 10))
                        # and a non-empty call still runs on the backend
                        torch.testing.assert_close(loaded(X), small_net()(X), rtol=1e-4, atol=1e-4)

    def test_a_backend_that_runs_empty_tensors_gets_them(self):
        # pointwise_fusion declares runs_empty_tensors: an empty result, as eager gives.
        def f(x, h):
            return torch.sigmoid(x) * 2.0 + torch.tanh(h) - 1.0

        scripted = torch.jit.script(f)

        class Wrap(nn.Module):
            def forward(self, x, h):
                return torch.sigmoid(x) * 2.0 + torch.tanh(h) - 1.0

        module = torch_delegate.lower(torch.jit.script(Wrap()), "pointwise_fusion", partial=True)
        self.assertTrue(torch_delegate.report(module).methods[0].regions)
        for where, loaded in both(module):
            for sizes in ((0,), (0, 4), (3, 0, 2)):
                with self.subTest(where=where, sizes=sizes), torch.no_grad():
                    x, h = torch.randn(*sizes), torch.randn(*sizes)
                    got = loaded(x, h)
                    self.assertEqual(got.shape, scripted(x, h).shape)


@unittest.skipUnless(CNN_BACKENDS, "neither xnnpack nor onednn is built")
class Autograd(unittest.TestCase):
    """Grad mode on and an input that requires grad: never a result without history."""

    def test_a_region_refuses_to_drop_the_gradient_and_names_the_way_out(self):
        for backend in CNN_BACKENDS:
            for where, module in both(lowered(backend)):
                with self.subTest(backend=backend, where=where):
                    x = X.clone().requires_grad_()
                    with self.assertRaisesRegex(RuntimeError, autograd_error(backend)):
                        module(x)
                    # The ways out the message names.
                    with torch.no_grad():
                        torch.testing.assert_close(module(x), small_net()(X), rtol=1e-4, atol=1e-4)
                    with torch.inference_mode():
                        torch.testing.assert_close(module(x), small_net()(X), rtol=1e-4, atol=1e-4)

    def test_inference_without_no_grad_still_runs(self):
        # A plain input: nothing asks for a gradient (the weights are the backend's).
        for backend in CNN_BACKENDS:
            for frozen in (True, False):
                module = lowered(backend, frozen=frozen)
                with self.subTest(backend=backend, frozen=frozen):
                    torch.testing.assert_close(module(X), small_net()(X).detach(), rtol=1e-4, atol=1e-4)

    def test_the_kept_torchscript_path_runs_backward(self):
        model = small_net()
        x_eager = X.clone().requires_grad_()
        model(x_eager).sum().backward()
        for backend in CNN_BACKENDS:
            for knobs in ({"fallback": True}, {"on_other_shapes": "torchscript"}):
                for where, module in both(lowered(backend, **knobs)):
                    with self.subTest(backend=backend, knobs=knobs, where=where):
                        x = X.clone().requires_grad_()
                        y = module(x)
                        self.assertIsNotNone(y.grad_fn)
                        y.sum().backward()
                        torch.testing.assert_close(x.grad, x_eager.grad, rtol=1e-4, atol=1e-5)
                        with torch.no_grad():  # and without grad, the backend runs it
                            torch.testing.assert_close(module(X), model(X).detach(), rtol=1e-4, atol=1e-4)

    def test_parameters_that_require_grad_do_not_count(self):
        # A region whose input requires grad only because TorchScript computed it from a
        # parameter (a non-frozen model): inference outside no_grad runs, on the backend.
        class Head(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(8, 8)

            def forward(self, x):
                return torch.sigmoid(self.fc(x)) * 2.0 - torch.tanh(self.fc(x))

        torch.manual_seed(0)
        model = Head()
        module = torch_delegate.lower(torch.jit.script(model), "pointwise_fusion", partial=True)
        self.assertTrue(torch_delegate.report(module).methods[0].regions)
        x = torch.randn(4, 8)
        for where, loaded in both(module):
            with self.subTest(where=where):
                torch.testing.assert_close(loaded(x), model(x).detach())

    def test_pointwise_fusion_refuses_too(self):
        class Gelu(nn.Module):
            def forward(self, x):
                return 0.5 * x * (1.0 + torch.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))

        module = torch_delegate.lower(torch.jit.script(Gelu()), "pointwise_fusion", partial=True)
        x = torch.randn(16, requires_grad=True)
        with self.assertRaisesRegex(RuntimeError, autograd_error("pointwise_fusion")):
            module(x)
        with torch.no_grad():
            module(x)
        kept = torch_delegate.lower(torch.jit.script(Gelu()), "pointwise_fusion", partial=True, fallback_when_unavailable=True)
        kept(x).sum().backward()
        want = x.detach().clone().requires_grad_()
        Gelu()(want).sum().backward()
        torch.testing.assert_close(x.grad, want.grad)


if __name__ == "__main__":
    unittest.main(verbosity=2)
