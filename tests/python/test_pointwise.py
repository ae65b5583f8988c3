"""The pointwise_fusion backend from stock Python PyTorch (Debian's python3-torch 1.13).

Run by `meson test` with /usr/bin/python3; the environment gives
  TD_POINTWISE_LIBRARY  libpointwise_fusion.so (registers the backend when loaded)
  TD_FEED_FORWARD       the C++ feed_forward example (partially lowers a block and saves it)
  TD_WORKDIR            a directory for files
"""
import math
import os
import subprocess
import unittest

import torch
import torch.nn.functional as F
from torch.jit.mobile import _load_for_lite_interpreter

torch.ops.load_library(os.environ["TD_POINTWISE_LIBRARY"])
WORKDIR = os.environ.get("TD_WORKDIR", ".")


def path(name):
    return os.path.join(WORKDIR, f"python_pointwise_{os.getpid()}_{name}")


class Gelu9(torch.nn.Module):
    """GELU written with the tanh formula, as models written before F.gelu(approximate=) do."""

    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class SwishGate(torch.nn.Module):
    def forward(self, x, h):
        return F.silu(x) * h + torch.clamp(h, min=0.0), x > h


class PointwiseFromPython(unittest.TestCase):
    def test_partially_lowered_block_saved_in_cpp_runs_in_python(self):
        fused_path, original_path = path("fused.pt"), path("original.pt")
        subprocess.run([os.environ["TD_FEED_FORWARD"], fused_path, original_path], check=True, stdout=subprocess.DEVNULL)
        fused, original = torch.jit.load(fused_path), torch.jit.load(original_path)
        x = torch.randn(32, 64)
        torch.testing.assert_close(fused(x), original(x), rtol=1e-5, atol=1e-6)
        # The Linears stay in TorchScript; the regions are calls into the delegate child.
        code = fused.code
        self.assertIn("torch.linear", code)
        self.assertIn("self.__delegate", code)
        self.assertIn("forward_region_0: 8 nodes", fused._torch_delegate_report)

    def test_whole_method_lowering_of_a_python_module(self):
        # torch._C._jit_to_backend (LibTorch's API) lowers whole methods; every node must be fused.
        for module, inputs in [(Gelu9(), (torch.randn(1000),)), (SwishGate(), (torch.randn(4, 50), torch.randn(50)))]:
            scripted = torch.jit.script(module)
            lowered = torch._C._jit_to_backend("pointwise_fusion", scripted, {"forward": {"": ""}})
            saved = path(type(module).__name__ + ".pt")
            lowered.save(saved)
            loaded = torch.jit.load(saved)
            expected = scripted(*inputs)
            got = loaded(*inputs)
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)

    def test_lite_interpreter(self):
        scripted = torch.jit.script(Gelu9())
        lowered = torch._C._jit_to_backend("pointwise_fusion", scripted, {"forward": {"": ""}})
        saved = path("gelu_lite.ptl")
        lowered._save_for_lite_interpreter(saved)
        mobile = _load_for_lite_interpreter(saved)
        x = torch.randn(300)
        torch.testing.assert_close(mobile(x), scripted(x), rtol=1e-5, atol=1e-6)

    def test_wrong_dtype_names_the_op_and_the_line(self):
        scripted = torch.jit.script(SwishGate())
        lowered = torch._C._jit_to_backend("pointwise_fusion", scripted, {"forward": {"": ""}})
        with self.assertRaises(Exception) as raised:
            lowered(torch.ones(3), torch.ones(3, dtype=torch.float64))
        message = str(raised.exception)
        self.assertIn("pointwise_fusion: aten::mul expects float32 tensors; input 2 is a Double tensor of shape [3]", message)
        self.assertIn("test_pointwise.py", message)
        self.assertIn("return F.silu(x) * h + torch.clamp(h, min=0.0), x > h", message)

    def test_profiler_sees_the_fused_region(self):
        scripted = torch.jit.script(Gelu9())
        lowered = torch._C._jit_to_backend("pointwise_fusion", scripted, {"forward": {"": ""}})
        x = torch.randn(1 << 16)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
            lowered(x)
        names = [event.name for event in profile.events()]
        self.assertTrue(any("aten::tanh (" in name for name in names), names)


if __name__ == "__main__":
    unittest.main(verbosity=2)
