"""One backend from two builds, side by side: "did this change make it slower?" (issue 38: the
backends split by concern must run as fast as before).

Models are frozen before lowering, or with --scripted lowered as scripted (as bench/ort_models.py
and the README's recipe do; a frozen and a scripted model can plan differently). Each build
directory has its own Python package and backend libraries, and two builds of one
backend cannot be registered in one process (they share its name), so every measurement is a
fresh process: for each model, build A's process, then build B's, `pairs` times, alternating
(A B A B ...: drifts in the machine's speed hit both). A process lowers the model (frozen or
scripted, partial, with example inputs), calls it `warmup` times, then times `calls` calls and prints their
median. The table gives per model each build's median over its processes and B / A (< 1: B is
faster), with the machine's ISA and the thread count.

Each process calls torch_delegate.keep_freed_memory() first (--glibc-defaults: not), as
bench/ort_models.py does: else whether a model's TorchScript parts fault their tensors in again
each call depends on the process's history (bench/allocator.py).

A and B may also be one build run two ways: --env-a and --env-b set environment variables in
the processes of each side (a backend's switch, as TD_ONEDNN_SILU=0).

Usage: bench/backend_ab.py <build A> <build B> <backend> [--models a,b] [--pairs N] [--calls N]
       [--threads N] [--batch N] [--scripted] [--env-a KEY=VALUE ...] [--env-b KEY=VALUE ...]
  e.g. /usr/bin/python3 bench/backend_ab.py ../baseline/build build onednn --pairs 5
       /usr/bin/python3 bench/backend_ab.py build build onednn --env-a TD_ONEDNN_SILU=0
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, statistics, sys, time
import torch, torchvision
import torch_delegate
backend, name, threads, batch, warmup, calls = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:7])
if sys.argv[8] == "keep" and hasattr(torch_delegate, "keep_freed_memory"):  # a build before it: glibc as it is
    torch_delegate.keep_freed_memory()
torch.set_num_threads(threads)
torch.manual_seed(0)
model = getattr(torchvision.models, name)(weights=None).eval()
x = torch.rand(batch, 3, 224, 224)
scripted = torch.jit.script(model)
given = scripted if sys.argv[7] == "scripted" else torch.jit.freeze(scripted)
lowered = torch_delegate.lower(given, [backend], partial=True, example_inputs=(x,), load_backends=True)
times = []
with torch.no_grad():
    for i in range(warmup + calls):
        begin = time.perf_counter()
        lowered(x)
        if i >= warmup:
            times.append((time.perf_counter() - begin) * 1e3)
print(json.dumps({"ms": statistics.median(times)}))
"""


def isa():
    with open("/proc/cpuinfo") as info:
        flags = next((line.split(":", 1)[1].split() for line in info if line.startswith("flags")), [])
    cpu = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "SSE4.1 or older"
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA")
    return cpu + (f" (oneDNN capped: ONEDNN_MAX_CPU_ISA={cap})" if cap else "")


def measure(build, args, name, settings=()):
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.abspath(build), "python"))
    for setting in settings:
        key, _, value = setting.partition("=")
        env[key] = value
    done = subprocess.run([sys.executable, "-c", CHILD, args.backend, name, str(args.threads), str(args.batch),
                           str(args.warmup), str(args.calls), "scripted" if args.scripted else "frozen",
                           "glibc" if args.glibc_defaults else "keep"], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{build}: {name} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])["ms"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("backend")
    parser.add_argument("--models", default="resnet18,mobilenet_v2,mobilenet_v3_small,efficientnet_b0")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--scripted", action="store_true", help="lower the scripted model, not the frozen one (the ORT bench's way)")
    parser.add_argument("--glibc-defaults", action="store_true",
                        help="leave glibc's malloc as it is (by default each process calls keep_freed_memory() first)")
    parser.add_argument("--env-a", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--env-b", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    for setting in args.env_a + args.env_b:
        if "=" not in setting:
            parser.error(f"--env-a/--env-b take KEY=VALUE, got {setting!r}")
    side = lambda build, settings: build + (" with " + " ".join(settings) if settings else "")  # noqa: E731
    print(f"{args.backend}: A = {side(args.a, args.env_a)}, B = {side(args.b, args.env_b)}; {isa()}, {args.threads} thread(s), batch {args.batch}, "
          f"{'scripted' if args.scripted else 'frozen'}, "
          f"{'glibc as it is' if args.glibc_defaults else 'keep_freed_memory()'}, {args.pairs} process pairs x {args.calls} calls (median)")
    print(f"| model | A ms | B ms | B / A |\n|---|---|---|---|")
    ratios = []
    for name in args.models.split(","):
        a, b = [], []
        for _ in range(args.pairs):
            a.append(measure(args.a, args, name, args.env_a))
            b.append(measure(args.b, args, name, args.env_b))
        ratio = statistics.median(b) / statistics.median(a)
        ratios.append(ratio)
        print(f"| {name} | {statistics.median(a):.2f} | {statistics.median(b):.2f} | {ratio:.3f} |", flush=True)
    geomean = statistics.geometric_mean(ratios)
    print(f"| geometric mean | | | {geomean:.3f} |")


if __name__ == "__main__":
    main()
