"""Real models through the partitioner: torchvision's architectures (python3-torchvision, random
weights, offline), each scripted and frozen, through plan, lower(partial=True), save, load and a
call, with pointwise_fusion and the demo backend, against eager.

Run by `meson test` with /usr/bin/python3 (and under AddressSanitizer by tools/sanitize); the
environment gives
  PYTHONPATH            <build>/python (the torch_delegate package)
  TD_POINTWISE_LIBRARY  libpointwise_fusion.so
  TD_BACKEND_LIBRARY    libbackend_with_compiler_demo.so
  TD_WORKDIR            a directory for files
  TD_MODELS             optional: a comma-separated subset of the models below
  TD_TORCHVISION_TABLE  optional: a file to write the regions and delegated nodes per model to

Inputs are 1x3x64x64 (vit_b_16 is built for 64x64 images) so that the sweep fits the suite's
time budget; the graphs are the same as at 224x224.
"""
import os
import unittest

import torch
import torchvision

import torch_delegate as td

from torchvision_models import selected

torch.ops.load_library(os.environ["TD_POINTWISE_LIBRARY"])
torch.ops.load_library(os.environ["TD_BACKEND_LIBRARY"])
WORKDIR = os.environ.get("TD_WORKDIR", ".")
BACKENDS = ("pointwise_fusion", "backend_with_compiler_demo")
MODELS = {
    "resnet18": {},
    "resnet50": {},
    "mobilenet_v2": {},
    "mobilenet_v3_small": {},
    "efficientnet_b0": {},
    "squeezenet1_0": {},
    "shufflenet_v2_x0_5": {},
    "regnet_y_400mf": {},
    "convnext_tiny": {},
    "vit_b_16": {"image_size": 64},
    "swin_t": {},
}
# `meson test` runs a residual CNN, one with squeeze-excitation and a transformer (swin_t: 16 s
# here, where vit_b_16 takes 51 s); the sweep every one (torchvision_models.py).
SELECTED = selected(MODELS, smoke=["resnet18", "mobilenet_v3_small", "swin_t"])


def path(name):
    return os.path.join(WORKDIR, f"torchvision_{os.getpid()}_{name}")


def build(name):
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None, **MODELS[name]).eval()
    return model, torch.randn(1, 3, 64, 64)


class TorchvisionSweep(unittest.TestCase):
    rows = []

    @classmethod
    def tearDownClass(cls):
        table = os.environ.get("TD_TORCHVISION_TABLE")
        if table:
            with open(table, "w") as out:
                out.write("model\tform\tbackend\tregions\tdelegated nodes\tkept nodes\n")
                for row in cls.rows:
                    out.write("\t".join(str(field) for field in row) + "\n")

    def check_model(self, name):
        model, x = build(name)
        with torch.no_grad():
            expected = model(x)
        scripted = torch.jit.script(model)
        forms = {"scripted": scripted, "frozen": torch.jit.freeze(torch.jit.script(model))}
        for form, module in forms.items():
            for backend in BACKENDS:
                with self.subTest(model=name, form=form, backend=backend):
                    planned = td.plan(module, backend)
                    lowered = td.lower(module, backend, partial=True)
                    got = td.report(lowered)
                    self.assertEqual(got.methods, planned.methods)
                    saved = path(f"{name}_{form}_{backend}.pt")
                    lowered.save(saved)
                    loaded = td.load(saved)
                    os.remove(saved)
                    with torch.no_grad():
                        out = loaded(x)
                    scale = float(expected.abs().max())
                    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4 * scale)
                    # The report is the model's: no region or kept node points into PyTorch's own
                    # source (torch/nn/modules, torch/nn/functional.py) instead of the model's line.
                    method = got.methods[0]
                    for entry in method.regions + method.kept:
                        self.assertNotIn("/torch/", entry.location, entry)
                    located = [e for e in method.regions + method.kept if e.location]
                    self.assertGreaterEqual(len(located), 0.98 * len(method.regions + method.kept))  # a top-level self.x read has no line
                    # In-place activations (ReLU6(inplace=True), out += identity) are made out-of-place:
                    # no convolution stays in TorchScript for a mutation.
                    mutations = [k for k in method.kept if k.reason == "mutation or aliasing"]
                    self.assertEqual([k for k in mutations if k.kind in ("aten::conv2d", "aten::batch_norm")], [])
                    if name == "mobilenet_v2":
                        activations = [k.kind for k in method.kept if k.kind.startswith("aten::hardtanh")]
                        self.assertEqual(set(activations), {"aten::hardtanh"})
                        self.assertEqual(len(activations), 35 if form == "frozen" else 68)  # scripted: both branches of use_res_connect
                    self.rows.append((name, form, backend, got.region_count, method.delegated_nodes, len(method.kept)))


def _add_model_test(name):
    def test(self):
        self.check_model(name)

    test.__name__ = f"test_{name}"
    test.__doc__ = f"{name}, scripted and frozen: plan, lower(partial=True), save, load, call == eager"
    setattr(TorchvisionSweep, test.__name__, test)


for _name in SELECTED:
    _add_model_test(_name)


if __name__ == "__main__":
    unittest.main(verbosity=2)
