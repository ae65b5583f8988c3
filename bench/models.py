"""The models the benches time: torchvision's architectures with random weights (offline,
weights=None) and a BERT-base-shaped encoder written out, each with its input (batch 1)."""
import math
import os
import random
import subprocess
import sys
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

# Scripted GoogLeNet warns on every call that it returns a tuple: thousands of lines in a bench log.
warnings.filterwarnings("ignore", message="Scripted GoogleNet always returns GoogleNetOutputs Tuple")

# torchvision's CNNs the ORT bench judges its goals over (bench/ort_models.py), and its transformers.
CNNS = ["resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_small", "mobilenet_v3_large", "efficientnet_b0",
        "squeezenet1_0", "shufflenet_v2_x1_0", "regnet_y_400mf", "convnext_tiny", "googlenet"]
TRANSFORMERS = ["vit_b_16", "swin_t", "bert_base_encoder"]
# Video classifiers (3-d convolutions): not in the default runs (a call takes 0.1-0.3 s);
# bench/ort_models.py --models r3d_18,... measures them against ONNX Runtime.
VIDEO = ["r3d_18", "mc3_18", "r2plus1d_18", "s3d"]


# Seconds each block of an interleaved timing waits before its first call. An engine's worker
# threads spin for a while after its calls (ONNX Runtime's by default, OpenMP's, XNNPACK's
# pthreadpool's) and on 2 cores that spinning took the next variant's cores: with the recipe's
# lowering and ORT's process beside it, ResNet-18 lowered to onednn timed 12.0 ms, 10.2 without
# the recipe, 9.9 alone; each variant is timed as it would run alone.
SETTLE = float(os.environ.get("TD_BENCH_SETTLE", "0.05"))


def machine_line():
    """The CPU as a figure's label: its name, cores and widest vector ISA, oneDNN's cap
    (ONEDNN_MAX_CPU_ISA) and whether bench/as_avx2.py runs the process on AVX2 code."""
    flags = open("/proc/cpuinfo").read()
    name = next((line.split(":", 1)[1].strip() for line in flags.splitlines() if line.startswith("model name")), "?")
    level = "AVX-512" if " avx512f" in flags else "AVX2 without AVX-512" if " avx2" in flags else "no AVX2"
    if os.environ.get("TD_BENCH_AS_AVX2") == "1":
        level = f"AVX2 code on an {level} CPU (bench/as_avx2.py: CPUID without AVX-512, every engine)"
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA")
    return f"{name}, {os.cpu_count()} cores, {level}" + (f" (oneDNN capped: ONEDNN_MAX_CPU_ISA={cap})" if cap else "")


def blas_in_use():
    """The BLAS this process has loaded, read from /proc/self/maps (not from what a variable
    says): "openblas", "reference" or the library's path; "unknown" where no BLAS library is
    mapped (statically linked, or off Linux)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split(None, 5)[5].strip().removesuffix(" (deleted)")
                     for line in maps if len(line.split(None, 5)) == 6 and "/" in line}
    except OSError:
        return "unknown"
    for path in sorted(paths):
        name = os.path.basename(path)
        if name.startswith(("libopenblas", "libblas", "libmkl_rt", "libblis")):
            if "openblas" in path:
                return "openblas"
            if "/blas/" in path:
                return "reference"
            return path
    return "unknown"


# A process keeping one core busy: a spinning loop that ends when its parent does. A bench
# stopped by a signal (or a crash) cannot run its cleanup, and a plain `while True: pass` then
# spun on: one left behind by a stopped bench/measured_lowering.py took a core for 40 minutes
# and made every later figure 3x slower (ResNet-18's 200 scripted calls 14.8 s against 4.4).
# The parent's pid is given, not read at start: a parent that ends before the child's first
# getppid() would otherwise leave it spinning under init.
SPIN = """import os, sys
parent = int(sys.argv[1])
while os.getppid() == parent:
    for _ in range(20000):
        pass
"""


def busy_process():
    """Starts another process that keeps one core busy until it is killed or this one ends."""
    return subprocess.Popen([sys.executable, "-c", SPIN, str(os.getpid())])


def round_order(names, round_):
    """The order of the variants in round `round_` of an interleaved timing: a permutation drawn
    anew each round (seeded by the round: the same in every run), so that no variant always
    follows the same one. A rotation keeps the neighbours: in bench/measured_lowering.py the
    recipe always came right after xnnpack, whose pool's spinning threads slowed its next calls,
    and SqueezeNet's recipe timed 0.52x onednn alone with the same plan (8.4 against 4.4 ms)."""
    return random.Random(round_).sample(list(names), len(names))


class EncoderLayer(nn.Module):
    """A BERT-base encoder layer, written out: attention (q, k, v, out Linears, scaled matmuls,
    softmax), GELU feed-forward, residual adds, post-LayerNorms."""

    def __init__(self, d=768, heads=12, ff=3072):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.ff1 = nn.Linear(d, ff)
        self.ff2 = nn.Linear(ff, d)
        self.norm1 = nn.LayerNorm(d)
        self.norm2 = nn.LayerNorm(d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q = q.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
        k = k.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
        v = v.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
        attention = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.heads)), dim=-1)
        context = torch.matmul(attention, v).transpose(1, 2).reshape(b, t, d)
        x = self.norm1(x + self.out(context))
        return self.norm2(x + self.ff2(F.gelu(self.ff1(x))))


class Encoder(nn.Module):
    def __init__(self, layers=12):
        super().__init__()
        self.layers = nn.ModuleList([EncoderLayer() for _ in range(layers)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def model_and_input(name):
    """The model in eval mode and its input; seeded, so two processes build the same ones."""
    import torchvision
    torch.manual_seed(0)
    if name == "bert_base_encoder":
        return Encoder().eval(), torch.rand(1, 128, 768)
    kwargs = {"aux_logits": False, "init_weights": True} if name in ("googlenet", "inception_v3") else {}
    family = torchvision.models.video if name in VIDEO else torchvision.models
    model = getattr(family, name)(weights=None, **kwargs).eval()
    # Random BatchNorm statistics and affine parameters: with the defaults some models' outputs
    # hardly depend on their input, and a comparison of outputs would prove little.
    for module in model.modules():
        if isinstance(module, (nn.BatchNorm2d, nn.BatchNorm3d)):
            with torch.no_grad():
                module.running_mean.uniform_(-0.1, 0.1)
                module.running_var.uniform_(0.5, 1.5)
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.1, 0.1)
    if name == "vit_b_16":  # its classifier starts at zero: an output of zeros whatever the input
        with torch.no_grad():
            model.heads.head.weight.normal_(0, 0.02)
    if name in VIDEO:  # a clip of 16 frames, 112x112 (S3D's last pooling needs 224x224)
        side = 224 if name == "s3d" else 112
        return model, torch.rand(1, 3, 16, side, side)
    return model, torch.rand(1, 3, 224, 224)
