"""The Python quick start, with the installed package (pip install; docs/python.md): a torchvision
model lowered to two backends named by name, saved, loaded back in a fresh process, checked
against eager, and the partition drawn. tools/pip_check runs it from a fresh virtual environment;
meson test runs it from the build tree (PYTHONPATH=build/python).   Usage: quickstart.py <directory>"""
import os
import subprocess
import sys

os.chdir(sys.argv[1] if len(sys.argv) > 1 else ".")  # where the files go

# [quickstart]
import torch
import torchvision

import torch_delegate

print(torch_delegate.__version__, [backend.name for backend in torch_delegate.installed_backends()])
model = torchvision.models.mobilenet_v3_small(weights=None).eval()
x = torch.rand(1, 3, 224, 224)
# Backends by name: load_backends=True loads the shipped xnnpack and pointwise_fusion libraries.
lowered = torch_delegate.lower(torch.jit.script(model), ["xnnpack", "pointwise_fusion"], partial=True,
                               example_inputs=(x,), load_backends=True)
print(torch_delegate.report(lowered))
lowered.save("mobilenet_v3_small.pt")
# [quickstart]

path = os.path.abspath("mobilenet_v3_small.pt")
torch.save(x, path + ".input")
with torch.no_grad():
    torch.save(model(x), path + ".expected")
# A fresh process, as a program that ships the file would: it loads what the file needs.
check = f"""
import torch, torch_delegate
print(torch_delegate.backends_needed({path!r}))
loaded = torch_delegate.load({path!r}, load_backends=True)
with torch.no_grad():
    got = loaded(torch.load({path + '.input'!r}))
want = torch.load({path + '.expected'!r})
error = ((got - want).abs().max() / want.abs().max()).item()
assert error < 1e-4, error
print("loaded in a fresh process: matches eager (relative error %.1e)" % error)
"""
subprocess.run([sys.executable, "-c", check], check=True)
with open(path + ".svg", "w") as out:
    out.write(torch_delegate.report(lowered).to_svg(lowered))
print("partition drawn:", path + ".svg")
