"""How many rounds a measured comparison needs on a loaded machine, by block size (issue 40): the
evidence for tuning.hpp's timed_per_block. A model lowered to onednn and to xnnpack (partial,
example inputs) is timed in rounds beside another busy process (one core spinning), each round a
block of each path (one call dropped, then 3 timed calls, every one recorded); the rounds are then
read as blocks of the fastest of the first 1, 2 or 3 calls, and for each: the rounds each path won
by more than 3 %, the two-sided sign test's p over all of them, and the first round count from 8
on where p < 0.01 (when the sign test alone would have separated the paths).

Usage: PYTHONPATH=<build>/python bench/timing_blocks.py [--models resnet50,resnet18] [--rounds 30] [--idle]
"""
import argparse
import math
import os
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402

import torch_delegate  # noqa: E402


def sign_p(wins, rounds):
    return min(1.0, 2 * sum(math.comb(rounds, k) for k in range(wins, rounds + 1)) / 2 ** rounds)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="resnet50,resnet18")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--idle", action="store_true", help="no busy process beside it")
    args = parser.parse_args()
    torch.set_num_threads(2)
    for backend in ("onednn", "xnnpack"):
        torch_delegate.load_backend(backend)
    print(f"machine: {'AVX-512' if ' avx512f' in open('/proc/cpuinfo').read() else 'AVX2 or less'}, 2 threads, "
          f"{'idle' if args.idle else 'one other process spinning on a core'}")
    for name in args.models.split(","):
        model, x = models.model_and_input(name)
        scripted = torch.jit.script(model)
        paths = [torch_delegate.lower(scripted, [b], partial=True, example_inputs=(x,)) for b in ("onednn", "xnnpack")]
        busy = None if args.idle else models.busy_process()
        time.sleep(0.5)

        def block(path):
            path(x)  # dropped
            calls = []
            for _ in range(3):
                start = time.perf_counter()
                path(x)
                calls.append((time.perf_counter() - start) * 1e3)
            return calls

        rounds = []
        with torch.no_grad():
            for path in paths:
                path(x), path(x)
            for r in range(args.rounds):
                if r % 2:
                    b = block(paths[1])
                    rounds.append((block(paths[0]), b))
                else:
                    a = block(paths[0])
                    rounds.append((a, block(paths[1])))
        if busy:
            busy.kill()
        for k in (1, 2, 3):
            pairs = [(min(a[:k]), min(b[:k])) for a, b in rounds]
            wins = [sum(1 for p, q in pairs if p * 1.03 < q), sum(1 for p, q in pairs if q * 1.03 < p)]
            separated = next((n for n in range(8, len(pairs) + 1)
                              if sign_p(max(sum(1 for p, q in pairs[:n] if p * 1.03 < q),
                                            sum(1 for p, q in pairs[:n] if q * 1.03 < p)), n) < 0.01), None)
            medians = [sorted(v)[len(v) // 2] for v in zip(*pairs)]
            print(f"{name}, fastest of {k}: onednn {medians[0]:.1f} ms, xnnpack {medians[1]:.1f} ms; rounds won "
                  f"{wins[0]} / {wins[1]} of {len(pairs)}, sign test p {sign_p(max(wins), len(pairs)):.2g}; "
                  f"separated after {separated if separated else 'no number of'} rounds", flush=True)


if __name__ == "__main__":
    main()
