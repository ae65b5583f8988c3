"""ONNX Runtime in a process of its own (bench/ort_runner.js), and the interleaved timing the
benches that compare against it share (bench/any_shape.py, bench/pytorch_layers.py).

ORT is looked for in $TD_ORT_NODE_MODULES, else <build>/ort/node_modules (npm install
--ignore-scripts onnxruntime-node there).
"""
import json
import os
import statistics
import subprocess
import time

import torch

import models


class OrtProcess:
    """The ORT runner process; `error` says why there is none. One model loaded at a time."""

    def __init__(self, build, workdir, threads):
        self.process, self.error, self.version, self.workdir, self.threads = None, None, None, workdir, threads
        modules = os.environ.get("TD_ORT_NODE_MODULES", os.path.join(build, "ort", "node_modules"))
        if not os.path.isdir(os.path.join(modules, "onnxruntime-node")):
            self.error = f"onnxruntime-node is not installed in {modules} (npm install --ignore-scripts onnxruntime-node there)"
            return
        try:
            self.process = subprocess.Popen(["node", os.path.join(os.path.dirname(os.path.abspath(__file__)), "ort_runner.js")],
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                            env=dict(os.environ, NODE_PATH=modules))
        except FileNotFoundError:
            self.error = "node is not installed (Debian: nodejs)"

    def ask(self, request):
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        reply = json.loads(self.process.stdout.readline() or '{"error": "the ORT runner exited"}')
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply

    def output(self, reply):
        import numpy
        return torch.from_numpy(numpy.fromfile(reply["output"], dtype=numpy.float32)).reshape(reply["dims"])

    def load(self, name, path, x):
        """Loads the ONNX model at `path` (replacing the last) and runs it on x; its output."""
        given = os.path.join(self.workdir, f"{name}.input")
        x.numpy().tofile(given)
        reply = self.ask({"load": path, "input": given, "shape": list(x.shape), "threads": self.threads})
        self.version = reply["version"]
        return self.output(reply)

    def feed(self, name, x):
        """Another input for the loaded model (one exported with dynamic axes); its output."""
        path = os.path.join(self.workdir, f"{name}.{'x'.join(map(str, x.shape))}.input")
        x.numpy().tofile(path)
        return self.output(self.ask({"feed": path, "shape": list(x.shape)}))

    def timer(self):
        return lambda count: [ms / 1e3 for ms in self.ask({"time": count})["ms"]]

    def close(self):
        if self.process:
            self.process.stdin.close()  # the runner exits at the end of its input
            self.process.wait(timeout=30)


def local_timer(function, x):
    """Times `count` calls of function(x) in this process (s each)."""
    def calls(count):
        times = []
        for _ in range(count):
            start = time.perf_counter()
            function(x)
            times.append(time.perf_counter() - start)
        return times
    return calls


def interleaved_medians(timers, quick):
    """Medians (s) of steady calls, interleaved (as bench/ort_models.py's measure): round after
    round, the engines in an order drawn anew, each block's first call dropped."""
    with torch.no_grad():
        slowest = max(min(timer(2)) for timer in timers.values())
        rounds = 3 if quick else (10 if slowest < 0.1 else 6 if slowest < 0.5 else 4)
        calls = 3 if slowest < 0.5 else 2
        steady = {name: [] for name in timers}
        for round_ in range(rounds):
            for name in models.round_order(list(timers), round_):
                time.sleep(models.SETTLE)
                steady[name].extend(timers[name](calls)[1:])
    return {name: statistics.median(values) for name, values in steady.items()}
