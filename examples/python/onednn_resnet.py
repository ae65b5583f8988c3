"""ResNet-18 from torchvision on a priority list of backends, from Python: onednn first, xnnpack for
what onednn loses, pointwise_fusion for elementwise chains; measured, so that each region goes where
it is faster on this machine (and stays in TorchScript where neither is). Checked against eager,
saved and loaded back.   Usage: onednn_resnet.py (PYTHONPATH: the package; the backends by name)"""
import os
import tempfile

import torch
import torchvision

import torch_delegate

# [lower]
for name in ("onednn", "xnnpack", "pointwise_fusion"):
    torch_delegate.load_backend(name)
model = torchvision.models.resnet18(weights=None).eval()
x = torch.rand(1, 3, 224, 224)
lowered = torch_delegate.lower(torch.jit.script(model), ["onednn", "xnnpack", "pointwise_fusion"], partial=True,
                               example_inputs=(x,), measure=True)
for region in torch_delegate.report(lowered).methods[0].regions:
    print(region.name, region.backend, region.node_count, "nodes")
# [lower]

with torch.no_grad():
    error = ((lowered(x) - model(x)).abs().max() / model(x).abs().max()).item()
assert error < 1e-4, error
with tempfile.TemporaryDirectory() as directory:
    path = os.path.join(directory, "resnet18.pt")
    lowered.save(path)
    print("backends needed:", torch_delegate.backends_needed(path))
    with torch.no_grad():
        assert torch.allclose(torch_delegate.load(path)(x), lowered(x), atol=1e-5)
print("relative error against eager:", f"{error:.1e}")

# [cache]
# Measured again with a timing cache (here a directory of its own; by default ~/.cache/torch_delegate):
# the first lowering measures and keeps its decisions, the second times nothing.
with tempfile.TemporaryDirectory() as cache:
    stages = []
    for attempt in ("first", "second"):
        stages.clear()
        again = torch_delegate.lower(torch.jit.script(model), ["onednn", "xnnpack", "pointwise_fusion"], partial=True,
                                     example_inputs=(x,), measure=True, timing_cache=cache,
                                     progress=lambda update: stages.append(update.stage))
        print(attempt, "lowering:", "from the timing cache" if "cached" in stages else "measured")
    assert "cached" in stages and "timing" not in stages  # the second one timed nothing
# [cache]
