"""The onednn backend's fast paths (issue 39): Winograd convolutions, cat in place, ShuffleNetV2's
channel shuffle as one copy, and the views and attention steps (payload version 3) that bring
ShuffleNetV2's channel shuffle and a transformer's attention into the region; payload version 2
still loads.

Each test checks the plan the backend made (its debug query, plan_implementations) and the
result against eager. Environment: TD_ONEDNN_LIBRARY, TD_WORKDIR.
"""
import math
import os
import subprocess
import sys
import tempfile
import unittest
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_delegate

from torchvision_models import randomized

LIBRARY = os.environ["TD_ONEDNN_LIBRARY"]
torch.ops.load_library(LIBRARY)
torch.set_num_threads(2)
FLAGS = open("/proc/cpuinfo").read()
AVX2 = " avx2" in FLAGS and " fma" in FLAGS
# Our kernels run where the CPU has AVX2 and FMA and oneDNN is not capped below AVX2.
OWN_AVX2_KERNELS = AVX2 and os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL") not in ("SSE41", "AVX")
AVX512 = " avx512f" in FLAGS and os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL") in ("ALL", "AVX512_CORE", "AVX512_CORE_VNNI", "AVX512_CORE_BF16", "AVX512_CORE_AMX")


def lowered(model, *x):
    return torch_delegate.lower(torch.jit.script(model.eval()), "onednn", partial=True, example_inputs=x)


def plan(module):
    """(step, primitive kind, implementation) of every call the module's regions planned."""
    return [(step, kind, implementation) for _, _, step, kind, implementation in
            torch.ops.torch_delegate_onednn.plan_implementations(module._c)]


def attention_matmuls(module):
    """The matmul steps' oneDNN matmuls (where oneDNN runs AVX-512 a linear is a matmul primitive too)."""
    return sum(step.endswith(" matmul") and kind == "matmul" for step, kind, _ in plan(module))


def kept(module):
    return [node.kind for method in torch_delegate.report(module).methods for node in method.kept]


def regions(module):
    return torch_delegate.report(module).methods[0].regions


def implementations_by_switch(variable, make_module, size):
    """{"1": ..., "0": ...}: the implementations a lowering of the module `make_module` makes
    (Python binding `m`) planned, printed by a process run with the environment variable set to
    that value. The lowered module must agree with eager in both."""
    script = ("import sys, torch, torch_delegate; torch.ops.load_library(sys.argv[1]);"
              f"{make_module}; m = m.eval(); x = torch.rand{size};"
              "low = torch_delegate.lower(torch.jit.script(m), 'onednn', partial=True, example_inputs=(x,));"
              "assert (low(x) - m(x)).abs().max() < 1e-4;"
              "print(sorted({i for *_, i in torch.ops.torch_delegate_onednn.plan_implementations(low._c)}))")
    return {setting: subprocess.run([sys.executable, "-c", script, LIBRARY], env=dict(os.environ, **{variable: setting}),
                                    capture_output=True, text=True, check=True).stdout for setting in ("1", "0")}


def relative_error(got, want):
    return ((got - want).abs().max() / want.abs().max().clamp_min(1e-12)).item()


class Winograd(unittest.TestCase):
    def model(self):
        class Block(nn.Module):  # ResNet's basic block: 3x3, BN, ReLU, 3x3, BN, the sum, ReLU
            def __init__(self):
                super().__init__()
                self.a = nn.Sequential(nn.Conv2d(64, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU())
                self.b = nn.Sequential(nn.Conv2d(64, 64, 3, padding=1), nn.BatchNorm2d(64))

            def forward(self, x):
                return torch.relu(self.b(self.a(x)) + x)

        torch.manual_seed(1)
        # 64 channels: Winograd's least on AVX-512 (build_winograd.cpp); AVX2 takes 16 and up.
        return randomized(nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), Block(), Block())), torch.rand(1, 3, 30, 30)

    @unittest.skipUnless(AVX2, "Winograd runs on AVX2 with FMA")
    def test_3x3_convolutions_run_as_winograd_and_agree_with_eager(self):
        model, x = self.model()
        low = lowered(model, x)
        with torch.no_grad():
            self.assertLess(relative_error(low(x), model(x)), 1e-4)
        kinds = plan(low)
        # The stem has 3 input channels (not in blocks of 8): a direct convolution. The four
        # convolutions of the blocks: an input and an output transform each, a matmul between.
        self.assertEqual(sum(i.startswith("winograd_f4x4_input") for _, _, i in kinds), 4, kinds)
        self.assertEqual(sum(i.startswith("winograd_f4x4_output") for _, _, i in kinds), 4, kinds)
        self.assertEqual([k for _, k, _ in kinds].count("convolution"), 1 + 8, kinds)
        self.assertFalse(any(k in ("binary", "eltwise") for _, k, _ in kinds), kinds)  # the sums and ReLUs are fused

    @unittest.skipUnless(AVX2, "Winograd runs on AVX2 with FMA")
    def test_video_convolutions_run_as_winograd_on_each_frame(self):
        # R(2+1)D's spatial convolutions (1x3x3 kernels, no temporal padding): each frame of each
        # clip a 2-d convolution; two clips check that frames are addressed within a clip's
        # channel blocks (nCdhw16c), the residual and ReLU fused into the output transform. R3D's
        # 3x3x3 ones: the frames' tiles transformed once, a product per temporal tap, summed (the
        # middle tap over all clips at once, the others clip by clip); with one frame only the
        # middle tap meets one. Its 3x1x1 one runs direct.
        class Video(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Sequential(nn.Conv3d(64, 64, (1, 3, 3), padding=(0, 1, 1)), nn.BatchNorm3d(64), nn.ReLU())
                self.b = nn.Sequential(nn.Conv3d(64, 64, (1, 3, 3), padding=(0, 1, 1)), nn.BatchNorm3d(64))
                self.full = nn.Sequential(nn.Conv3d(64, 64, 3, padding=1), nn.BatchNorm3d(64), nn.ReLU())
                self.temporal = nn.Conv3d(64, 64, (3, 1, 1), padding=(1, 0, 0))

            def forward(self, x):
                return self.temporal(self.full(torch.relu(self.b(self.a(x)) + x)))

        torch.manual_seed(4)
        model = randomized(Video())
        for clips, frames in ((1, 3), (1, 1), (2, 3), (2, 2)):
            with self.subTest(clips=clips, frames=frames):
                x = torch.rand(clips, 64, frames, 14, 13)
                low = lowered(model, x)
                with torch.no_grad():
                    self.assertLess(relative_error(low(x), model(x)), 1e-4)
                kinds = plan(low)
                self.assertEqual(sum(i.startswith("winograd_f4x4_input") for _, _, i in kinds), 3, kinds)
                self.assertEqual(sum(i.startswith("winograd_f4x4_output") for _, _, i in kinds), 3, kinds)
                self.assertFalse(any(k in ("binary", "eltwise") for _, k, _ in kinds), kinds)
                # One product per convolution and temporal tap that meets a frame.
                self.assertEqual([k for _, k, _ in kinds].count("matmul"), 2 + 1 + (2 * clips if frames > 1 else 0), kinds)
        # Five taps (padded by 2) over three frames: the outermost reach one frame each; two clips:
        # the middle tap once, the other four per clip.
        wide = randomized(nn.Sequential(nn.Conv3d(64, 64, (5, 3, 3), padding=(2, 1, 1)), nn.ReLU()))
        for clips in (1, 2):
            with self.subTest(taps=5, clips=clips):
                x = torch.rand(clips, 64, 3, 12, 12)
                low = lowered(wide, x)
                with torch.no_grad():
                    self.assertLess(relative_error(low(x), wide(x)), 1e-4)
                self.assertEqual([k for _, k, _ in plan(low)].count("matmul"), 1 + 4 * clips, plan(low))

    @unittest.skipUnless(AVX2, "Winograd runs on AVX2 with FMA")
    def test_td_onednn_winograd_0_turns_it_off(self):
        out = implementations_by_switch("TD_ONEDNN_WINOGRAD", "m = torch.nn.Conv2d(64, 64, 3, padding=1)", (1, 64, 12, 12))
        self.assertIn("winograd_f4x4_input", out["1"])
        self.assertNotIn("winograd", out["0"])


class CatInPlace(unittest.TestCase):
    def test_an_inception_block_runs_no_concat_at_batch_1(self):
        class Inception(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Conv2d(16, 16, 1)
                self.b = nn.Sequential(nn.Conv2d(16, 8, 1), nn.ReLU(), nn.Conv2d(8, 24, 3, padding=1))
                self.c = nn.Sequential(nn.MaxPool2d(3, 1, 1), nn.Conv2d(16, 8, 1))

            def forward(self, x):
                return torch.relu(torch.cat([self.a(x), self.b(x), self.c(x)], 1))

        torch.manual_seed(2)
        model = randomized(Inception())
        # On AVX-512 oneDNN's 1x1 convolutions of 16 channels pick nhwc (brgconv), where a part is
        # no range of the result's bytes: a concat at batch 1 too.
        for batch, concats in ((1, 1 if AVX512 else 0), (2, 1)):
            with self.subTest(batch=batch):
                x = torch.rand(batch, 16, 14, 14)
                low = lowered(model, x)
                with torch.no_grad():
                    self.assertLess(relative_error(low(x), model(x)), 1e-4)
                self.assertEqual([k for _, k, _ in plan(low)].count("concat"), concats, plan(low))


class ChannelsLast(unittest.TestCase):
    """Where oneDNN runs AVX-512, a region with a grouped convolution runs its convolutions in
    nhwc (channels_last_region): oneDNN's depthwise kernel (brdgmm_dw) reads nhwc, and the 1x1
    convolutions around it then run in nhwc too (brgconv_1x1) instead of nChw16c, with no reorder
    between them. And on every ISA: a squeeze-excitation's multiply read by a 1x1 convolution
    alone is that convolution's weights, scaled each call (mul_into_weights)."""

    # The model's code (`m`, `x` and what it needs): each is run in a process of its own.
    INVERTED = """
import torch.nn as nn
class Inverted(nn.Module):  # MobileNetV2's inverted residual
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(24, 96, 1), nn.ReLU6(), nn.Conv2d(96, 96, 3, padding=1, groups=96), nn.ReLU6(),
                                  nn.Conv2d(96, 24, 1))
    def forward(self, x):
        return x + self.body(x)
torch.manual_seed(4)
m = nn.Sequential(nn.Conv2d(3, 24, 3, 2, 1), nn.ReLU(), Inverted(), Inverted())
x = torch.rand(1, 3, 32, 32)
"""
    RESNEXT = """
import torchvision
torch.manual_seed(5)
m = torchvision.models.resnext50_32x4d()
x = torch.rand(1, 3, 64, 64)
"""
    # Lowers `m`, checks it against eager, prints the plan's calls.
    LOWER = """
m = m.eval()
low = torch_delegate.lower(torch.jit.script(m), 'onednn', partial=True, example_inputs=(x,))
with torch.no_grad():
    assert ((low(x) - m(x)).abs().max() / m(x).abs().max()).item() < 1e-4
for _, _, step, kind, implementation in torch.ops.torch_delegate_onednn.plan_implementations(low._c):
    print(step, kind, implementation, sep="|")
"""

    def calls(self, setting, model=INVERTED, variable="TD_ONEDNN_NHWC"):
        """(step, kind, implementation) of each call of `model` lowered in a process with
        `variable` set to `setting` (None: unset)."""
        env = dict(os.environ)
        env.pop(variable, None)
        if setting is not None:
            env[variable] = setting
        # A file, not -c: TorchScript reads the module's source.
        with tempfile.NamedTemporaryFile("w", suffix=".py", dir=os.environ.get("TD_WORKDIR")) as script:
            script.write("import sys, torch, torch_delegate\ntorch.ops.load_library(sys.argv[1])\n" + model + self.LOWER)
            script.flush()
            done = subprocess.run([sys.executable, script.name, LIBRARY], env=env, capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stderr)
        return [tuple(line.split("|")) for line in done.stdout.splitlines()]

    DENSE = """
from torchvision.models.densenet import _DenseBlock
torch.manual_seed(6)
m = _DenseBlock(num_layers=3, num_input_features=64, bn_size=4, growth_rate=32, drop_rate=0)
for module in m.modules():
    if isinstance(module, torch.nn.BatchNorm2d):
        module.running_mean.uniform_(-0.2, 0.2), module.running_var.uniform_(0.5, 1.5)
x = torch.rand(1, 64, 16, 16)
"""

    def test_densenet_s_growing_cats_are_views_of_one_buffer(self):
        # Each layer cats all the features before it: no concat at batch 1 (AVX-512: views of an
        # nhwc buffer, the batch norms on our kernel; AVX2: the first blocks of an nChw8c buffer),
        # each part copied in once; with the switch off, oneDNN's concat for each cat.
        calls = self.calls(None, self.DENSE, "TD_ONEDNN_CAT_CHAIN")
        kinds = [kind for _, kind, _ in calls]
        self.assertEqual(kinds.count("concat"), 0, calls)
        self.assertEqual(sum(step.endswith(" cat") and kind == "reorder" for step, kind, _ in calls), 4, calls)
        self.assertEqual(any(i.startswith("channel_affine") for *_, i in calls), AVX512, calls)
        self.assertGreaterEqual([k for _, k, _ in self.calls("0", self.DENSE, "TD_ONEDNN_CAT_CHAIN")].count("concat"), 3)

    @unittest.skipUnless(AVX512, "nhwc regions are for oneDNN's AVX-512 kernels")
    def test_a_depthwise_region_runs_in_nhwc_with_no_reorder_between_convolutions(self):
        calls = self.calls(None)
        reorders = [step for step, kind, _ in calls if kind == "reorder"]
        # The input (dense NCHW) into nhwc before the stem, the result back after the last step.
        self.assertEqual(reorders, ["0 convolution", "output 0"], calls)
        convolutions = [implementation for _, kind, implementation in calls if kind == "convolution"]
        self.assertEqual(len(convolutions), 7, calls)
        self.assertEqual(sum(i.startswith("brdgmm_dw") for i in convolutions), 2, calls)
        self.assertFalse(any("gemm" in i or "ref" in i for i in convolutions), calls)

    @unittest.skipUnless(AVX512, "nhwc regions are for oneDNN's AVX-512 kernels")
    def test_td_onednn_nhwc_0_turns_it_off(self):
        # Each convolution in the layout it picks alone: nChw16c for the dense ones, nhwc for the
        # depthwise ones, a reorder into and out of each depthwise convolution.
        calls = self.calls("0")
        self.assertEqual(sum(kind == "reorder" for _, kind, _ in calls), 5, calls)

    @unittest.skipUnless(AVX512, "the ISAs compared are AVX-512's and AVX2's")
    def test_no_convolution_takes_avx2_kernels_for_its_input_s_layout(self):
        # ResNeXt's groups of 8 channels run in nChw8c. A 1x1 convolution after one, given that
        # layout, gets oneDNN's AVX2 kernel (jit_1x1:avx2, half the vector), where nChw16c gets an
        # AVX-512 one: the planner reorders rather than keep the narrower ISA (scripted
        # ResNeXt-50: 46 ms a call against 28). With the region in nhwc and without.
        for setting in (None, "0"):
            with self.subTest(TD_ONEDNN_NHWC=setting):
                calls = self.calls(setting, self.RESNEXT)
                self.assertGreater(len(calls), 50, calls)
                self.assertFalse([c for c in calls if "avx2" in c[2]], calls)

    # EfficientNet's block: a depthwise convolution, its squeeze-excitation, the 1x1 projection.
    SQUEEZE = """
import torch.nn as nn
class Block(nn.Module):
    def __init__(self, read_twice: bool):
        super().__init__()
        self.dw = nn.Sequential(nn.Conv2d(32, 32, 3, padding=1, groups=32), nn.SiLU())
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(32, 8, 1), nn.SiLU(), nn.Conv2d(8, 32, 1), nn.Sigmoid())
        self.project = nn.Conv2d(32, 16, 1)
        self.other = nn.Conv2d(32, 16, 1)
        self.read_twice = read_twice
    def forward(self, x):
        y = self.dw(x)
        p = y * self.se(y)
        if self.read_twice:  # a second reader of the product
            return self.project(p) + self.other(p)
        return self.project(p)
torch.manual_seed(6)
m = Block(TWICE)
x = torch.rand(BATCH, 32, 20, 20)
"""

    def squeeze(self, setting=None, batch=1, twice=False):
        model = self.SQUEEZE.replace("TWICE", str(twice)).replace("BATCH", str(batch))
        return self.calls(setting, model, "TD_ONEDNN_SE_WEIGHTS")

    def test_a_squeeze_excitation_scales_the_next_convolution_s_weights(self):
        # 20x20 pixels and 16 outputs: the weights are the smaller, the product is not made: the
        # projection reads the depthwise result and weights scaled by the excitation each call
        # (the lowering checks every result against eager).
        calls = self.squeeze()
        # The projection (step 8): the scaled weights, their reorder, the convolution.
        self.assertEqual([(kind, i == "scale_weights:cpp") for step, kind, i in calls if step == "8 convolution"],
                         [("convolution", True), ("reorder", False), ("convolution", False)], calls)
        self.assertNotIn("binary", [kind for _, kind, _ in calls], calls)
        for off in (self.squeeze("0"), self.squeeze(batch=2), self.squeeze(twice=True)):
            # Switched off; a batch of 2 (a scale per image); the product read by two convolutions.
            self.assertEqual([kind for _, kind, _ in off].count("binary"), 1, off)
            self.assertNotIn("scale_weights:cpp", [i for _, _, i in off], off)
            # The product made: on our kernel where oneDNN runs AVX-512 (nhwc), else oneDNN's binary.
            self.assertEqual("channel_scale:avx512" in [i for _, _, i in off], AVX512, off)

    @unittest.skipIf(AVX512, "where oneDNN runs AVX-512 the region is nhwc")
    def test_below_avx512_the_layouts_are_onednn_s_picks(self):
        self.assertEqual(self.calls(None), self.calls("0"))


class ViewsAndAttention(unittest.TestCase):
    def test_a_channel_shuffle_and_chunk_stay_in_the_region(self):
        class Shuffle(nn.Module):  # ShuffleNetV2's block, as torchvision writes it
            def __init__(self):
                super().__init__()
                self.branch = nn.Sequential(nn.Conv2d(12, 12, 1), nn.ReLU(), nn.Conv2d(12, 12, 3, padding=1, groups=12),
                                            nn.Conv2d(12, 12, 1), nn.ReLU())
                self.head = nn.Conv2d(24, 8, 1)

            def forward(self, x):
                x1, x2 = x.chunk(2, dim=1)
                out = torch.cat((x1, self.branch(x2)), dim=1)
                b, c, h, w = out.size()
                out = torch.transpose(out.view(b, 2, c // 2, h, w), 1, 2).contiguous().view(b, c, h, w)
                return self.head(out)

        torch.manual_seed(3)
        model = Shuffle()
        x = torch.rand(1, 24, 9, 9)
        low = lowered(model, x)
        with torch.no_grad():
            self.assertLess(relative_error(low(x), model(x)), 1e-5)
        self.assertEqual(len(regions(low)), 1, kept(low))
        self.assertEqual(kept(low), [])
        # Another input size: the views' sizes computed again from x.size() (the region re-plans).
        other = torch.rand(2, 24, 10, 12)
        with torch.no_grad():
            self.assertLess(relative_error(low(other), model(other)), 1e-5)

    def test_shufflenet_blocks_shuffle_in_one_copy_each(self):
        from torchvision.models.shufflenetv2 import InvertedResidual  # torchvision's own blocks

        class Stage(nn.Module):  # a downsampling block, two blocks that chunk, a 1x1 convolution
            def __init__(self):
                super().__init__()
                self.blocks = nn.Sequential(InvertedResidual(24, 116, 2), InvertedResidual(116, 116, 1),
                                            InvertedResidual(116, 116, 1))
                self.head = nn.Conv2d(116, 32, 1)

            def forward(self, x):
                return self.head(self.blocks(x))

        torch.manual_seed(4)
        model = randomized(Stage())
        for batch in (1, 2):
            x = torch.rand(batch, 24, 20, 20)
            low = lowered(model, x)
            with torch.no_grad():
                self.assertLess(relative_error(low(x), model(x)), 1e-5)
            steps = plan(low)
            # Each block's cat, view, transpose, contiguous and view (and a chunk's halves) are one
            # call of our kernel: no concat, and no reorder but the input's and the output's.
            self.assertEqual(sum(impl == "shuffle:sse" for *_, impl in steps), 3, steps)
            self.assertEqual([s for s in steps if s[1] == "concat"], [])
            self.assertEqual([s for s in steps if s[1] == "reorder" and not s[0].startswith(("0 ", "output"))], [])

    def test_td_onednn_shuffle_0_turns_it_off(self):
        out = implementations_by_switch("TD_ONEDNN_SHUFFLE", "from torchvision.models.shufflenetv2 import InvertedResidual;"
                                        "m = InvertedResidual(16, 16, 1)", (1, 16, 8, 8))
        self.assertIn("shuffle:sse", out["1"])
        self.assertNotIn("shuffle", out["0"])

    def test_a_mean_over_height_and_width_is_a_pooling(self):
        class Head(nn.Module):  # ShuffleNetV2's and MNASNet's last pooling
            def __init__(self, keepdim):
                super().__init__()
                self.keepdim = keepdim
                self.conv, self.fc = nn.Conv2d(3, 8, 3), nn.Linear(8, 4)

            def forward(self, x):
                y = self.conv(x).mean([2, 3], keepdim=self.keepdim)
                return self.fc(y.flatten(1) if self.keepdim else y)

        for keepdim in (False, True):
            with self.subTest(keepdim=keepdim):
                torch.manual_seed(7)
                model = Head(keepdim)
                x = torch.rand(2, 3, 9, 9)
                low = lowered(model, x)
                with torch.no_grad():
                    self.assertLess(relative_error(low(x), model(x)), 1e-5)
                self.assertEqual(kept(low), [])
                self.assertTrue(any(k.startswith("pooling") for _, k, _ in plan(low)), plan(low))

    def test_an_attention_block_is_one_region(self):
        class Attention(nn.Module):  # BERT's self-attention and feed-forward, written out
            def __init__(self, d=32, heads=4):
                super().__init__()
                self.heads = heads
                self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
                self.ff1, self.ff2 = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)
                self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)

            def forward(self, x):
                b, t, d = x.shape
                q, k, v = self.qkv(x).chunk(3, dim=-1)
                q = q.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
                k = k.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
                v = v.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
                scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d // self.heads)
                context = torch.matmul(torch.softmax(scores, dim=-1), v).transpose(1, 2).reshape(b, t, d)
                x = self.norm1(x + self.out(context))
                return self.norm2(x + self.ff2(F.gelu(self.ff1(x))))

        torch.manual_seed(4)
        model = Attention()
        x = torch.randn(2, 10, 32)
        low = lowered(model, x)
        with torch.no_grad():
            self.assertLess(relative_error(low(x), model(x)), 1e-5)
        self.assertEqual(len(regions(low)), 1, kept(low))
        self.assertEqual(kept(low), [])
        kinds = [k for _, k, _ in plan(low)]
        self.assertEqual(attention_matmuls(low), 2, plan(low))
        self.assertEqual(kinds.count("softmax_v2") + kinds.count("softmax"), 1, plan(low))
        # The scale is a post-op of the first matmul: no eltwise primitive runs for it.
        self.assertNotIn("eltwise", kinds)

    def test_a_size_read_outside_the_region_is_copied_into_it(self):
        class Checked(nn.Module):  # ViT's input check: `h` is read by an assertion onednn does not take, and by the view
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(3, 8, 2, 2)
                self.fc = nn.Linear(8, 4)

            def forward(self, x):
                n, c, h, w = x.shape
                torch._assert(h == 8, "wrong size")
                y = self.conv(x).reshape(n, 8, (h // 2) * (w // 2)).permute(0, 2, 1)
                return self.fc(y)

        torch.manual_seed(5)
        model = Checked()
        x = torch.rand(1, 3, 8, 8)
        low = lowered(model, x)
        with torch.no_grad():
            self.assertLess(relative_error(low(x), model(x)), 1e-5)
        # The view's numbers are a copy of its own in the region; the assertion keeps its own.
        self.assertNotIn("aten::reshape", kept(low))
        self.assertIn("prim::RaiseException", kept(low))
        self.assertEqual(len(regions(low)), 1, kept(low))
        with self.assertRaisesRegex(Exception, "wrong size|other sizes|lowered for"):
            low(torch.rand(1, 3, 10, 10))


    def test_a_number_read_across_regions_moves_to_its_reader(self):
        class Across(nn.Module):  # MaxViT's `B, C, H, W = x.shape`, read after what ends a region
            def __init__(self):
                super().__init__()
                self.a, self.b = nn.Conv2d(3, 8, 1), nn.Conv2d(8, 8, 1)

            def forward(self, x):
                b, c, h, w = x.shape
                y = self.a(x).flip(3)  # stays in TorchScript: two runs
                return self.b(y).reshape(b, -1)

        torch.manual_seed(6)
        model = Across()
        x = torch.rand(2, 3, 5, 5)
        low = lowered(model, x)  # preprocess failed on this once: the number left its region
        with torch.no_grad():
            self.assertLess(relative_error(low(x), model(x)), 1e-5)
        # `b` is computed where the reshape reads it: both convolutions are delegated.
        self.assertEqual(len(regions(low)), 2, kept(low))
        self.assertNotIn("aten::conv2d", kept(low))
        self.assertNotIn("aten::reshape", kept(low))
        self.assertIn("aten::flip", kept(low))


class WindowAttention(unittest.TestCase):
    """Swin's shifted-window attention: its numbers come from sizes read by pads, `if`s and views
    (each reader gets its own copy), its window size is a list attribute (a constant when only
    read), q, k and v are selects of one permuted qkv, and the relative position bias is added
    with broadcasting: the attention's matmuls and softmax run in onednn's regions."""

    def check_block(self, shift, batch, size):
        from torchvision.models.swin_transformer import SwinTransformerBlock
        torch.manual_seed(11)
        block = SwinTransformerBlock(32, 2, window_size=[4, 4], shift_size=shift).eval()
        x = torch.rand(batch, size, size, 32)
        low = lowered(block, x)
        with torch.no_grad():
            self.assertLess(relative_error(low(x), block(x)), 1e-5)
        # (The first layer norm, alone before the pad, has no linear to make a region with.)
        for kind in ("aten::matmul", "aten::softmax", "aten::linear", "aten::select", "aten::gelu"):
            self.assertNotIn(kind, kept(low), (shift, batch, size))
        kinds = [kind for _, kind, _ in plan(low)]
        self.assertEqual(attention_matmuls(low), 2, plan(low))
        # The query's scale is the first matmul's post-op (no eltwise, no dense copy of the query
        # for it), GELU the first linear's; never a reference kernel.
        self.assertNotIn("eltwise", kinds, plan(low))
        self.assertFalse([i for *_, i in plan(low) if i.startswith("ref")], plan(low))
        return low

    def test_torchvision_swin_blocks(self):
        for shift, batch, size in (([0, 0], 1, 8), ([2, 2], 1, 8), ([2, 2], 2, 8), ([0, 0], 1, 4)):
            with self.subTest(shift=shift, batch=batch, size=size):
                low = self.check_block(shift, batch, size)
                # Two attention regions and the feed-forward's: the `if` that adds the mask (its
                # condition computed at run time, shifted or not) stays between the first two.
                self.assertEqual(len(regions(low)), 3, kept(low))

    def test_swin_t_shapes_folded(self):
        """Shape folding on the whole of torchvision's Swin-T (its four stages, patch merging and
        shifted windows of 7 over maps of 24 to 3, narrower: a fifth of the lowering's time): the
        padding amounts, shift decisions and attention masks its blocks compute from sizes are
        computed at lowering; the method keeps its partitioned form for other shapes."""
        from torchvision.models.swin_transformer import SwinTransformer

        def nodes(block):
            return sum(1 + sum(nodes(inner) for inner in node.blocks()) for node in block.nodes())

        torch.manual_seed(0)
        model = SwinTransformer(patch_size=[4, 4], embed_dim=24, depths=[2, 2, 2, 2], num_heads=[1, 2, 4, 8], window_size=[7, 7],
                                stochastic_depth_prob=0.0).eval()
        x = torch.randn(1, 3, 96, 96)
        folded = torch_delegate.lower(torch.jit.script(model), "onednn", partial=True, example_inputs=(x,),
                                      on_other_shapes="torchscript")
        plain = torch_delegate.lower(torch.jit.script(model), "onednn", partial=True, example_inputs=(x,),
                                     on_other_shapes="torchscript", fold_shapes=False)
        graph = folded.graph
        specialized = [node for node in graph.nodes() if node.kind() == "prim::If"][-1]
        body, as_was = list(specialized.blocks())
        # (nested blocks aside: with on_other_shapes="torchscript" each region's call sits in an
        # `if` whose else branch holds the region's own nodes, in both versions)
        top = len(list(body.nodes())), len(list(as_was.nodes()))
        self.assertLess(top[0], top[1] / 2, top)
        self.assertLessEqual(nodes(as_was), nodes(plain.graph))  # the method as partitioned (constants propagated)
        kinds = {node.kind() for node in body.nodes()}
        for kind in ("aten::masked_fill", "aten::new_zeros", "aten::remainder", "aten::floordiv", "aten::copy_"):
            self.assertNotIn(kind, kinds)
        saved = os.path.join(os.environ.get("TD_WORKDIR", tempfile.gettempdir()), f"swin_folded_{os.getpid()}.pt")
        folded.save(saved)
        loaded = torch_delegate.load(saved)
        os.remove(saved)
        other = torch.randn(1, 3, 64, 64)
        with torch.no_grad():
            for module in (folded, loaded):
                self.assertLess(relative_error(module(x), model(x)), 1e-5)
                self.assertLess(relative_error(module(other), model(other)), 1e-5)  # as partitioned: TorchScript

    def test_select_and_a_broadcast_bias_either_side(self):
        class Scores(nn.Module):
            def __init__(self, bias_first):
                super().__init__()
                self.qkv = nn.Linear(16, 48)
                self.bias_first = bias_first

            def forward(self, x, bias):
                b, n, c = x.shape
                qkv = self.qkv(x).reshape(b, n, 3, 2, c // 2).permute(2, 0, 3, 1, 4)
                q, k, v = qkv[0], qkv[-2], qkv.select(-5, 2)
                scores = q.matmul(k.transpose(-2, -1))
                scores = bias + scores if self.bias_first else scores + bias
                return scores.softmax(-1).matmul(v)

        torch.manual_seed(12)
        x, bias = torch.rand(3, 5, 16), torch.rand(1, 2, 5, 5)
        for bias_first in (False, True):
            model = Scores(bias_first)
            low = lowered(model, x, bias)
            with torch.no_grad():
                self.assertLess(relative_error(low(x, bias), model(x, bias)), 1e-5)
            self.assertEqual(len(regions(low)), 1, kept(low))
            self.assertNotIn("aten::select", kept(low))
            self.assertNotIn("aten::add", kept(low))

    def test_swin_v2_block_and_steps_on_weights_alone(self):
        """Swin V2 computes its bias with Linears on a buffer (`cpb_mlp(relative_coords_table)`):
        a step that reads weights alone stays in TorchScript (preprocess had found no region value
        to give it); the block lowers and agrees with eager."""
        class OnWeights(nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("table", torch.rand(4, 2))
                self.mlp = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 8, bias=False))
                self.fc = nn.Linear(8, 8)

            def forward(self, x):
                return self.fc(x) + self.mlp(self.table)

        torch.manual_seed(14)
        model, x = OnWeights(), torch.rand(4, 8)
        low = lowered(model, x)
        with torch.no_grad():
            self.assertLess(relative_error(low(x), model(x)), 1e-5)
        self.assertEqual(kept(low).count("aten::linear"), 1, kept(low))  # the first of the mlp's
        # fc | (the kept linear) | relu, linear, add: the kept linear reads the buffer alone and
        # moves before the call, but the relu reads nothing else, so it starts a run of its own.
        self.assertEqual(len(regions(low)), 2, kept(low))
        from torchvision.models.swin_transformer import SwinTransformerBlockV2
        block = SwinTransformerBlockV2(32, 2, window_size=[4, 4], shift_size=[2, 2]).eval()
        x = torch.rand(1, 8, 8, 32)
        low = lowered(block, x)
        with torch.no_grad():
            self.assertLess(relative_error(low(x), block(x)), 1e-5)
        self.assertNotIn("aten::softmax", kept(low))

    def test_a_list_attribute_that_is_written_is_no_constant(self):
        class Writes(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(8, 8)
                self.sizes = [2, 4]

            def forward(self, x):
                sizes = self.sizes
                sizes[0] = x.size(0)  # the module's own list, written: read as it is at each call
                return self.fc(x).view(sizes[0], 2, 4) * 2.0

        torch.manual_seed(13)
        model = Writes()
        x = torch.rand(3, 8)
        scripted = torch.jit.script(model.eval())
        low = torch_delegate.lower(scripted, "onednn", partial=True, example_inputs=(x,))
        with torch.no_grad():
            self.assertLess(relative_error(low(x), model(x)), 1e-5)
        self.assertIn("aten::_set_item", kept(low))
        self.assertIn("aten::view", kept(low))  # its sizes are the written list's, not a constant


class MultiheadAttentionCalls(unittest.TestCase):
    """nn.MultiheadAttention's self-attention comes into the region as straight-line attention:
    scripted (its forward's `if`s) and traced (aten::_native_multi_head_attention)."""

    class Encoder(nn.Module):  # ViT's encoder block: LayerNorm, self-attention, residual, MLP
        def __init__(self, d=32, heads=4, batch_first=True, mode="self"):
            super().__init__()
            self.mode = mode
            self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.attention = nn.MultiheadAttention(d, heads, batch_first=batch_first)
            self.ff1, self.ff2 = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)
            self.position = nn.Parameter(torch.randn(1, 1, d))

        def forward(self, x):
            x = x + self.position  # a weight added: ViT's pos_embedding
            y = self.norm1(x)
            if self.mode == "cross":
                y, _ = self.attention(y, x, x, need_weights=False)
            elif self.mode == "weights":
                y, _ = self.attention(y, y, y)
            else:
                y, _ = self.attention(y, y, y, need_weights=False)
            x = x + y
            return x + self.ff2(F.gelu(self.ff1(self.norm2(x))))

    def model(self, **options):
        torch.manual_seed(7)
        return self.Encoder(**options).eval()

    def check(self, model, low, x):
        with torch.no_grad():
            self.assertLess(relative_error(low(x), model(x)), 1e-5)

    def test_self_attention_is_in_the_region(self):
        for batch_first in (True, False):
            with self.subTest(batch_first=batch_first):
                model = self.model(batch_first=batch_first)
                x = torch.randn(2, 10, 32)
                low = lowered(model, x)
                self.check(model, low, x)
                # The pos_embedding add stays (a weight is not an add step's operand); the rest is one region.
                self.assertEqual(len(regions(low)), 1, kept(low))
                self.assertNotIn("prim::If", kept(low))
                self.assertNotIn("aten::_native_multi_head_attention", kept(low))
                kinds = [k for _, k, _ in plan(low)]
                self.assertEqual(attention_matmuls(low), 2, plan(low))
                self.assertEqual(kinds.count("softmax_v2") + kinds.count("softmax"), 1, plan(low))
                path = os.path.join(os.environ["TD_WORKDIR"], "mha_lowered.pt")
                torch.jit.save(low, path)
                self.check(model, torch.jit.load(path), x)

    def assert_points_at(self, region, submodule, text):
        if submodule is not None:
            self.assertEqual(region.submodule, submodule)
        self.assertTrue(region.location.endswith(f"test_onednn_fast_paths.py:{self.line_of(text)}"), region.location)

    def test_the_attention_nodes_are_the_calls(self):
        class Only(nn.Module):
            def __init__(self):
                super().__init__()
                self.attention = nn.MultiheadAttention(32, 4, batch_first=True)

            def forward(self, x):
                y, _ = self.attention(x, x, x, need_weights=False)  # the line the region points at
                return y

        self.assert_points_at(regions(lowered(Only(), torch.randn(2, 5, 32)))[0], "attention", "the line the region points at")

    def test_nodes_inlined_through_several_calls_keep_the_model_line(self):
        # Calls are inlined outer first where a model has an attention: the frames of the call
        # being inlined stay in front. ViT's conv_proj: a method of the model calls nn.Conv2d, whose
        # forward calls its _conv_forward (in torch/nn): the model's line is two calls up.
        class Outer(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(3, 32, 1)
                self.attention = nn.MultiheadAttention(32, 4, batch_first=True)

            def embed(self, x):
                return self.conv(x)  # the embedding's line

            def forward(self, x):
                y = torch.flip(self.embed(x), [3])  # stays in TorchScript: the embedding is a region of its own
                z = y.flatten(2).transpose(1, 2)
                z, _ = self.attention(z, z, z, need_weights=False)
                return z

        # (The submodule reads "conv.conv" here: outer-first inlining names Conv2d's call of its own
        # _conv_forward after the attribute, where LibTorch's inliner says SELF. Known, not checked.)
        self.assert_points_at(regions(lowered(Outer(), torch.randn(2, 3, 4, 4)))[0], None, "the embedding's line")

    @staticmethod
    def line_of(text):
        with open(__file__) as source:
            return next(number for number, line in enumerate(source, 1) if text in line and "line_of" not in line)

    def test_a_trace_native_attention_is_in_the_region(self):
        model = self.model()
        x = torch.randn(2, 10, 32)
        with torch.no_grad():
            traced = torch.jit.trace(model, (x,))
        self.assertIn("aten::_native_multi_head_attention", str(traced.inlined_graph))
        low = torch_delegate.lower(traced, "onednn", partial=True, example_inputs=(x,))
        self.check(model, low, x)
        self.assertEqual(len(regions(low)), 1, kept(low))
        self.assertNotIn("aten::_native_multi_head_attention", kept(low))

    def test_attention_to_another_tensor_and_weights_asked_for_are_in_the_region(self):
        for mode in ("cross", "weights"):
            with self.subTest(mode=mode):
                model = self.model(mode=mode)
                x = torch.randn(2, 10, 32)
                low = lowered(model, x)
                self.check(model, low, x)
                self.assertEqual(len(regions(low)), 1, kept(low))
                self.assertNotIn("prim::If", kept(low))
                self.assertNotIn("aten::matmul", kept(low))
        model = self.model()  # an unbatched input: the module's own path (the rank check folds to it)
        x = torch.randn(10, 32)
        self.check(model, lowered(model, x), x)

    def test_a_transformer_encoder_not_batch_first_is_in_the_regions(self):
        # nn.TransformerEncoderLayer (batch_first=False) passes its masks on as values: None once its
        # own checks fold, which the attention's `if` then folds on (a second round of ranks).
        class Encoder(nn.Module):
            def __init__(self):
                super().__init__()
                layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0)  # relu feed-forward
                self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

            def forward(self, x):
                return self.encoder(x)

        torch.manual_seed(8)
        model = Encoder().eval()
        x = torch.randn(10, 2, 32)
        low = lowered(model, x)
        self.check(model, low, x)
        self.assertEqual(len(regions(low)), 1, kept(low))  # the two layers; the encoder's own checks stay
        self.assertNotIn("aten::matmul", kept(low))
        self.assertNotIn("aten::relu", kept(low))
        kinds = [k for _, k, _ in plan(low)]
        self.assertEqual(attention_matmuls(low), 4, plan(low))

    def test_a_lowering_whose_backends_do_not_take_the_matmuls_keeps_the_module_path(self):
        xnnpack = os.environ.get("TD_XNNPACK_LIBRARY")
        if not xnnpack:
            self.skipTest("xnnpack is not built")
        torch.ops.load_library(xnnpack)
        model = self.model()
        x = torch.randn(2, 10, 32)
        low = torch_delegate.lower(torch.jit.script(model), "xnnpack", partial=True, example_inputs=(x,))
        self.check(model, low, x)
        # The module's own forward, its fast path's checks decided: the fused op, which TorchScript runs.
        self.assertIn("aten::_native_multi_head_attention", kept(low))
        self.assertNotIn("aten::matmul", kept(low))

    def test_autograd_goes_through_the_attention(self):
        model = self.model()
        x = torch.randn(2, 10, 32)
        low = torch_delegate.lower(torch.jit.script(model), "onednn", partial=True, example_inputs=(x,),
                                   on_other_shapes="torchscript")
        given = x.clone().requires_grad_()
        low(given).sum().backward()  # the region's TorchScript runs: plain, differentiable operators
        want = x.clone().requires_grad_()
        model(want).sum().backward()
        self.assertLess(relative_error(given.grad, want.grad), 1e-5)


class CosineAttention(unittest.TestCase):
    """Swin V2's cosine attention: F.normalize of the queries and keys (norm, clamp_min, expand_as,
    div: one `normalize` step, a kernel of ours) and the scores times a logit scale computed in the
    call, [heads, 1, 1], broadcast (a mul whose second operand gets leading ones)."""

    class Cosine(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(16, 48)
            self.proj = nn.Linear(16, 16)
            self.logit_scale = nn.Parameter(torch.log(10 * torch.rand(2, 1, 1) + 1))

        def forward(self, x, bias):
            b, n, c = x.shape
            qkv = self.qkv(x).reshape(b, n, 3, 2, c // 2).permute(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]  # strided views of the qkv linear's result
            scale = torch.clamp(self.logit_scale, max=math.log(100.0)).exp()  # computed from a parameter
            attn = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
            attn = attn * scale + bias
            x = attn.softmax(-1).matmul(v).transpose(1, 2).reshape(b, n, c)
            return self.proj(x)

    def test_normalize_and_the_broadcast_scale_run_in_the_region(self):
        torch.manual_seed(13)
        model = self.Cosine().eval()
        x, bias = torch.randn(3, 5, 16), torch.rand(1, 2, 5, 5)
        x[0, 0] = 0  # a row whose norm is 0: divided by eps, as ATen does
        low = lowered(model, x, bias)
        with torch.no_grad():
            self.assertLess(relative_error(low(x, bias), model(x, bias)), 1e-5)
            calls = plan(low)
        for kind in ("aten::norm", "aten::clamp_min", "aten::expand_as", "aten::div", "aten::matmul", "aten::mul", "aten::softmax"):
            self.assertNotIn(kind, kept(low))
        self.assertEqual([i for _, _, i in calls].count("normalize:any"), 2, calls)
        self.assertEqual(len(regions(low)), 1, kept(low))
        with torch.no_grad():  # the scale is read each call: a changed parameter changes the result
            before = low(x, bias)
            for module in (low, model):
                module.logit_scale.add_(0.5)
            self.assertGreater(relative_error(low(x, bias), before), 1e-3)
            self.assertLess(relative_error(low(x, bias), model(x, bias)), 1e-5)

    def test_after_pointwise_fusion_took_part_of_the_pattern(self):
        # A priority list with pointwise_fusion first: it takes the logit scale's clamp and exp and
        # the scores' mul and add; of F.normalize's nodes it supports clamp_min and div, but each
        # alone, which it refuses, so onednn gets the pattern whole. (Had an earlier backend taken
        # part of it, onednn's accepts_region would refuse the rest rather than fail preprocess:
        # onednn_unit.cpp.)
        torch_delegate.load_backend("pointwise_fusion")
        torch.manual_seed(13)
        model = self.Cosine().eval()
        x, bias = torch.randn(3, 5, 16), torch.rand(1, 2, 5, 5)
        low = torch_delegate.lower(torch.jit.script(model), ["pointwise_fusion", "onednn"], partial=True,
                                   example_inputs=(x, bias))
        with torch.no_grad():
            self.assertLess(relative_error(low(x, bias), model(x, bias)), 1e-5)
        backends = {region.backend for region in regions(low)}
        self.assertEqual(backends, {"pointwise_fusion", "onednn"}, regions(low))
        on_onednn = [kind for region in regions(low) if region.backend == "onednn" for kind in region.kinds]
        for kind in ("aten::norm", "aten::clamp_min", "aten::expand_as", "aten::div"):
            self.assertIn(kind, on_onednn)

    def test_other_norms_stay_in_torchscript(self):
        class Other(nn.Module):
            def __init__(self, p, dim):
                super().__init__()
                self.a, self.p, self.dim = nn.Linear(8, 8), p, dim

            def forward(self, x):
                return F.normalize(self.a(x), p=self.p, dim=self.dim)

        x = torch.rand(4, 3, 8)
        for p, dim in ((1.0, -1), (2.0, 1)):
            with self.subTest(p=p, dim=dim):
                model = Other(p, dim).eval()
                low = lowered(model, x)
                with torch.no_grad():
                    self.assertLess(relative_error(low(x), model(x)), 1e-5)
                self.assertIn("aten::norm", kept(low))
                self.assertIn("aten::div", kept(low))

    def test_torchvision_swin_v2_blocks(self):
        from torchvision.models.swin_transformer import SwinTransformerBlockV2, ShiftedWindowAttentionV2
        for shift in ([0, 0], [2, 2]):
            with self.subTest(shift=shift):
                torch.manual_seed(14)
                block = randomized(SwinTransformerBlockV2(32, 2, window_size=[4, 4], shift_size=shift,
                                                          attn_layer=ShiftedWindowAttentionV2)).eval()
                x = torch.rand(1, 8, 8, 32)
                low = lowered(block, x)
                with torch.no_grad():
                    self.assertLess(relative_error(low(x), block(x)), 1e-5)
                for kind in ("aten::norm", "aten::div", "aten::matmul", "aten::softmax"):
                    self.assertNotIn(kind, kept(low))
                self.assertEqual([i for *_, i in plan(low)].count("normalize:any"), 2, plan(low))


class DirectOutputs(unittest.TestCase):
    """A region's dense result is written by its primitive into the tensor the call returns, with
    no copy at the end (planner::build; TD_ONEDNN_DIRECT_OUTPUTS=0: copied)."""

    class TwoResults(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(48, 32), nn.Linear(48, 16)

        def forward(self, x):
            y = self.a(x)
            return y, torch.relu(self.b(x)), torch.relu(y)  # y is returned and read again

    class WithAView(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(48, 32)

        def forward(self, x):
            y = self.a(x)
            return y, y.reshape(-1)  # two results in the same bytes

    def output_steps(self, module):
        return [step for step, _, _ in plan(module) if step.startswith("output")]

    def test_results_are_written_in_place_fresh_each_call(self):
        torch.manual_seed(0)
        model = self.TwoResults().eval()
        x = torch.rand(1, 7, 48)  # a linear's [7, 32] result seen as [1, 7, 32]: a view of all of its bytes
        low = lowered(model, x)
        self.assertEqual(len(regions(low)), 1)
        with torch.no_grad():
            first = low(x)
            # Planned at the first call: its linears (as matmuls, or on our GEMM or inner products on AVX2), no copies.
            self.assertEqual(self.output_steps(low), [], plan(low))
            self.assertEqual(sum(step.endswith(" linear") for step, _, _ in plan(low)), 2, plan(low))
            kept_first = [t.clone() for t in first]
            second = low(x + 1)  # a new call must not write over what the first returned
            for got, want in zip(first, model(x)):
                self.assertLess(relative_error(got, want), 1e-5)
            for got, before in zip(first, kept_first):
                self.assertTrue(torch.equal(got, before))
            for got, want in zip(second, model(x + 1)):
                self.assertLess(relative_error(got, want), 1e-5)
            self.assertTrue(all(a.data_ptr() != b.data_ptr() for a, b in zip(first, second)))

    def test_two_results_in_the_same_bytes_are_two_tensors(self):
        torch.manual_seed(0)
        model = self.WithAView().eval()
        x = torch.rand(5, 48)
        low = lowered(model, x)
        with torch.no_grad():
            y, flat = low(x)
            self.assertEqual(self.output_steps(low), ["output 1"], plan(low))  # the first in place, the second copied
            want = model(x)[0]
            self.assertNotEqual(y.data_ptr(), flat.data_ptr())  # a region's results are never aliases of each other
            y.add_(1)
            self.assertLess(relative_error(flat, want.reshape(-1)), 1e-5)

    def test_concurrent_calls_each_get_their_own_results(self):
        torch.manual_seed(0)
        model = self.TwoResults().eval()
        x = torch.rand(1, 7, 48)
        low = lowered(model, x)
        inputs = [torch.rand(1, 7, 48) for _ in range(8)]
        failures = []

        def run(offset):
            with torch.no_grad():
                for k in range(40):
                    given = inputs[(offset + k) % len(inputs)]
                    if any(relative_error(g, w) > 1e-5 for g, w in zip(low(given), model(given))):
                        failures.append((offset, k))

        import threading
        threads = [threading.Thread(target=run, args=(offset,)) for offset in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.assertEqual(failures, [])

    def test_the_switch_copies_them_again(self):
        script = ("import sys, torch, torch.nn as nn, torch_delegate; torch.ops.load_library(sys.argv[1]);"
                  "m = nn.Linear(48, 32).eval(); x = torch.rand(1, 7, 48);"
                  "low = torch_delegate.lower(torch.jit.script(m), 'onednn', partial=True, example_inputs=(x,));"
                  "assert (low(x) - m(x)).abs().max() < 1e-4;"
                  "print([s for _, _, s, _, _ in torch.ops.torch_delegate_onednn.plan_implementations(low._c) if s.startswith('output')])")
        got = {setting: subprocess.run([sys.executable, "-c", script, LIBRARY], capture_output=True, text=True, check=True,
                                       env=dict(os.environ, TD_ONEDNN_DIRECT_OUTPUTS=setting)).stdout.strip()
               for setting in ("1", "0")}
        self.assertEqual(got, {"1": "[]", "0": "['output 0']"})


class SavedByAnEarlierMain(unittest.TestCase):
    def test_payload_version_2_loads_and_runs(self):
        # Saved at 278b26d (tests/data/README.md): steps of every kind version 2 had, a 3x3
        # convolution of 16 channels that now runs as Winograd.
        data = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data")
        saved = torch.load(os.path.join(data, "onednn_payload2_by_278b26d.io.pt"))
        for load in (torch.jit.load, torch_delegate.load):
            with self.subTest(load=load.__module__), torch.no_grad():
                module = load(os.path.join(data, "onednn_payload2_by_278b26d.pt"))
                self.assertLess(relative_error(module(saved["x"]), saved["want"]), 1e-5)

    def test_payload_version_4_loads_and_serves_other_shapes(self):
        # Saved at e41953a (tests/data/README.md): size programs, a transposed convolution and
        # straight-line attention; another shape re-plans from the saved size programs.
        data = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data")
        saved = torch.load(os.path.join(data, "onednn_payload4_by_e41953a.io.pt"))
        for load in (torch.jit.load, torch_delegate.load):
            with self.subTest(load=load.__module__), torch.no_grad():
                module = load(os.path.join(data, "onednn_payload4_by_e41953a.pt"))
                self.assertLess(relative_error(module(saved["x"]), saved["want"]), 1e-5)
                self.assertLess(relative_error(module(saved["other"]), saved["want_other"]), 1e-5)



class PyTorchTransformerLayers(unittest.TestCase):
    """nn.TransformerEncoder(Layer) as users write it: the fast-path checks (masks given or None,
    nested tensors, autocast, devices, requires_grad) decided at lowering behind a check at the
    method's entry, the fused layer spelled as what it computes and delegated; any call the check
    refuses runs the method as it was."""

    def encoder(self, norm_first=False, activation="gelu", layers=2):
        torch.manual_seed(3)
        layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, activation=activation, norm_first=norm_first)
        return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).eval()

    def test_the_encoder_is_delegated_with_its_conditions_decided(self):
        for norm_first, activation in ((False, "gelu"), (True, "relu")):
            with self.subTest(norm_first=norm_first, activation=activation):
                model = self.encoder(norm_first, activation)
                x = torch.randn(2, 10, 32)
                low = lowered(model, x)
                method = torch_delegate.report(low).methods[0]
                delegated = sum(region.node_count for region in method.regions)
                # One region a layer; what stays is the encoder's own bookkeeping (its fast-path
                # message, an unused grad-mode read), no tensor operator.
                self.assertEqual(len(method.regions), 2, str(torch_delegate.report(low)))
                self.assertGreaterEqual(delegated, 60, str(torch_delegate.report(low)))
                bookkeeping = {"aten::format", "aten::len", "aten::gt", "aten::__not__", "prim::If", "aten::is_grad_enabled"}
                self.assertLessEqual(set(kept(low)), bookkeeping, str(torch_delegate.report(low)))
                decided = {condition.test: condition.value for condition in method.decided}
                self.assertEqual(decided.get("mask is None"), "True", decided)
                self.assertEqual(decided.get("src_key_padding_mask is None"), "True", decided)
                self.assertEqual(decided.get("torch.is_autocast_enabled()"), "False", decided)
                self.assertIn("decided mask is None = True (the example)", str(torch_delegate.report(low)))
                with torch.no_grad():
                    self.assertLess(relative_error(low(x), model(x)), 1e-5)
                    # Another batch and length: the regions re-plan, the conditions still hold.
                    y = torch.randn(3, 7, 32)
                    self.assertLess(relative_error(low(y), model(y)), 1e-5)
                self.assertLess(relative_error(low(x), model(x).detach()), 1e-5)  # grad mode on: the same
                path = os.path.join(os.environ["TD_WORKDIR"], "transformer_encoder_lowered.pt")
                torch.jit.save(low, path)
                loaded = torch.jit.load(path)
                with torch.no_grad():
                    self.assertLess(relative_error(loaded(x), model(x)), 1e-5)
                saved = torch_delegate.report(loaded).methods[0].decided
                self.assertEqual([c.test for c in saved], [c.test for c in method.decided])

    def test_a_call_the_conditions_do_not_hold_for_runs_the_method_as_it_was(self):
        model = self.encoder()
        x = torch.randn(2, 10, 32)
        low = lowered(model, x)
        padding = torch.zeros(2, 10, dtype=torch.bool)
        padding[:, 7:] = True
        causal = torch.triu(torch.full((10, 10), float("-inf")), diagonal=1)
        with torch.no_grad():
            self.assertLess(relative_error(low(x, src_key_padding_mask=padding), model(x, src_key_padding_mask=padding)), 1e-5)
            self.assertLess(relative_error(low(x, mask=causal), model(x, mask=causal)), 1e-5)
            # Under autocast the method runs as written (its canonical graph, whose self-attention
            # is spelled out: LibTorch 1.13's scripted layer itself fails there on a dtype mismatch).
            with torch.autocast("cpu", dtype=torch.bfloat16):
                under_autocast = low(x)
            self.assertLess(relative_error(under_autocast.float(), model(x)), 3e-2)
        needs_grad = x.clone().requires_grad_()
        out = low(needs_grad)
        self.assertTrue(out.requires_grad)
        out.sum().backward()
        self.assertIsNotNone(needs_grad.grad)

    def test_a_key_padding_mask_in_the_example_is_in_the_regions(self):
        # The fused layer with a key padding mask, spelled out: the mask made additive in
        # TorchScript, the layer one region.
        model = self.encoder()
        x = torch.randn(2, 10, 32)
        padding = torch.zeros(2, 10, dtype=torch.bool)
        padding[0, 8:] = True
        padding[1, 5:] = True
        low = lowered(model, x, None, padding)
        self.assertEqual(len(regions(low)), 2, str(torch_delegate.report(low)))
        self.assertFalse({"aten::_transformer_encoder_layer_fwd", "aten::linear", "aten::matmul", "prim::If"} & set(kept(low)),
                         str(torch_delegate.report(low)))
        with torch.no_grad():
            self.assertLess(relative_error(low(x, None, padding), model(x, src_key_padding_mask=padding)), 1e-5)
            # A float mask: the fused layer masks where it is not zero, as LibTorch's does.
            self.assertLess(relative_error(low(x, None, padding.float()), model(x, src_key_padding_mask=padding.float())), 1e-5)
            y, other = torch.randn(3, 6, 32), torch.zeros(3, 6, dtype=torch.bool)
            other[2, 3:] = True
            self.assertLess(relative_error(low(y, None, other), model(y, src_key_padding_mask=other)), 1e-5)
            self.assertLess(relative_error(low(x), model(x)), 1e-5)  # no mask: the method as it was


class SelfAttention(nn.Module):
    def __init__(self, batch_first=True, need_weights=False):
        super().__init__()
        self.attention = nn.MultiheadAttention(32, 4, batch_first=batch_first)
        self.need_weights = need_weights

    def forward(self, x, attn_mask: Optional[torch.Tensor] = None, key_padding_mask: Optional[torch.Tensor] = None):
        out, weights = self.attention(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=self.need_weights)
        return out if weights is None else out + weights.sum()


class CrossAttention(nn.Module):
    def __init__(self, batch_first=True):
        super().__init__()
        self.attention = nn.MultiheadAttention(32, 4, batch_first=batch_first)

    def forward(self, x, memory, memory_mask: Optional[torch.Tensor] = None):
        return self.attention(x, memory, memory, attn_mask=memory_mask, need_weights=False)[0]


class SeparateAttention(nn.Module):  # key and value as they are passed: one tensor or two
    def __init__(self):
        super().__init__()
        self.attention = nn.MultiheadAttention(32, 4, batch_first=True)

    def forward(self, query, key, value):
        out, weights = self.attention(query, key, value)  # need_weights: True, the default
        return out, weights


class PaddedInside(nn.Module):  # the padding mask built in the method from the input's size
    def __init__(self):
        super().__init__()
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, batch_first=True), 2, enable_nested_tensor=False)

    def forward(self, x):
        mask = torch.zeros(x.shape[0], x.shape[1], dtype=torch.bool)
        mask[:, -x.shape[1] // 4:] = True
        return self.encoder(x, src_key_padding_mask=mask)


class PyTorchAttentionModules(unittest.TestCase):
    """nn.MultiheadAttention as users call it: self-attention, attention to a memory, masks (float,
    bool, 2-d, 3-d, key padding), need_weights either way, batch_first either way, and the
    decoder layers that call it. Each call is spelled as straight-line attention where its
    arguments allow (their ranks, dtypes and which of them are one tensor decided at lowering);
    the attention is one region; what stays in TorchScript is the masks' preparation (a bool mask
    made additive, its views) and, where weights are asked for, their mean over the heads."""

    # What would show the attention kept, in part or whole.
    attention = {"aten::linear", "aten::matmul", "aten::bmm", "aten::baddbmm", "aten::softmax", "aten::_native_multi_head_attention",
                 "aten::transpose", "aten::reshape", "aten::view", "prim::If", "prim::CallMethod", "prim::RaiseException"}

    def setUp(self):
        torch.manual_seed(5)

    def check(self, model, example, others=()):
        low = lowered(model, *example)
        report = str(torch_delegate.report(low))
        self.assertEqual(len(regions(low)), 1, report)
        self.assertFalse(set(kept(low)) & self.attention, report)
        with torch.no_grad():
            for args in (example,) + tuple(others):
                got, want = low(*args), model(*args)
                for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
                    self.assertLess(relative_error(g, w), 1e-5, report)
        return low

    def test_self_attention_batch_first_either_way_weights_or_not(self):
        for batch_first in (True, False):
            for need_weights in (False, True):
                with self.subTest(batch_first=batch_first, need_weights=need_weights):
                    model = SelfAttention(batch_first, need_weights).eval()
                    x = torch.randn(2, 9, 32) if batch_first else torch.randn(9, 2, 32)
                    y = torch.randn(3, 5, 32) if batch_first else torch.randn(5, 3, 32)
                    self.check(model, (x,), [(y,)])

    def test_masks_float_bool_three_dimensional_and_key_padding(self):
        model = SelfAttention().eval()
        x = torch.randn(2, 9, 32)
        causal = torch.triu(torch.full((9, 9), float("-inf")), diagonal=1)
        causal_bool = torch.triu(torch.ones(9, 9, dtype=torch.bool), diagonal=1)
        per_head = torch.randn(2 * 4, 9, 9)
        padding = torch.zeros(2, 9, dtype=torch.bool)
        padding[1, 6:] = True
        for name, example in (("float", (x, causal)), ("bool", (x, causal_bool)), ("per head", (x, per_head)),
                              ("key padding", (x, None, padding)), ("both", (x, causal_bool, padding))):
            with self.subTest(mask=name):
                low = self.check(model, example)
                decided = {c.test: c.value for c in torch_delegate.report(low).methods[0].decided}
                self.assertEqual(decided.get("attn_mask is None"), str(example[1] is None), decided)
        # Another length: the masks are inputs of the region, planned at their sizes.
        low = self.check(model, (x, causal_bool))
        with torch.no_grad():
            y = torch.randn(3, 5, 32)
            mask = torch.triu(torch.ones(5, 5, dtype=torch.bool), diagonal=1)
            self.assertLess(relative_error(low(y, mask), model(y, mask)), 1e-5)

    def test_attention_to_a_memory(self):
        for batch_first in (True, False):
            with self.subTest(batch_first=batch_first):
                model = CrossAttention(batch_first).eval()
                x, memory = (torch.randn(2, 7, 32), torch.randn(2, 11, 32)) if batch_first else (torch.randn(7, 2, 32), torch.randn(11, 2, 32))
                low = self.check(model, (x, memory), [(x[:1] if batch_first else x[:, :1], memory[:1] if batch_first else memory[:, :1])])
                decided = {c.test: (c.value, c.basis) for c in torch_delegate.report(low).methods[0].decided}
                self.assertEqual(decided.get("x is memory"), ("False", "the example"), decided)

    def test_which_arguments_are_one_tensor_is_checked_at_each_call(self):
        model = SeparateAttention().eval()
        q, kv = torch.randn(2, 7, 32), torch.randn(2, 11, 32)
        low = self.check(model, (q, kv, kv))  # key is value in the example: one projection for both
        decided = {c.test: c.value for c in torch_delegate.report(low).methods[0].decided}
        self.assertEqual(decided.get("key is value"), "True", decided)
        other = torch.randn(2, 11, 32)
        with torch.no_grad():  # another value: the check at the method's entry sends it to the method as it was
            for got, want in zip(low(q, kv, other), model(q, kv, other)):
                self.assertLess(relative_error(got, want), 1e-5)
        self.check(model, (q, kv, other))  # lowered with three tensors: three projections

    def test_decoder_stack_with_a_causal_mask(self):
        for norm_first in (False, True):
            with self.subTest(norm_first=norm_first):
                layer = nn.TransformerDecoderLayer(32, 4, 64, batch_first=True, norm_first=norm_first)
                model = nn.TransformerDecoder(layer, 2).eval()
                x, memory = torch.randn(2, 8, 32), torch.randn(2, 12, 32)
                causal = nn.Transformer.generate_square_subsequent_mask(8)
                low = lowered(model, x, memory, causal)
                report = str(torch_delegate.report(low))
                self.assertFalse(set(kept(low)) & self.attention, report)
                self.assertLessEqual(len(regions(low)), 3, report)
                with torch.no_grad():
                    self.assertLess(relative_error(low(x, memory, causal), model(x, memory, causal)), 1e-5)
                    y = torch.randn(1, 5, 32)
                    mask = nn.Transformer.generate_square_subsequent_mask(5)
                    self.assertLess(relative_error(low(y, memory[:1], mask), model(y, memory[:1], mask)), 1e-5)
                path = os.path.join(os.environ["TD_WORKDIR"], "transformer_decoder_lowered.pt")
                torch.jit.save(low, path)
                with torch.no_grad():
                    self.assertLess(relative_error(torch.jit.load(path)(x, memory, causal), model(x, memory, causal)), 1e-5)

    def test_a_mask_built_in_the_method_leaves_each_layer_one_region(self):
        # The mask's views read only the mask's sizes: the attention's own numbers stay in its region.
        model = PaddedInside().eval()
        x = torch.randn(2, 12, 32)
        low = lowered(model, x)
        report = str(torch_delegate.report(low))
        self.assertEqual(len(regions(low)), 2, report)
        self.assertFalse(set(kept(low)) & (self.attention - {"prim::If"}), report)
        with torch.no_grad():
            for y in (x, torch.randn(3, 8, 32)):
                self.assertLess(relative_error(low(y), model(y)), 1e-5)

    def test_encoder_with_a_causal_mask(self):
        layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
        model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
        x = torch.randn(2, 8, 32)
        causal = nn.Transformer.generate_square_subsequent_mask(8)
        low = lowered(model, x, causal)
        report = str(torch_delegate.report(low))
        self.assertLessEqual(len(regions(low)), 2, report)
        self.assertFalse(set(kept(low)) & (self.attention - {"prim::If"}), report)  # the encoder's own message stays
        with torch.no_grad():
            self.assertLess(relative_error(low(x, causal), model(x, causal)), 1e-5)


class UpBlock(nn.Module):  # a U-Net decoder's step: conv, transposed conv up, conv (2-d, or 1-d or 3-d)
    def __init__(self, groups=1, bias=True, kernel=2, stride=2, padding=0, dilation=1, output_padding=0, spatial=2):
        super().__init__()
        conv, transposed = {1: (nn.Conv1d, nn.ConvTranspose1d), 2: (nn.Conv2d, nn.ConvTranspose2d), 3: (nn.Conv3d, nn.ConvTranspose3d)}[spatial]
        self.before = conv(16, 16, 3, padding=1)
        self.up = transposed(16, 8, kernel, stride=stride, padding=padding, groups=groups, bias=bias, dilation=dilation,
                             output_padding=output_padding)
        self.after = conv(8, 8, 3, padding=1)

    def forward(self, x):
        return self.after(torch.relu(self.up(torch.relu(self.before(x)))))


class TransposedConvolutions(unittest.TestCase):
    """nn.ConvTranspose2d in the region, on oneDNN's deconvolution: stride 2 kernel 2 (a U-Net's),
    kernels 3 and 4 with padding, groups, no bias, dilation; at the example's shape and another;
    saved and loaded. Output padding is not taken (the node stays in TorchScript)."""

    def test_in_the_region_on_a_deconvolution_kernel(self):
        torch.manual_seed(6)
        for settings in ({}, {"groups": 2}, {"bias": False}, {"kernel": 3, "padding": 1}, {"kernel": 4, "padding": 1},
                         {"kernel": 3, "stride": 1, "padding": 1, "dilation": 2}):
            with self.subTest(**settings):
                model = UpBlock(**settings).eval()
                x = torch.randn(1, 16, 20, 24)
                low = lowered(model, x)
                self.assertEqual(len(regions(low)), 1, str(torch_delegate.report(low)))
                self.assertEqual(kept(low), [], str(torch_delegate.report(low)))
                with torch.no_grad():
                    for y in (x, torch.randn(2, 16, 13, 9)):
                        self.assertLess(relative_error(low(y), model(y)), 1e-5)
                kernels = [implementation for step, kind, implementation in plan(low) if step.endswith("deconvolution") and kind == "deconvolution"]
                self.assertTrue(kernels and all(not implementation.startswith("ref") for implementation in kernels), plan(low))
        path = os.path.join(os.environ["TD_WORKDIR"], "deconvolution_lowered.pt")
        torch.jit.save(low, path)
        with torch.no_grad():
            self.assertLess(relative_error(torch.jit.load(path)(x), model(x)), 1e-5)

    def test_output_padding_and_other_ranks(self):
        # Output padding (oneDNN's right padding less it), and 1-d and 3-d transposed convolutions.
        torch.manual_seed(7)
        for settings, x, other in (
                ({"kernel": 3, "padding": 1, "output_padding": 1}, torch.randn(1, 16, 10, 10), torch.randn(2, 16, 7, 12)),
                ({"kernel": 3, "stride": 3, "output_padding": 2, "groups": 2}, torch.randn(1, 16, 6, 5), torch.randn(1, 16, 9, 4)),
                ({"spatial": 1}, torch.randn(1, 16, 40), torch.randn(3, 16, 17)),
                ({"spatial": 1, "kernel": 5, "padding": 2, "output_padding": 1}, torch.randn(1, 16, 40), torch.randn(2, 16, 9)),
                ({"spatial": 3}, torch.randn(1, 16, 4, 6, 6), torch.randn(2, 16, 3, 5, 7)),
                ({"spatial": 3, "kernel": 3, "padding": 1, "output_padding": 1}, torch.randn(1, 16, 4, 6, 6), torch.randn(1, 16, 5, 3, 4))):
            with self.subTest(**settings):
                model = UpBlock(**settings).eval()
                low = lowered(model, x)
                self.assertEqual([k for k in kept(low) if k.startswith("aten::conv")], [], str(torch_delegate.report(low)))
                with torch.no_grad():
                    for y in (x, other):
                        self.assertLess(relative_error(low(y), model(y)), 1e-5)


class TextCnn(nn.Module):  # Kim's sentence classifier after its embedding: Conv1d of widths 3-5, max over time
    def __init__(self, form="amax"):
        super().__init__()
        self.convs = nn.ModuleList([nn.Conv1d(32, 24, k) for k in (3, 4, 5)])
        self.classifier = nn.Linear(72, 3)
        self.form = form

    def forward(self, x):
        x = x.transpose(1, 2)
        features = []
        for conv in self.convs:
            y = F.relu(conv(x))
            if self.form == "amax":
                features.append(y.amax(dim=2))
            elif self.form == "max":
                features.append(torch.max(y, dim=-1)[0])
            else:  # kept dimension, then flattened
                features.append(y.amax(dim=[2], keepdim=True).flatten(1))
        return self.classifier(torch.cat(features, dim=1))


class MaxOverTime(unittest.TestCase):
    """A text CNN's max over time (amax, max over a dimension) and the cat of its [N, C] features
    in the region: one region with the Conv1ds and the Linear; other lengths and batches."""

    def test_a_text_cnn_is_one_region(self):
        torch.manual_seed(9)
        for form in ("amax", "max", "keepdim"):
            with self.subTest(form=form):
                model = TextCnn(form).eval()
                x = torch.randn(2, 40, 32)
                low = lowered(model, x)
                report = str(torch_delegate.report(low))
                self.assertEqual(len(regions(low)), 1, report)
                self.assertEqual([k for k in kept(low) if k.startswith("aten::")], [], report)
                with torch.no_grad():
                    for y in (x, torch.randn(1, 17, 32), torch.randn(5, 64, 32)):
                        self.assertLess(relative_error(low(y), model(y)), 1e-5)
                kernels = [implementation for step, kind, implementation in plan(low) if step.endswith("reduce") and kind == "reduction"]
                self.assertTrue(kernels and not any(k.startswith("ref") for k in kernels), plan(low))

    def test_a_max_whose_indices_are_read_stays_in_torchscript(self):
        class Argmax(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv1d(8, 8, 3)
                self.head = nn.Linear(8, 2)

            def forward(self, x):
                values, indices = torch.max(self.conv(x), dim=2)
                return self.head(values), indices

        model = Argmax().eval()
        x = torch.randn(1, 8, 20)
        low = lowered(model, x)
        self.assertIn("aten::max", kept(low))
        with torch.no_grad():
            got, want = low(x), model(x)
            self.assertLess(relative_error(got[0], want[0]), 1e-5)
            self.assertTrue(torch.equal(got[1], want[1]))


class TinyUNet(nn.Module):  # skips kept in a Python list: appended on the way down, popped on the way up
    def __init__(self, read="pop"):
        super().__init__()
        self.downs = nn.ModuleList([nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 16, 3, padding=1)])
        self.ups = nn.ModuleList([nn.ConvTranspose2d(16, 16, 2, stride=2), nn.ConvTranspose2d(32, 8, 2, stride=2)])
        self.head = nn.Conv2d(16, 2, 1)
        self.read = read

    def forward(self, x):
        skips = []
        for down in self.downs:
            x = torch.relu(down(x))
            skips.append(x)
            x = F.max_pool2d(x, 2)
        for up in self.ups:
            if self.read == "pop":
                skip = skips.pop()
            else:  # the last by index, then dropped
                skip = skips[-1]
                skips.pop(-1)
            x = torch.cat([skip, torch.relu(up(x))], dim=1)
        return self.head(x)


class ListsOfTensors(unittest.TestCase):
    """A list of tensors grown by appends and read by pops, indexing and len at the method's top
    level (a U-Net's skips) is resolved at lowering: each pop or index is the element it gives,
    so the list cuts no region."""

    def test_a_unet_whose_skips_are_a_list_is_one_region(self):
        torch.manual_seed(10)
        for read in ("pop", "index"):
            with self.subTest(read=read):
                model = TinyUNet(read).eval()
                x = torch.randn(1, 3, 32, 32)
                low = lowered(model, x)
                report = str(torch_delegate.report(low))
                self.assertEqual(len(regions(low)), 1, report)
                self.assertFalse({"aten::pop", "aten::append", "aten::__getitem__"} & set(kept(low)), report)
                with torch.no_grad():
                    for y in (x, torch.randn(2, 3, 24, 40)):
                        self.assertLess(relative_error(low(y), model(y)), 1e-5)

    def test_a_pop_of_an_empty_list_still_raises(self):
        class Empty(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(3, 3, 3)

            def forward(self, x):
                kept = [self.conv(x)]
                kept.pop()
                return self.conv(kept.pop())

        with self.assertRaisesRegex(Exception, "example_inputs: running the method on them failed"):
            lowered(Empty().eval(), torch.randn(1, 3, 8, 8))


class Upsampled(nn.Module):  # a decoder step: conv, F.interpolate by a factor, conv
    def __init__(self, mode="nearest", scale=2.0):
        super().__init__()
        self.before = nn.Conv2d(8, 8, 3, padding=1)
        self.after = nn.Conv2d(8, 4, 3, padding=1)
        self.mode = mode
        self.scale = scale

    def forward(self, x):
        return self.after(F.interpolate(torch.relu(self.before(x)), scale_factor=self.scale, mode=self.mode))


class UpToSkip(nn.Module):  # an FPN's or a segmentation head's upsampling: to the sizes of another tensor
    def __init__(self, mode="bilinear"):
        super().__init__()
        self.down = nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.conv = nn.Conv2d(8, 8, 3, padding=1)
        self.mode = mode

    def forward(self, x):
        skip = self.conv(x)
        y = torch.relu(self.down(x))
        if self.mode == "nearest":
            y = F.interpolate(y, size=skip.shape[2:], mode="nearest")
        else:
            y = F.interpolate(y, size=skip.shape[-2:], mode="bilinear", align_corners=False)
        return y + skip


class Interpolation(unittest.TestCase):
    """F.interpolate and nn.Upsample by whole factors, nearest and bilinear (align_corners False),
    in the region on oneDNN's resampling: its checks of the input's rank and its list of factors
    (a list comprehension over the spatial dimensions) fold at lowering. Fractional factors stay
    in TorchScript (PyTorch maps them by the factor, oneDNN by the sizes' ratio)."""

    def test_whole_factors_are_in_the_region(self):
        torch.manual_seed(12)
        for mode, scale in (("nearest", 2.0), ("bilinear", 2.0), ("nearest", 3.0), ("bilinear", 4.0)):
            with self.subTest(mode=mode, scale=scale):
                model = Upsampled(mode, scale).eval()
                x = torch.randn(1, 8, 20, 24)
                low = lowered(model, x)
                report = str(torch_delegate.report(low))
                self.assertEqual(len(regions(low)), 1, report)
                self.assertEqual([k for k in kept(low) if k.startswith("aten::")], [], report)
                with torch.no_grad():
                    for y in (x, torch.randn(2, 8, 13, 9)):
                        self.assertLess(relative_error(low(y), model(y)), 1e-5)
                kernels = [implementation for step, kind, implementation in plan(low) if step.endswith("resample") and kind == "resampling"]
                self.assertTrue(kernels and not any(k.startswith("ref") for k in kernels), plan(low))
        upsample = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(8, 4, 3, padding=1)).eval()
        low = lowered(upsample, x)
        self.assertEqual(len(regions(low)), 1, str(torch_delegate.report(low)))
        with torch.no_grad():
            self.assertLess(relative_error(low(x), upsample(x)), 1e-5)

    def test_to_the_sizes_of_another_tensor(self):
        # `size=skip.shape[2:]`: F.interpolate's check of the list's length folds at lowering, and
        # the sizes are computed in the region for each shape (its size program).
        torch.manual_seed(13)
        for mode in ("bilinear", "nearest"):
            with self.subTest(mode=mode):
                model = UpToSkip(mode).eval()
                x = torch.randn(1, 8, 20, 24)
                low = lowered(model, x)
                report = str(torch_delegate.report(low))
                self.assertEqual(len(regions(low)), 1, report)
                self.assertEqual(kept(low), [], report)
                with torch.no_grad():
                    for y in (x, torch.randn(2, 8, 15, 9), torch.randn(1, 8, 32, 32)):
                        self.assertLess(relative_error(low(y), model(y)), 1e-5)

    def test_a_fractional_factor_stays_in_torchscript(self):
        model = Upsampled("nearest", 1.5).eval()
        x = torch.randn(1, 8, 20, 24)
        low = lowered(model, x)
        self.assertIn("aten::upsample_nearest2d", kept(low))
        with torch.no_grad():
            self.assertLess(relative_error(low(x), model(x)), 1e-5)



class Recurrent(nn.Module):  # nn.LSTM or nn.GRU after a Linear, its output sequence (or final state) out
    def __init__(self, kind="LSTM", features=20, hidden=24, layers=1, final_state=False, **settings):
        super().__init__()
        self.embed = nn.Linear(features, features)
        self.rnn = getattr(nn, kind)(features, hidden, layers, **settings)
        self.final_state = final_state

    def forward(self, x):
        out, state = self.rnn(torch.relu(self.embed(x)))
        if self.final_state:
            return state[0] if isinstance(state, tuple) else state
        return out


class WithStates(nn.Module):  # initial states given: an LSTM's (h0, c0), a GRU's h0, as a streaming model passes them
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(16, 12, 2, batch_first=True)
        self.gru = nn.GRU(12, 12, 2)

    def forward(self, x, h0, c0):
        return self.gru(self.lstm(x, (h0, c0))[0].transpose(0, 1), h0)[0]


RECURRENT = ("aten::lstm", "aten::gru", "aten::rnn_tanh", "aten::rnn_relu")


class RecurrentLayers(unittest.TestCase):
    """nn.LSTM, nn.GRU and nn.RNN calls as one aten::lstm (aten::gru, aten::rnn_tanh, aten::rnn_relu) in the region: a matmul over the
    sequence and our recurrence kernel where the CPU has AVX2 (else oneDNN's RNN primitive), one,
    two and three layers, bidirectional, batch_first, without biases, hidden sizes not a multiple
    of 8, at the example's shape and others; states given; saved and loaded. The final states
    are not made by a region: a model that reads them runs its layer in TorchScript."""

    # Outputs are in [-1, 1] (tanh); float32 rounding of a 24-term product and the cell's exp
    # (relative 2e-7) give about 1e-6 a step, which the gates' contraction keeps from growing.
    TOLERANCE = 1e-5

    CASES = (("LSTM", {}), ("LSTM", {"layers": 2, "bidirectional": True, "batch_first": True}),
             ("LSTM", {"layers": 3, "hidden": 13, "bias": False}), ("GRU", {}),
             ("GRU", {"layers": 2, "bidirectional": True}), ("GRU", {"hidden": 19, "batch_first": True, "bias": False}),
             ("RNN", {"layers": 2, "bidirectional": True}), ("RNN", {"nonlinearity": "relu", "hidden": 11, "batch_first": True}))

    def check(self, model, x, others):
        low = lowered(model, x)
        report = str(torch_delegate.report(low))
        if OWN_AVX2_KERNELS:
            self.assertEqual(len(regions(low)), 1, report)
            self.assertEqual([k for k in kept(low) if k in RECURRENT + ("aten::linear",)], [], report)
        else:  # oneDNN's RNN primitives would run on its reference driver: TorchScript's is faster
            self.assertTrue(set(RECURRENT) & set(kept(low)), report)
        with torch.no_grad():
            for y in (x,) + others:
                self.assertLess((low(y) - model(y)).abs().max().item(), self.TOLERANCE)
        return low

    def test_layers_in_the_region(self):
        torch.manual_seed(14)
        for kind, settings in self.CASES:
            with self.subTest(kind=kind, **settings):
                model = Recurrent(kind, **settings).eval()
                first = settings.get("batch_first", False)
                shape = (lambda n, t: (n, t, 20)) if first else (lambda n, t: (t, n, 20))
                low = self.check(model, torch.randn(*shape(1, 30)), (torch.randn(*shape(3, 7)), torch.randn(*shape(6, 45))))
                # Our kernel where the CPU has AVX2 (after a matmul over the sequence), else oneDNN's RNN primitive.
                kernels = [implementation for step, kind, implementation in plan(low) if step.endswith("recurrent") and kind == "rnn"]
                self.assertTrue(not OWN_AVX2_KERNELS or (kernels and all("recurrence:avx2" in k for k in kernels)), plan(low))

    @unittest.skipUnless(OWN_AVX2_KERNELS, "recurrent layers are delegated where our kernel runs")
    def test_traced(self):
        # A trace calls aten::lstm (aten::gru) itself, its zero states made by aten::zeros from the
        # input's size: one region with the Linear before it, at other shapes too.
        torch.manual_seed(17)
        for kind in ("LSTM", "GRU", "RNN"):
            with self.subTest(kind=kind):
                model = Recurrent(kind, layers=2, bidirectional=True).eval()
                x = torch.randn(30, 2, 20)
                low = torch_delegate.lower(torch.jit.trace(model, (x,)), "onednn", partial=True, example_inputs=(x,))
                report = str(torch_delegate.report(low))
                self.assertEqual(len(regions(low)), 1, report)
                self.assertEqual(kept(low), [], report)
                with torch.no_grad():
                    for y in (x, torch.randn(9, 5, 20)):
                        self.assertLess((low(y) - model(y)).abs().max().item(), self.TOLERANCE)

    def test_onednn_rnn_primitives_agree(self):
        # Our kernel and oneDNN's LSTM and GRU primitives (TD_ONEDNN_RECURRENCE=0) give eager's results.
        for kind in ("LSTM", "GRU", "RNN"):
            made = implementations_by_switch(
                "TD_ONEDNN_RECURRENCE",
                f"sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); from test_onednn_fast_paths import Recurrent;"
                f"m = Recurrent('{kind}', hidden=16, layers=2, bidirectional=True)",
                "(9, 2, 20)")
            if OWN_AVX2_KERNELS:
                self.assertIn("recurrence:avx2", made["1"])
            self.assertNotIn("recurrence:avx2", made["0"])

    def test_initial_states_given(self):
        torch.manual_seed(15)
        model = WithStates().eval()
        given = (torch.randn(2, 11, 16), torch.randn(2, 2, 12), torch.randn(2, 2, 12))
        low = lowered(model, *given)
        report = str(torch_delegate.report(low))
        if not OWN_AVX2_KERNELS:
            self.skipTest("recurrent layers are delegated where our kernel runs")
        self.assertEqual([k for k in kept(low) if k in ("aten::lstm", "aten::gru")], [], report)
        with torch.no_grad():
            for y in (given, (torch.randn(5, 4, 16), torch.randn(2, 5, 12), torch.randn(2, 5, 12))):
                self.assertLess((low(*y) - model(*y)).abs().max().item(), self.TOLERANCE)
            with self.assertRaisesRegex(Exception, "initial state"):  # states of another batch than the input's
                low(torch.randn(3, 4, 16), torch.randn(2, 5, 12), torch.randn(2, 5, 12))

    def test_final_states_read_stay_in_torchscript(self):
        model = Recurrent("GRU", final_state=True).eval()
        x = torch.randn(10, 2, 20)
        low = lowered(model, x)
        self.assertIn("aten::gru", kept(low))
        with torch.no_grad():
            self.assertLess((low(x) - model(x)).abs().max().item(), self.TOLERANCE)

    @unittest.skipUnless(OWN_AVX2_KERNELS, "recurrent layers are delegated where our kernel runs")
    def test_other_features_are_an_error(self):
        model = Recurrent("LSTM").eval()
        low = lowered(model, torch.randn(5, 1, 20))
        with self.assertRaisesRegex(Exception, "20"):
            low(torch.randn(5, 1, 21))

    def test_saved_and_loaded(self):
        torch.manual_seed(16)
        model = Recurrent("LSTM", layers=2, bidirectional=True, batch_first=True).eval()
        x = torch.randn(2, 9, 20)
        low = lowered(model, x)
        path = os.path.join(os.environ["TD_WORKDIR"], "recurrent_lowered.pt")
        torch.jit.save(low, path)
        with torch.no_grad():
            loaded = torch.jit.load(path)
            for y in (x, torch.randn(1, 30, 20)):
                self.assertLess((loaded(y) - model(y)).abs().max().item(), self.TOLERANCE)


if __name__ == "__main__":
    unittest.main()
