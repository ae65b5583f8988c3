"""One Linear (and its GELU) lowered to a backend, two ways side by side: a kernel change's speed
at the shapes of real models, without the rest of the model around it.

Each measurement is a fresh process (a backend's switches are read once per process): it lowers
`nn.Linear(in, out)` (followed by `nn.GELU()` where the shape asks for it) to the backend, scripted,
partial, for an input of [1, rows, in], calls it 10 times, then times 15 blocks of 10 calls and
prints the median block's time a call and its largest difference from eager. Side A's and side
B's processes alternate, `pairs` times each; the table gives each side's median over its
processes, GFLOP/s, and B / A (< 1: B is faster), with the CPU's ISA and oneDNN's cap.

With a shape side:in:out:conv it times 1x1 convolutions instead: four of them (in -> out, out -> in,
twice), each with a ReLU, on a side x side map at batch 1 (a 1x1 convolution is a GEMM of the
map's pixels).

Usage: bench/linear_ab.py <build> [--backend onednn] [--pairs N] [--threads N]
       [--shapes rows:in:out[:gelu],side:in:out:conv,...] [--env-a KEY=VALUE ...] [--env-b KEY=VALUE ...]
  e.g. ONEDNN_MAX_CPU_ISA=AVX2 /usr/bin/python3 bench/linear_ab.py build-bench --env-a TD_ONEDNN_GEMM=0
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

from backend_ab import isa

CHILD = r"""
import json, statistics, sys, time
import torch, torch_delegate
torch_delegate.keep_freed_memory()
backend, threads, rows, features, outputs, activation = sys.argv[1], *map(int, sys.argv[2:6]), sys.argv[6]
torch.set_num_threads(threads)
torch.manual_seed(0)
if activation == "conv":  # 1x1 convolutions in -> out -> in -> out with ReLUs on a rows x rows map
    layers = []
    for k in range(4):
        layers += [torch.nn.Conv2d(features, outputs, 1) if k % 2 == 0 else torch.nn.Conv2d(outputs, features, 1), torch.nn.ReLU()]
    x = torch.randn(1, features, rows, rows)
else:
    layers = [torch.nn.Linear(features, outputs)] + ([torch.nn.GELU()] if activation == "gelu" else [])
    x = torch.randn(1, rows, features)
model = torch.jit.script(torch.nn.Sequential(*layers).eval())
lowered = torch_delegate.lower(model, [backend], partial=True, example_inputs=(x,), load_backends=True)
with torch.no_grad():
    error = (lowered(x) - model(x)).abs().max().item()
    for _ in range(10):
        lowered(x)
    blocks = []
    for _ in range(15):
        begin = time.perf_counter()
        for _ in range(10):
            lowered(x)
        blocks.append((time.perf_counter() - begin) / 10 * 1e3)
print(json.dumps({"ms": statistics.median(blocks), "error": error}))
"""

# The Linears of ViT-B/16 (197 tokens), the BERT-base encoder (128), Swin-T's first and last
# stages, and a CNN's classifier at batch 1.
SHAPES = "197:768:3072:gelu,197:3072:768,197:768:2304,197:768:768,128:768:3072:gelu,3136:96:384:gelu,3136:384:96,49:768:3072:gelu,1:512:1000"


def measure(args, shape, settings):
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.abspath(args.build), "python"))
    for setting in settings:
        key, _, value = setting.partition("=")
        env[key] = value
    done = subprocess.run([sys.executable, "-c", CHILD, args.backend, str(args.threads), *map(str, shape[:3]), shape[3]], env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{shape} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("build")
    parser.add_argument("--backend", default="onednn")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--shapes", default=SHAPES)
    parser.add_argument("--env-a", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--env-b", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    shapes = []
    for text in args.shapes.split(","):
        parts = text.split(":")
        if len(parts) not in (3, 4) or not all(p.isdigit() for p in parts[:3]) or (len(parts) == 4 and parts[3] not in ("gelu", "conv")):
            parser.error(f"--shapes takes rows:in:out, rows:in:out:gelu or side:in:out:conv, got {text!r}")
        shapes.append((*map(int, parts[:3]), parts[3] if len(parts) == 4 else "none"))
    for setting in args.env_a + args.env_b:
        if "=" not in setting:
            parser.error(f"--env-a/--env-b take KEY=VALUE, got {setting!r}")
    print(f"{args.backend}: A = {' '.join(args.env_a) or 'as it is'}, B = {' '.join(args.env_b) or 'as it is'}; {isa()}, "
          f"{args.threads} thread(s), {args.pairs} process pairs, each the median of 15 blocks of 10 calls")
    print("| rows x in -> out | A ms | A GFLOP/s | B ms | B GFLOP/s | B / A | largest error vs eager |\n|---|---|---|---|---|---|---|")
    for shape in shapes:
        a, b, errors = [], [], []
        for _ in range(args.pairs):
            for side, settings in ((a, args.env_a), (b, args.env_b)):
                result = measure(args, shape, settings)
                side.append(result["ms"])
                errors.append(result["error"])
        conv = shape[3] == "conv"
        flop = 2.0 * shape[0] * shape[1] * shape[2] * (4 * shape[0] if conv else 1)
        ma, mb = statistics.median(a), statistics.median(b)
        label = (f"1x1 conv {shape[1]} <-> {shape[2]} at {shape[0]}x{shape[0]}, 4 of them" if conv else
                 f"{shape[0]} x {shape[1]} -> {shape[2]}" + (" (GELU)" if shape[3] == "gelu" else ""))
        print(f"| {label} | {ma:.3f} | {flop / ma / 1e6:.0f} | {mb:.3f} | {flop / mb / 1e6:.0f} | {mb / ma:.3f} | {max(errors):.1e} |", flush=True)


if __name__ == "__main__":
    main()
