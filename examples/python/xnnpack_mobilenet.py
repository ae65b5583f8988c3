"""MobileNetV2 from torchvision on the xnnpack backend, from Python: partially lowered with example
inputs (so that every region knows its shapes and builds its XNNPACK runtime when it is loaded),
checked against eager, saved and loaded back.   Usage: xnnpack_mobilenet.py <libxnnpack_backend.so>"""
import os
import sys
import tempfile

import torch
import torchvision

import torch_delegate

torch.ops.load_library(sys.argv[1])  # registers the "xnnpack" backend

# [lower]
model = torchvision.models.mobilenet_v2(weights=None).eval()
x = torch.rand(1, 3, 224, 224)
lowered = torch_delegate.lower(torch.jit.freeze(torch.jit.script(model)), "xnnpack", partial=True,
                               example_inputs=(x,))
print(torch_delegate.report(lowered))
# [lower]

with torch.no_grad():
    error = ((lowered(x) - model(x)).abs().max() / model(x).abs().max()).item()
assert error < 1e-4, error
with tempfile.TemporaryDirectory() as directory:
    path = os.path.join(directory, "mobilenet_v2_xnnpack.pt")
    lowered.save(path)
    with torch.no_grad():
        assert torch.allclose(torch_delegate.load(path)(x), lowered(x))
print("relative error against eager:", f"{error:.1e}")
