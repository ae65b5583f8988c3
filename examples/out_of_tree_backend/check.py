"""Loads libcblas_linear.so (built out of tree), lowers a model that mixes linears and other ops
partially to "cblas_linear", and checks the result against eager, after a save and load too.

Usage: check.py <libcblas_linear.so> <work dir>"""
import os
import sys

import torch

import torch_delegate

torch.ops.load_library(sys.argv[1])
workdir = sys.argv[2]


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = torch.nn.Linear(32, 64), torch.nn.Linear(64, 64), torch.nn.Linear(64, 10)

    def forward(self, x):
        y = torch.nn.functional.gelu(self.b(torch.relu(self.a(x))))
        return torch.softmax(self.c(y), dim=-1)  # the softmax stays in TorchScript


torch.manual_seed(0)
model = Model().eval()
x = torch.randn(5, 32)
lowered = torch_delegate.lower(torch.jit.freeze(torch.jit.script(model)), "cblas_linear", partial=True,
                               example_inputs=(x,))
report = torch_delegate.report(lowered)
print(report)
regions = [r for m in report.methods for r in m.regions]
assert len(regions) == 1 and regions[0].backend == "cblas_linear", report
path = os.path.join(workdir, "cblas_linear.pt")
lowered.save(path)
loaded = torch_delegate.load(path)
with torch.no_grad():
    want = model(x)
    for got in (lowered(x), loaded(x)):
        # Three sums of at most 64 products in float32: 3 * 64 * 2^-24 of the largest output.
        difference = (got - want).abs().max().item()
        assert difference <= 3 * 64 * 2.0 ** -24 * max(want.abs().max().item(), 1.0), difference
print("cblas_linear: ok")
