"""Traced models through partial lowering (issue 37): torchvision's models traced
(torch.jit.trace) and frozen-traced, their delegated nodes next to their scripted forms' for the
shipped CNN backends, and the time of a traced model lowered to ["onednn"] next to LibTorch's own
path for a traced model, torch.jit.optimize_for_inference(torch.jit.freeze(trace)), side by side
in one process, interleaved (round after round, each variant once per round; medians).

Batch 1, 3x224x224, 2 threads, random weights (weights=None), default environment.

Usage: PYTHONPATH=<build>/python /usr/bin/python3 bench/traced_models.py [--nodes] [--time] [--rounds N] [--models a,b] [--size S]
(--nodes: the node-count table over the whole sweep; --time: the timing table over TIMED;
neither: both)
"""
import argparse
import statistics
import time
import warnings

import torch
import torchvision

import torch_delegate

SWEEP = ["resnet18", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0", "squeezenet1_0", "shufflenet_v2_x1_0",
         "regnet_y_400mf", "convnext_tiny", "densenet121", "googlenet", "swin_t", "vit_b_16"]
TIMED = ["resnet18", "mobilenet_v2", "shufflenet_v2_x1_0"]
BACKENDS = ["onednn", "xnnpack"]
KWARGS = {"googlenet": {"aux_logits": False, "init_weights": True}}

parser = argparse.ArgumentParser()
parser.add_argument("--nodes", action="store_true")
parser.add_argument("--time", action="store_true")
parser.add_argument("--rounds", type=int, default=30)
parser.add_argument("--models", default="")
parser.add_argument("--size", type=int, default=224, help="the node table's image size (the timing is at 224)")
args = parser.parse_args()
both = not args.nodes and not args.time

torch.set_num_threads(2)
for backend in BACKENDS:
    torch_delegate.load_backend(backend)
flags = open("/proc/cpuinfo").read()
cpu = next((line.split(":", 1)[1].strip() for line in flags.splitlines() if line.startswith("model name")), "?")
isa = "AVX-512" if " avx512f" in flags else "AVX2 without AVX-512" if " avx2" in flags else "no AVX2"
print(f"CPU: {cpu}, {isa}; torch {torch.__version__}, {torch.get_num_threads()} threads")


def build(name, size=224):
    torch.manual_seed(0)
    arguments = dict(KWARGS.get(name, {}), **({"image_size": size} if name == "vit_b_16" else {}))
    return getattr(torchvision.models, name)(weights=None, **arguments).eval(), torch.randn(1, 3, size, size)


def trace(model, x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.no_grad():
            return torch.jit.trace(model, (x,))


def delegated(module, backend, x):
    report = torch_delegate.plan(module, [backend], example_inputs=(x,))
    return f"{report.region_count}/{report.methods[0].delegated_nodes}"


if args.nodes or both:
    print(f"\nRegions/delegated nodes per form (plan with example inputs, {args.size}x{args.size}):")
    print("| model | backend | scripted | traced | frozen scripted | frozen traced |")
    print("|---|---|---|---|---|---|")
    for name in (args.models.split(",") if args.models else SWEEP):
        model, x = build(name, args.size)
        forms = [torch.jit.script(model), trace(model, x), torch.jit.freeze(torch.jit.script(model)),
                 torch.jit.freeze(trace(model, x))]
        for backend in BACKENDS:
            print(f"| {name} | {backend} | " + " | ".join(delegated(form, backend, x) for form in forms) + " |", flush=True)


def median_ms(variants, x, rounds):
    times = {name: [] for name in variants}
    with torch.no_grad():
        for run in variants.values():
            for _ in range(3):
                run(x)
        for _ in range(rounds):
            for name, run in variants.items():
                start = time.perf_counter()
                run(x)
                times[name].append((time.perf_counter() - start) * 1e3)
    return {name: statistics.median(values) for name, values in times.items()}


if args.time or both:
    print(f"\nMedian ms per call, {args.rounds} interleaved rounds, batch 1, 224x224:")
    print("| model | eager | optimize_for_inference(freeze(trace)) | trace lowered to [\"onednn\"] | ratio |")
    print("|---|---|---|---|---|")
    for name in (args.models.split(",") if args.models else TIMED):
        model, x = build(name)
        optimized = torch.jit.optimize_for_inference(torch.jit.freeze(trace(model, x)))
        lowered = torch_delegate.lower(trace(model, x), ["onednn"], partial=True, example_inputs=(x,))
        with torch.no_grad():
            want = model(x)
            error = ((lowered(x) - want).abs().max() / want.abs().max()).item()
        ms = median_ms({"eager": model, "optimized": optimized, "lowered": lowered}, x, args.rounds)
        print(f"| {name} | {ms['eager']:.1f} | {ms['optimized']:.1f} | {ms['lowered']:.1f} | "
              f"{ms['optimized'] / ms['lowered']:.2f}x | (max relative error vs eager {error:.1e})", flush=True)
