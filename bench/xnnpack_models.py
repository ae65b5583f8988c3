"""torchvision's CNNs through the xnnpack backend against LibTorch's CPU paths, side by side in one
process, interleaved (round after round, every variant once per round; the median of the rounds).

Variants: eager, scripted, frozen, torch.jit.optimize_for_inference (oneDNN: the fastest LibTorch
path here), optimize_for_mobile (XNNPACK per op) and the model lowered to xnnpack
(torch_delegate.lower(frozen, "xnnpack", partial=True, example_inputs=(x,))). Batch 1 and 8, 1
and 2 threads; optimize_for_mobile at batch 1 only (7-10x slower than eager here: its per-op
XNNPACK pool fights ATen's OpenMP threads; at batch 8 one round would take minutes).

Also: each model's FLOP/s (convolutions and linears, counted from the eager model) against this
machine's measured peak (the faster of a large GEMM run as a 1x1 convolution through oneDNN and
through xnnpack, in the same run), and a per-region profile of the lowered model when a goal is
missed.

Usage: PYTHONPATH=<build>/python bench/xnnpack_models.py <libxnnpack_backend.so> <out.md> [<plot.png>] [--quick]
Environment: whatever the machine has (no OMP_WAIT_POLICY): the default users get.
"""
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torchvision
from torch.utils.mobile_optimizer import optimize_for_mobile

import torch_delegate

MODELS = ["resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0", "regnet_y_400mf"]
library, out_path = sys.argv[1], sys.argv[2]
plot_path = sys.argv[3] if len(sys.argv) > 3 and not sys.argv[3].startswith("--") else None
quick = "--quick" in sys.argv
torch.ops.load_library(library)


def flops_of(model, x):
    """Multiply-adds x 2 of every Conv2d and Linear in one forward."""
    total = [0]

    def conv_hook(module, inputs, output):
        kh, kw = module.kernel_size
        total[0] += 2 * output.numel() * (module.in_channels // module.groups) * kh * kw

    def linear_hook(module, inputs, output):
        total[0] += 2 * output.numel() * module.in_features

    hooks = [m.register_forward_hook(conv_hook) for m in model.modules() if isinstance(m, nn.Conv2d)]
    hooks += [m.register_forward_hook(linear_hook) for m in model.modules() if isinstance(m, nn.Linear)]
    with torch.no_grad():
        model(x)
    for hook in hooks:
        hook.remove()
    return total[0]


def timed(function, x):
    start = time.perf_counter()
    function(x)
    return time.perf_counter() - start


def measure(variants, x, rounds):
    """Median seconds per variant, interleaved."""
    times = {name: [] for name in variants}
    with torch.no_grad():
        for function in variants.values():  # warm up (first calls compile, pack, allocate)
            function(x)
            function(x)
        for _ in range(rounds):
            for name, function in variants.items():
                times[name].append(timed(function, x))
    return {name: statistics.median(values) for name, values in times.items()}


def peak_flops(threads):
    """The faster of oneDNN and xnnpack on a large GEMM (a 1x1 convolution, 1024x1024x1024)."""
    conv = nn.Conv2d(1024, 1024, 1, bias=False).eval()
    x = torch.rand(1, 1024, 32, 32)
    frozen = torch.jit.freeze(torch.jit.script(conv))
    variants = {"onednn": torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.script(conv))),
                "xnnpack": torch_delegate.lower(frozen, "xnnpack", partial=True, example_inputs=(x,))}
    seconds = measure(variants, x, 5)
    return {name: 2 * 1024 ** 3 / s for name, s in seconds.items()}


rows = []
profiles = []
configurations = [(1, 2), (1, 1), (8, 2), (8, 1)]
if quick:
    configurations = [(1, 2), (8, 2)]
peaks = {}
for batch, threads in configurations:
    torch.set_num_threads(threads)  # before lowering: xnnpack's runtime takes the count at compile
    if threads not in peaks:
        peaks[threads] = peak_flops(threads)
    for name in MODELS:
        torch.manual_seed(0)
        model = getattr(torchvision.models, name)(weights=None).eval()
        x = torch.rand(batch, 3, 224, 224)
        scripted = torch.jit.script(model)
        frozen = torch.jit.freeze(torch.jit.script(model))
        variants = {
            "eager": model,
            "scripted": scripted,
            "frozen": frozen,
            "oneDNN": torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.script(model))),
            "xnnpack": torch_delegate.lower(torch.jit.freeze(torch.jit.script(model)), "xnnpack", partial=True,
                                            example_inputs=(x,)),
        }
        if batch == 1:
            variants["mobile"] = optimize_for_mobile(torch.jit.script(model))
        rounds = (3 if quick else 7) if batch == 1 else (2 if quick else 3)
        seconds = measure(variants, x, rounds)
        flops = flops_of(model, x)
        rows.append((name, batch, threads, seconds, flops))
        print(f"{name:20s} b{batch} t{threads} " + "  ".join(f"{k} {v * 1e3:7.1f}" for k, v in seconds.items()) +
              f"  xnnpack/oneDNN {seconds['oneDNN'] / seconds['xnnpack']:.2f}x", file=sys.stderr, flush=True)


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values))


lines = ["| model | batch | threads | eager | scripted | frozen | oneDNN | mobile | **xnnpack** | xnnpack vs oneDNN | vs scripted | GFLOP/s (% of peak) |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|"]
for name, batch, threads, s, flops in rows:
    ms = {k: f"{v * 1e3:.1f}" for k, v in s.items()}
    gflops = flops / s["xnnpack"] / 1e9
    peak = max(peaks[threads].values()) / 1e9
    lines.append(f"| {name} | {batch} | {threads} | {ms['eager']} | {ms['scripted']} | {ms['frozen']} | {ms['oneDNN']} | "
                 f"{ms.get('mobile', '-')} | **{ms['xnnpack']}** | {s['oneDNN'] / s['xnnpack']:.2f}x | "
                 f"{s['scripted'] / s['xnnpack']:.2f}x | {gflops:.1f} ({100 * gflops / peak:.0f} %) |")
goal_rows = [r for r in rows if r[1] == 1 and r[2] == 2]
ratios = [r[3]["oneDNN"] / r[3]["xnnpack"] for r in goal_rows]
versus_scripted = [r[3]["scripted"] / r[3]["xnnpack"] for r in goal_rows]
summary = [
    "",
    f"Batch 1, 2 threads (the goal): geometric mean {geomean(ratios):.2f}x faster than optimize_for_inference "
    f"(goal >= 1.3x), slowest {min(ratios):.2f}x ({goal_rows[ratios.index(min(ratios))][0]}; goal >= 1.0x), "
    f"against scripted {min(versus_scripted):.2f}x to {max(versus_scripted):.2f}x (goal >= 2x each).",
    "",
    "Peak measured in the same run (a 1024x1024x1024 GEMM as a 1x1 convolution): " +
    "; ".join(f"{t} thread{'s' if t > 1 else ''}: oneDNN {p['onednn'] / 1e9:.1f}, xnnpack {p['xnnpack'] / 1e9:.1f} GFLOP/s"
              for t, p in sorted(peaks.items())) + ".",
]
text = "\n".join(lines + summary) + "\n"
with open(out_path, "w") as out:
    out.write(text)
print(text)

if plot_path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 3.6))
    names = [r[0] for r in goal_rows]
    positions = range(len(names))
    for offset, variant, color in [(-0.3, "scripted", "#bbbbbb"), (-0.1, "frozen", "#999999"),
                                   (0.1, "oneDNN", "#4c72b0"), (0.3, "xnnpack", "#dd8452")]:
        ax.bar([p + offset for p in positions], [r[3]["oneDNN"] / r[3][variant] for r in goal_rows], 0.2, label=variant,
               color=color)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(list(positions))
    ax.set_xticklabels(names, rotation=15)
    ax.set_ylabel("speed vs optimize_for_inference")
    ax.set_title("torchvision CNNs, batch 1, 2 threads (higher is faster)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(plot_path, dpi=110)
