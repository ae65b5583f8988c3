"""Named data from stock Python PyTorch: a module lowered to packed_linear in Python (LibTorch's
torch._C._jit_to_backend, which runs our preprocess) stores the weight its two methods share
once; the file is saved, loaded and run, also by the lite interpreter.

Environment: TD_PACKED_LINEAR_LIBRARY (libpacked_linear.so), TD_WORKDIR (a directory for files).
"""
import os
import unittest

import torch
from torch.jit.mobile import _load_for_lite_interpreter

torch.ops.load_library(os.environ["TD_PACKED_LINEAR_LIBRARY"])
WORKDIR = os.environ.get("TD_WORKDIR", ".")


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(512, 512)

    def forward(self, x):
        return self.linear(x)

    @torch.jit.export
    def encode(self, x):
        return torch.relu(self.linear(x))


def lower(module, named_data):
    spec = {"named_data": named_data, "own_copy": False, "transpose": False}
    return torch._C._jit_to_backend("packed_linear", torch.jit.script(module), {"forward": spec, "encode": spec})


class NamedDataFromPython(unittest.TestCase):
    def test_shared_weight_is_saved_once_and_runs_everywhere(self):
        torch.manual_seed(0)
        module = Encoder().eval()
        one_copy = 512 * 512 * 4
        sizes = {}
        for named_data in (True, False):
            path = os.path.join(WORKDIR, f"python_named_data_{os.getpid()}_{named_data}.pt")
            lowered = lower(module, named_data)
            lowered.save(path)
            sizes[named_data] = os.path.getsize(path)
            x = torch.randn(4, 512)
            loaded = torch.jit.load(path)
            with torch.no_grad():  # bitwise: the packed weight keeps aten::linear's layout
                self.assertTrue(torch.equal(loaded(x), module(x)))
                self.assertTrue(torch.equal(loaded.encode(x), module.encode(x)))
            lowered._save_for_lite_interpreter(path)
            mobile = _load_for_lite_interpreter(path)
            with torch.no_grad():
                self.assertTrue(torch.equal(mobile.run_method("encode", x), module.encode(x)))
            os.remove(path)
        self.assertLess(sizes[True], 1.1 * one_copy)
        self.assertGreater(sizes[False], 1.9 * one_copy)


if __name__ == "__main__":
    unittest.main()
