#!/usr/bin/python3
"""Profiles a model lowered to the demo backend with torch.profiler, exports the chrome trace
and renders it as a timeline picture for docs/debugging.md.
Usage: render_profile.py <libbackend_with_compiler_demo.so> <trace.json> <picture.png>
Needs Debian's python3-torch and python3-matplotlib."""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

library, trace_path, picture_path = sys.argv[1:4]
torch.ops.load_library(library)


class Encoder(torch.nn.Module):
    def forward(self, x, h):
        y = x + h
        z = y - h
        return z + y


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder()

    def forward(self, x, h):
        return self.encoder(x, h) - h


lowered = torch._C._jit_to_backend("backend_with_compiler_demo", torch.jit.script(Model()), {"forward": {"": ""}})
x, h = torch.rand(512, 512), torch.rand(512)
lowered(x, h)  # warm up
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
    lowered(x, h)
profile.export_chrome_trace(trace_path)

trace = json.load(open(trace_path))
events = [e for e in (trace["traceEvents"] if isinstance(trace, dict) else trace) if e.get("ph") == "X"]
start = min(e["ts"] for e in events)
delegated = [e for e in events if " (" in e["name"] and e["name"].startswith("aten::")]
others = [e for e in events if e not in delegated]

fig, ax = plt.subplots(figsize=(10, 3.2))
rows = [("TorchScript / ATen", others, "#9aa5b1"), ("backend_with_compiler_demo", delegated, "#2b7bb9")]
for row, (label, row_events, color) in enumerate(rows):
    for e in row_events:
        ax.broken_barh([(e["ts"] - start, e["dur"])], (row - 0.35, 0.7), facecolors=color, edgecolors="white")
        if row == 1:
            ax.text(e["ts"] - start + e["dur"] / 2, row, e["name"].replace(" (", "\n("), ha="center", va="center",
                    fontsize=7, color="white")
ax.set_yticks(range(len(rows)), [r[0] for r in rows])
ax.set_xlabel("time since the call started (µs)")
ax.set_title("lowered(x, h) under torch.profiler (Python), from its exported chrome trace")
ax.invert_yaxis()
fig.tight_layout()
fig.savefig(picture_path, dpi=110)
print("\n".join(sorted({e["name"] for e in delegated})))
