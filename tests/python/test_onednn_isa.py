"""The onednn backend under oneDNN's ISA caps (issue 37): no plan holds a reference kernel.

oneDNN picks each primitive's kernel by the CPU's ISA; at some ISAs it has only its reference
kernel ("ref:any", 10-100x slower) for a plan's choice (on AVX-512, a 1x1 convolution with a
residual add fused, NHWC source, plain weights; under SSE4.1, a squeeze-excitation's broadcast
multiply in a blocked layout; at AVX2, a grouped dilated convolution with a residual add). Each cap
runs in a subprocess (ONEDNN_MAX_CPU_ISA is read when the first primitive is made): SSE41, AVX2,
and the machine's own when higher. In each, torchvision's CNNs (random weights and BatchNorm
statistics, 1x3x96x96) and video models (clips of 4 frames of 48x48) lowered to ["onednn"] must match eager, list no reference kernel in the
backend's debug query (torch.ops.torch_delegate_onednn.plan_implementations), and oneDNN's own
log (ONEDNN_VERBOSE=1) of the lowered call must agree with the query. Also: the fallback order
(unfused, other layouts, ATen) walked with TD_ONEDNN_TREAT_AS_REFERENCE, and the query's error.

Environment: PYTHONPATH (the built package), TD_ONEDNN_LIBRARY (libonednn_backend.so),
TD_ONEDNN_TEST_HOOKS (libonednn_test_hooks.so: TD_ONEDNN_TREAT_AS_REFERENCE, read by it, not by the backend).
"""
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import unittest

from torchvision_models import selected

LIBRARY = os.environ["TD_ONEDNN_LIBRARY"]
# A smoke set in `meson test` (MobileNetV3's binary ops and ShuffleNetV2's concat are where
# reference kernels were found); every model in the sweep (torchvision_models.py).
# Video models (3-d convolutions; below AVX2 on ATen's conv3d, S3D's max poolings in a blocked copy).
MODELS = selected(["mobilenet_v2", "resnet18", "efficientnet_b0", "mobilenet_v3_small", "regnet_y_400mf", "squeezenet1_0",
                   "shufflenet_v2_x1_0", "r3d_18", "r2plus1d_18", "s3d"], smoke=["mobilenet_v3_small", "shufflenet_v2_x1_0", "r3d_18"])

# Runs in a subprocess with the cap set: lowers each model, checks it against eager, prints one
# JSON line per model between oneDNN's log lines of its lowered call.
CHILD = r'''
import json, sys, torch, torch.nn as nn, torchvision
import torch_delegate
torch.ops.load_library(sys.argv[1])
torch.set_num_threads(2)
from torchvision_models import randomized

for name in sys.argv[2].split(","):
    torch.manual_seed(0)
    video = name in ("r3d_18", "r2plus1d_18", "s3d")
    model = randomized(getattr(torchvision.models.video if video else torchvision.models, name)(weights=None))
    # A clip: 4 frames of 48x48 (S3D's last pooling needs 16 of 224x224).
    x = torch.rand(1, 3, 16, 224, 224) if name == "s3d" else torch.rand(1, 3, 4, 48, 48) if video else torch.rand(1, 3, 96, 96)
    with torch.no_grad():
        want = model(x)
    lowered = torch_delegate.lower(torch.jit.script(model), ["onednn"], partial=True, example_inputs=(x,))
    print("TD-BEGIN", name, flush=True)
    with torch.no_grad():
        got = lowered(x)
    print("TD-END", flush=True)
    error = ((got - want).abs().max() / want.abs().max()).item()
    try:
        plan = torch.ops.torch_delegate_onednn.plan_implementations(lowered._c)
    except (AttributeError, RuntimeError):  # a library without the query (main before issue 37): oneDNN's log still tells
        plan = None
    print("TD-RESULT " + json.dumps({"model": name, "error": error, "plan": plan}), flush=True)
'''


def run_child(models, cap=None, extra_env=None):
    """{model: (relative error, the query's list, oneDNN's log of the lowered call as (kind, impl))}"""
    env = dict(os.environ, ONEDNN_VERBOSE="1", **(extra_env or {}))
    # The child imports torchvision_models from this directory.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.dirname(os.path.abspath(__file__)), env.get("PYTHONPATH")]))
    env.pop("ONEDNN_MAX_CPU_ISA", None)
    if cap:
        env["ONEDNN_MAX_CPU_ISA"] = cap
    done = subprocess.run([sys.executable, "-c", CHILD, LIBRARY, ",".join(models)], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise AssertionError(f"cap {cap}: the child failed:\n{done.stderr[-4000:]}")
    results, log, name = {}, [], None
    for line in done.stdout.splitlines():
        if line.startswith("TD-BEGIN "):
            name, log = line.split()[1], []
        elif line.startswith("TD-END"):
            name = None
        elif name and line.startswith("onednn_verbose,exec,cpu,"):
            fields = line.split(",")
            log.append((fields[3].replace("pooling_v2", "pooling"), fields[4]))  # the query names the kind, not its version
        elif line.startswith("TD-RESULT "):
            result = json.loads(line[len("TD-RESULT "):])
            plan = None if result["plan"] is None else [tuple(entry) for entry in result["plan"]]
            results[result["model"]] = (result["error"], plan, log)
    return results


def reference(implementation):
    """The backend's rule (docs/onednn.md): a ':'-separated part of the name starts with "ref"."""
    return any(part.startswith("ref") for part in implementation.split(":"))


def machine_caps():
    """SSE41, AVX2 and, when the CPU has AVX-512, no cap (the machine's own)."""
    with open("/proc/cpuinfo") as info:
        flags = next((line.split(":", 1)[1].split() for line in info if line.startswith("flags")), [])
    return ["SSE41", "AVX2"] + ([None] if "avx512f" in flags else [])


class NoReferenceKernels(unittest.TestCase):
    def test_torchvision_cnns_at_each_cap(self):
        caps = machine_caps()
        with concurrent.futures.ThreadPoolExecutor(len(caps)) as pool:  # one process per cap, side by side
            all_results = list(pool.map(lambda cap: run_child(MODELS, cap), caps))
        for cap, results in zip(caps, all_results):
            for name in MODELS:
                with self.subTest(cap=cap or "none", model=name):
                    error, plan, log = results[name]
                    # oneDNN's own log first: it shows reference kernels with or without the query.
                    self.assertEqual(sorted({f"{kind} {impl}" for kind, impl in log if reference(impl)}), [])
                    self.assertIsNotNone(plan, "the library has no torch_delegate_onednn::plan_implementations")
                    self.assertEqual(sorted({f"{kind} {impl}" for _, _, _, kind, impl in plan if reference(impl)}), [])
                    self.assertLess(error, 1e-4)
                    # The query lists what ran: oneDNN's log of the call has the same kernels (the
                    # log also shows the weights' reorders made while planning; the steps run by
                    # ATen and our own kernels, Winograd's transforms, SiLU, the channel shuffle, a
                    # squeeze-excitation's scaled weights and its multiply, the GEMM's linears and
                    # 1x1 convolutions, are not oneDNN's to log).
                    ran = {(kind, impl) for kind, impl in log if kind != "reorder"}
                    # A convolution run as ATen's conv3d or conv1d (no JIT kernel but a GEMM-based
                    # one: a 3-d one below AVX2) calls oneDNN's GEMM-based kernel itself, which logs it.
                    if any(impl in ("aten::conv3d", "aten::conv1d") for *_, impl in plan):
                        ran = {(kind, impl) for kind, impl in ran if not (kind == "convolution" and "gemm" in impl)}
                    listed = {(kind, impl) for _, _, _, kind, impl in plan
                              if kind != "reorder" and not impl.startswith(("aten::", "winograd_", "silu:", "shuffle:", "scale_weights:",
                                                                            "channel_scale:", "channel_affine:", "gemm:avx2",
                                                                            "gemm_1x1:avx2"))}
                    self.assertEqual(ran, listed)
                    self.assertTrue(all(method and shapes.startswith("[1, ") and step for method, shapes, step, _, _ in plan))
                    if cap == "AVX2" and name == "shufflenet_v2_x1_0":
                        # Its regions' plain 58-channel inputs: the own layout would take GEMM (2x
                        # slower) where oneDNN's pick has direct JIT kernels (docs/onednn.md).
                        # (gemm_1x1:avx2 is the GEMM of ours, on 1x1 convolutions in whole channel blocks.)
                        self.assertEqual([step for _, _, step, kind, impl in plan
                                          if kind == "convolution" and "gemm" in impl and impl != "gemm_1x1:avx2"], [])


class FallbackOrder(unittest.TestCase):
    """TD_ONEDNN_TREAT_AS_REFERENCE names more kernels "reference", to walk each fallback."""

    def plan_of(self, source, cap="AVX2", extra_env=None):
        env = dict(os.environ, **(extra_env or {}), ONEDNN_MAX_CPU_ISA=cap)
        # The hook library hands TD_ONEDNN_TREAT_AS_REFERENCE to the backend (the shipped library reads no test switch).
        program = ("import json, sys, torch, torch.nn as nn\nimport torch_delegate\ntorch.ops.load_library(sys.argv[1])\n"
                   "torch.ops.load_library(sys.argv[2])\n" + source +
                   "\nlowered = torch_delegate.lower(torch.jit.script(model.eval()), ['onednn'], partial=True, example_inputs=(x,))\n"
                   "with torch.no_grad():\n    error = ((lowered(x) - model(x)).abs().max() / model(x).abs().max()).item()\n"
                   "print(json.dumps({'error': error, 'plan': torch.ops.torch_delegate_onednn.plan_implementations(lowered._c)}))\n")
        with tempfile.NamedTemporaryFile("w", suffix=".py", dir=os.environ.get("TD_WORKDIR")) as script:  # TorchScript reads the source
            script.write(program)
            script.flush()
            done = subprocess.run([sys.executable, script.name, LIBRARY, os.environ["TD_ONEDNN_TEST_HOOKS"]], env=env,
                                  capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        result = json.loads(done.stdout.strip().splitlines()[-1])
        self.assertLess(result["error"], 1e-5)
        return [tuple(entry) for entry in result["plan"]]

    RESIDUAL = """
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(6, 6, 1)
        self.b = nn.Conv2d(6, 6, 3, padding=2, dilation=2, groups=2)
    def forward(self, x):
        y = self.a(x)
        return torch.relu(self.b(y) + y)
torch.manual_seed(0)
model = Block()
x = torch.rand(1, 6, 16, 16)
"""

    def test_a_convolution_whose_fused_add_gets_a_reference_kernel_runs_unfused(self):
        # At AVX2, oneDNN 2.6 has only ref:any for this grouped, dilated convolution with the
        # residual add fused: it runs alone (a JIT or GEMM kernel), the add a binary of its own.
        plan = self.plan_of(self.RESIDUAL)
        self.assertEqual([impl for _, _, _, impl in [e[1:] for e in plan] if reference(impl)], [])
        self.assertIn(("1 convolution", "convolution"), [(e[2], e[3]) for e in plan])
        self.assertIn(("2 add", "binary"), [(e[2], e[3]) for e in plan])

    def test_other_layouts_then_aten(self):
        # No JIT direct or 1x1 kernel: the convolutions take GEMM in a plain layout.
        plan = self.plan_of(self.RESIDUAL, extra_env={"TD_ONEDNN_TREAT_AS_REFERENCE": "jit:avx2,jit_1x1,jit_dw"})
        self.assertEqual({e[4] for e in plan if e[3] == "convolution"}, {"x64:gemm:jit"})
        # Nothing but "reference" kernels for convolutions and inner products: ATen runs them, the
        # activations and the add after them stay oneDNN primitives. (Steps: 0 and 1 the convolutions,
        # 2 the add, 3 its relu, 4 the flatten, 5 the linear, 6 the GELU: payload version 2 keeps
        # each relu a step of its own; version 1 flagged it on the add, and numbered the linear 4.)
        linear = self.RESIDUAL.replace("model = Block()", "model = nn.Sequential(Block(), nn.Flatten(), nn.Linear(1536, 10), nn.GELU())")
        plan = self.plan_of(linear, extra_env={"TD_ONEDNN_TREAT_AS_REFERENCE": "jit,gemm"})
        self.assertEqual([(e[2], e[3], e[4]) for e in plan if e[4].startswith("aten::")],
                         [("0 convolution", "convolution", "aten::conv2d"), ("1 convolution", "convolution", "aten::conv2d"),
                          ("5 linear", "inner_product", "aten::linear")])
        self.assertIn(("6 activation", "eltwise"), [(e[2], e[3]) for e in plan])

    COMPUTED_BIAS = """
import torch.nn.functional as F
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(32, 96)
    def forward(self, x):
        bias = self.qkv.bias.clone()
        third = bias.numel() // 3
        bias[third:2 * third].zero_()
        return torch.relu(F.linear(x, self.qkv.weight, bias))
torch.manual_seed(0)
model = Model()
x = torch.rand(2, 49, 32)
"""

    def test_a_linear_whose_bias_is_computed_in_the_call_on_each_path(self):
        # Swin V2's qkv bias (test_onednn.py has the matmul oneDNN runs on AVX-512): at AVX2 an
        # inner product, and where every kernel is "reference" ATen's linear, each reading the
        # bias the call gives it (plan_of checks the result against eager's).
        # At AVX2 our GEMM first (98 rows), its ReLU applied as it writes.
        plan = self.plan_of(self.COMPUTED_BIAS)
        self.assertIn(("0 linear", "inner_product", "gemm:avx2"), [(e[2], e[3], e[4]) for e in plan])
        self.assertEqual([e for e in plan if e[4].startswith("aten::") or "relu" in e[2]], [])
        plan = self.plan_of(self.COMPUTED_BIAS, extra_env={"TD_ONEDNN_GEMM": "0"})
        self.assertIn(("0 linear", "inner_product"), [(e[2], e[3]) for e in plan])
        self.assertEqual([e for e in plan if e[4].startswith("aten::") or e[4] == "gemm:avx2"], [])
        plan = self.plan_of(self.COMPUTED_BIAS, extra_env={"TD_ONEDNN_GEMM": "0", "TD_ONEDNN_TREAT_AS_REFERENCE": "jit,gemm"})
        self.assertIn(("0 linear", "inner_product", "aten::linear"), [(e[2], e[3], e[4]) for e in plan])

    MLP = """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down, self.head = nn.Linear(40, 72), nn.Linear(72, 40), nn.Linear(40, 10)
    def forward(self, x):
        y = self.down(torch.nn.functional.gelu(self.up(x))) + x
        return self.head(y.mean(1))
torch.manual_seed(0)
model = Model()
x = torch.rand(2, 50, 40)
"""

    def test_linears_on_our_gemm_at_avx2_from_6_rows(self):
        # A transformer's MLP: its two linears over 100 rows on our GEMM, the GELU applied as the
        # first writes; the head over 2 rows on oneDNN's inner product. TD_ONEDNN_GEMM=0: all three
        # oneDNN's, the GELU a post-op. plan_of checks each result against eager's.
        rows = lambda plan: [(e[2], e[4]) for e in plan if e[3] == "inner_product"]  # noqa: E731
        plan = self.plan_of(self.MLP)
        self.assertEqual([name for name, kernel in rows(plan) if kernel == "gemm:avx2"], ["0 linear", "2 linear"])
        self.assertEqual(len(rows(plan)), 3)
        self.assertEqual([e for e in plan if "activation" in e[2]], [])
        # As in a 4 KB L2: the 72 features of the second linear in slices of 24, the first's GELU
        # after its last slice (plan_of checks the result).
        plan = self.plan_of(self.MLP, extra_env={"TD_ONEDNN_GEMM_L2_BYTES": "4096"})
        self.assertEqual([name for name, kernel in rows(plan) if kernel == "gemm:avx2"], ["0 linear", "2 linear"])
        plan = self.plan_of(self.MLP, extra_env={"TD_ONEDNN_GEMM": "0"})
        self.assertEqual([kernel for _, kernel in rows(plan) if kernel == "gemm:avx2"], [])
        self.assertEqual(len(rows(plan)), 3)


class Query(unittest.TestCase):
    def test_regions_of_a_partial_lowering_and_the_error(self):
        import torch
        import torch.nn as nn
        import torch_delegate
        torch.ops.load_library(LIBRARY)

        class Two(nn.Module):  # a flip stays in TorchScript between two regions
            def __init__(self):
                super().__init__()
                self.a, self.b = nn.Conv2d(3, 8, 3), nn.Conv2d(8, 8, 1)

            def forward(self, x):
                return self.b(self.a(x).flip(3))

        x = torch.rand(1, 3, 12, 12)
        lowered = torch_delegate.lower(torch.jit.script(Two().eval()), ["onednn"], partial=True, example_inputs=(x,))
        query = torch.ops.torch_delegate_onednn.plan_implementations
        self.assertEqual(query(lowered._c), [])  # no plan before the first call
        with torch.no_grad():
            lowered(x)
        methods = {entry[0] for entry in query(lowered._c)}
        self.assertEqual(len(methods), 2, query(lowered._c))
        with self.assertRaisesRegex(RuntimeError, r"torch_delegate_onednn::plan_implementations: expected a module \(lowered "
                                                  r"to onednn, or with regions lowered to it\), got Tensor"):
            query(x)


if __name__ == "__main__":
    unittest.main(verbosity=2)
