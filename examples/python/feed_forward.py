"""A model written in Python, partially lowered to pointwise_fusion from Python, saved, loaded
and run: the Linears stay in TorchScript, the GELU written out and the residual tail are fused.

    PYTHONPATH=<build>/python /usr/bin/python3 examples/python/feed_forward.py \
        <build>/backends/pointwise_fusion/libpointwise_fusion.so

It saves feed_forward.pt in the working directory.
Runs as a test (`meson test`); docs/python.md shows its code and what it prints.
"""
import math
import sys

import torch

# [session]
import torch_delegate

torch.ops.load_library(sys.argv[1])  # libpointwise_fusion.so: registers the backend


class FeedForward(torch.nn.Module):
    """A transformer feed-forward block: Linear -> GELU (the tanh formula, written out) -> Linear,
    then a residual add and a scale."""

    def __init__(self, width: int = 256, hidden: int = 1024):
        super().__init__()
        self.up = torch.nn.Linear(width, hidden)
        self.down = torch.nn.Linear(hidden, width)

    def forward(self, x):
        h = self.up(x)
        h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))
        return (self.down(h) + x) * 0.5


model = FeedForward().eval()
scripted = torch.jit.script(model)
lowered = torch_delegate.lower(scripted, "pointwise_fusion", partial=True)
lowered.save("feed_forward.pt")

loaded = torch_delegate.load("feed_forward.pt")  # checks that pointwise_fusion is registered
x = torch.randn(64, 256)
torch.testing.assert_close(loaded(x), model(x), rtol=1e-5, atol=1e-5)
report = torch_delegate.report(loaded)  # the delegation report, saved with the module
# [session]

print("--- output: backends ---")
for backend in torch_delegate.backends():
    print(backend)
print("--- end output ---")

print("--- output: report ---")
print(torch_delegate.report(loaded), end="")
print("--- end output ---")
print("--- output: data ---")
for region in report.methods[0].regions:
    print(f"{region.name}: {region.node_count} nodes, {', '.join(region.kinds)}")
print("--- end output ---")
assert [region.node_count for region in report.methods[0].regions] == [8, 2], report
print("ok: outputs equal eager; the report survived save and load")
