"""PyTorch's own layers (torch.nn's Transformer, LSTM, GRU, Conv1d, Conv2d, ConvTranspose2d, ...)
lowered by torch-delegate, against ONNX Runtime, scripted TorchScript and torch.jit.optimize_for_inference.

Each model is a torch.nn composition with random weights (seeded), in eval mode, wrapped so that
its forward takes one float tensor (bench/ort_runner.js feeds one input); masks are built in
forward from the input's sizes, so that the ONNX export and the lowering see the same graph:
  encoder         BERT-base-sized nn.TransformerEncoder (768 wide, 12 heads, 3072 feed-forward, GELU,
                  4 layers, enable_nested_tensor=False), [1, T, 768] for T = 32, 128, 384
  encoder_padded  the same with a key padding mask (the last quarter of each sequence), [2, 128, 768]
  gpt_style       decoder-only: the encoder with norm_first=True and a causal mask, [1, 128, 768]
  decoder         nn.TransformerDecoder (512 wide, 8 heads, 4 layers), its input as memory too, causal, [1, 128, 512]
  lstm, gru       2-layer nn.LSTM (bidirectional) and nn.GRU, 80 features to 256, [1, 300, 80], the output sequence
  text_cnn        Conv1d of widths 3, 4, 5 over an embedded sentence, max over time, a Linear, [1, 200, 128]
  unet            a U-Net, 4 levels (32-64-128-256 channels, 512 at the bottom), 2 classes, [1, 3, 256, 256]

Per model (and shape: each its own lowering and export): ours, lowered as the README's recipe
lowers it (lower(scripted, ["onednn", "xnnpack", "pointwise_fusion"], partial=True,
example_inputs=(x,), measure=True, choose_order=True), as bench/any_shape.py); torch.jit.script's
module; torch.jit.optimize_for_inference(torch.jit.freeze(scripted)) ("ofi"; None where it
fails); and the ONNX export (opset 14) run by ONNX Runtime in a process of its own (where the
export fails, the reason is recorded and the rest is timed). Each output is compared with
eager's; the steady times are interleaved as bench/any_shape.py interleaves them (round after
round, the order drawn anew, each block's first call dropped; medians). Same threads for every
engine (2 unless TD_BENCH_THREADS).

Usage: PYTHONPATH=<build>/python bench/pytorch_layers.py <build> [<doc.md>] [--quick] [--models a,b,...] [--json out.json]
(the table goes between the doc's `<!-- pytorch layers table -->` and `<!-- end pytorch layers table -->`
lines; --quick: fewer rounds, the encoder at T = 128 only)
ORT is looked for in $TD_ORT_NODE_MODULES, else <build>/ort/node_modules (npm install
--ignore-scripts onnxruntime-node there).
"""
import json
import math
import os
import statistics
import sys
import time

OPENBLAS = "/usr/lib/x86_64-linux-gnu/openblas-openmp"
options = sys.argv[1:]
VALUED = ("--models", "--json")
args = [a for i, a in enumerate(options) if not a.startswith("--") and (i == 0 or options[i - 1] not in VALUED)]


def option(name, default=None):
    return options[options.index(name) + 1] if name in options else default


build = args[0]
doc_path = args[1] if len(args) > 1 else None
quick = "--quick" in options
threads = int(os.environ.get("TD_BENCH_THREADS", "2"))
if os.path.isdir(OPENBLAS) and os.environ.get("TD_BENCH_BLAS") is None:  # LibTorch's Linears on OpenBLAS, as ort_models.py
    env = dict(os.environ, TD_BENCH_BLAS="openblas",
               LD_LIBRARY_PATH=OPENBLAS + (":" + os.environ["LD_LIBRARY_PATH"] if os.environ.get("LD_LIBRARY_PATH") else ""))
    os.execve(sys.executable, [sys.executable] + sys.argv, env)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
from ort_process import OrtProcess, interleaved_medians, local_timer  # noqa: E402

torch.set_num_threads(threads)
import torch_delegate  # noqa: E402

RECIPE = ["onednn", "xnnpack", "pointwise_fusion"]


# The models. Each forward takes one float tensor; TorchScript compiles these classes from this
# file's source, so they stay at module level.

def bert_sized_encoder(norm_first=False):
    layer = nn.TransformerEncoderLayer(768, 12, 3072, batch_first=True, activation="gelu", norm_first=norm_first)
    return nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = bert_sized_encoder()

    def forward(self, x):
        return self.encoder(x)


class PaddedEncoder(nn.Module):
    """The encoder over a batch whose sequences' last quarter is padding."""

    def __init__(self):
        super().__init__()
        self.encoder = bert_sized_encoder()

    def forward(self, x):
        mask = torch.zeros(x.shape[0], x.shape[1], dtype=torch.bool)
        mask[:, -x.shape[1] // 4:] = True
        return self.encoder(x, src_key_padding_mask=mask)


def causal_mask(t: int):
    return torch.triu(torch.full((t, t), float("-inf")), diagonal=1)


class GptStyle(nn.Module):
    """Decoder-only, as GPT: pre-norm self-attention layers, each position seeing the ones before it."""

    def __init__(self):
        super().__init__()
        self.encoder = bert_sized_encoder(norm_first=True)

    def forward(self, x):
        return self.encoder(x, mask=causal_mask(x.size(1)))


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(512, 8, 2048, batch_first=True), 4)

    def forward(self, x):
        return self.decoder(x, x, tgt_mask=causal_mask(x.size(1)))


class Lstm(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(80, 256, 2, bidirectional=True, batch_first=True)

    def forward(self, x):
        return self.lstm(x)[0]


class Gru(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(80, 256, 2, batch_first=True)

    def forward(self, x):
        return self.gru(x)[0]


class TextCnn(nn.Module):
    """Kim's sentence classifier after its embedding (an embedding takes indices, not floats)."""

    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList([nn.Conv1d(128, 100, k) for k in (3, 4, 5)])
        self.classifier = nn.Linear(300, 2)

    def forward(self, x):
        x = x.transpose(1, 2)
        features = []
        for conv in self.convs:
            features.append(F.relu(conv(x)).amax(dim=2))
        return self.classifier(torch.cat(features, dim=1))


def double_conv(inputs, outputs):
    return nn.Sequential(nn.Conv2d(inputs, outputs, 3, padding=1), nn.BatchNorm2d(outputs), nn.ReLU(inplace=True),
                         nn.Conv2d(outputs, outputs, 3, padding=1), nn.BatchNorm2d(outputs), nn.ReLU(inplace=True))


class Up(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.up = nn.ConvTranspose2d(channels, channels // 2, 2, stride=2)
        self.convs = double_conv(channels, channels // 2)

    def forward(self, x, skip):
        return self.convs(torch.cat([skip, self.up(x)], dim=1))


class UNet(nn.Module):
    def __init__(self, widths=(32, 64, 128, 256), classes=2):
        super().__init__()
        self.downs = nn.ModuleList([double_conv(a, b) for a, b in zip((3,) + widths[:-1], widths)])
        self.bottom = double_conv(widths[-1], 2 * widths[-1])
        self.ups = nn.ModuleList([Up(2 * w) for w in reversed(widths)])
        self.head = nn.Conv2d(widths[0], classes, 1)

    def forward(self, x):
        skips = []
        for down in self.downs:
            x = down(x)
            skips.append(x)
            x = F.max_pool2d(x, 2)
        x = self.bottom(x)
        for up in self.ups:
            x = up(x, skips.pop())
        return self.head(x)


# Per model: its class and its input shapes (--quick: the first only).
MODELS = {
    "encoder": (Encoder, [(1, 128, 768), (1, 32, 768), (1, 384, 768)]),
    "encoder_padded": (PaddedEncoder, [(2, 128, 768)]),
    "gpt_style": (GptStyle, [(1, 128, 768)]),
    "decoder": (Decoder, [(1, 128, 512)]),
    "lstm": (Lstm, [(1, 300, 80)]),
    "gru": (Gru, [(1, 300, 80)]),
    "text_cnn": (TextCnn, [(1, 200, 128)]),
    "unet": (UNet, [(1, 3, 256, 256)]),
}
TRANSFORMERS = ("encoder", "encoder_padded", "gpt_style", "decoder")


def build_model(name):
    """The model in eval mode, seeded: every shape's row gets the same weights."""
    torch.manual_seed(0)
    model = MODELS[name][0]().eval()
    # Random BatchNorm statistics and affine parameters (as models.py): with the defaults each
    # BatchNorm is the identity, and a comparison of outputs would not see one folded wrongly.
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            with torch.no_grad():
                module.running_mean.uniform_(-0.1, 0.1)
                module.running_var.uniform_(0.5, 1.5)
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.1, 0.1)
    return model


def export_static(name, model, x, workdir):
    """The model exported at x's shape (each shape on its own, as each is lowered on its own)."""
    path = os.path.join(workdir, f"{name}.onnx")
    # Not under no_grad: the weights requiring grad keep nn.TransformerEncoderLayer off its fast
    # path, whose op (aten::_transformer_encoder_layer_fwd) ONNX opset 14 cannot express.
    torch.onnx.export(model, (x,), path, opset_version=14, input_names=["x"])
    return path


def relative_error(got, want):
    return float((got - want).abs().max() / max(float(want.abs().max()), 1e-6))


def ratio(row, engine):
    """engine's time over ours; None where the engine did not run."""
    return row[f"{engine}_s"] / row["ours_s"] if row[f"{engine}_s"] is not None else None


def ms(seconds):
    return f"{1e3 * seconds:.1f}" if seconds is not None else "-"


def times(value):
    return f"{value:.2f}x" if value is not None else "-"


def run_row(name, shape, ort):
    model = build_model(name)
    x = torch.rand(*shape)
    with torch.no_grad():
        want = model(x)
    scripted = torch.jit.script(model)
    ours = torch_delegate.lower(torch.jit.script(model), RECIPE, partial=True, example_inputs=(x,), measure=True,
                                choose_order=True, load_backends=True)
    row = {"model": name, "shape": list(shape), "ofi_failure": None, "ort_failure": ort.error}
    try:
        ofi = torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.script(model)))
    except Exception as error:  # what PyTorch's own inference path cannot do is part of the comparison
        ofi, row["ofi_failure"] = None, f"{type(error).__name__}: {str(error).splitlines()[0]}"
    engines = {"ours": ours, "scripted": scripted, "ofi": ofi}
    with torch.no_grad():
        row["errors"] = {engine: relative_error(module(x), want) for engine, module in engines.items() if module is not None}
    timers = {engine: local_timer(module, x) for engine, module in engines.items() if module is not None}
    if not ort.error:
        try:
            label = f"{name}.{'x'.join(map(str, shape))}"
            row["errors"]["ort"] = relative_error(ort.load(label, export_static(label, model, x, ort.workdir), x), want)
            timers["ort"] = ort.timer()
        except Exception as error:  # an export that fails is a result: the row says why
            row["ort_failure"] = f"{type(error).__name__}: {str(error).splitlines()[0]}"
    method = torch_delegate.report(ours).methods[0]
    row.update(regions=len(method.regions), delegated=sum(region.node_count for region in method.regions),
               kept=len(method.kept))
    measured = interleaved_medians(timers, quick)
    row.update({f"{engine}_s": measured.get(engine) for engine in ("ours", "scripted", "ofi", "ort")})
    errors = ", ".join(f"{engine} {error:.0e}" for engine, error in row["errors"].items())
    failures = "".join(f"; {engine} failed: {row[engine + '_failure']}" for engine in ("ofi", "ort") if row[engine + "_failure"])
    print(f"{name} {list(shape)}: ours {ms(row['ours_s'])}, scripted {ms(row['scripted_s'])}, ofi {ms(row['ofi_s'])}, "
          f"ORT {ms(row['ort_s'])} ms; ORT/ours {times(ratio(row, 'ort'))}, scripted/ours {times(ratio(row, 'scripted'))}, "
          f"ofi/ours {times(ratio(row, 'ofi'))}; errors {errors}; regions {row['regions']}, nodes delegated "
          f"{row['delegated']}, kept {row['kept']}{failures}", flush=True)
    return row


def geometric_mean(values):
    return math.exp(statistics.mean(map(math.log, values))) if values else None


def summary(rows):
    """The geometric means of ORT / ours over the transformer rows and over the others."""
    parts = []
    for label, chosen in (("the transformers", [r for r in rows if r["model"] in TRANSFORMERS]),
                          ("the other layers", [r for r in rows if r["model"] not in TRANSFORMERS])):
        ratios = [ratio(r, "ort") for r in chosen if r["ort_s"] is not None]
        if ratios:
            parts.append(f"**{geometric_mean(ratios):.2f}x** over {label} ({len(ratios)} rows)")
    return "Geometric mean of ONNX Runtime / ours: " + "; ".join(parts) + "." if parts else "No ONNX Runtime times."


def table(header, rows):
    lines = [header, "", "| model | shape | ours (ms) | scripted (ms) | ofi (ms) | ORT (ms) | ORT / ours | scripted / ours | "
                         "ofi / ours | regions / delegated / kept | error (ours, scripted, ofi, ORT) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        errors = ", ".join(f"{row['errors'][e]:.0e}" if e in row["errors"] else "-" for e in ("ours", "scripted", "ofi", "ort"))
        lines.append(f"| {row['model']} | {'x'.join(map(str, row['shape']))} | {ms(row['ours_s'])} | {ms(row['scripted_s'])} | "
                     f"{ms(row['ofi_s'])} | {ms(row['ort_s'])} | **{times(ratio(row, 'ort'))}** | {times(ratio(row, 'scripted'))} | "
                     f"{times(ratio(row, 'ofi'))} | {row['regions']} / {row['delegated']} / {row['kept']} | {errors} |")
    lines += ["", summary(rows)]
    failures = [f"{row['model']} {'x'.join(map(str, row['shape']))}: {engine} failed: {row[engine + '_failure']}"
                for row in rows for engine in ("ofi", "ort") if row[engine + "_failure"]]
    if failures:
        lines += [""] + [f"- {failure}" for failure in failures]
    return "\n".join(lines)


def write_table(text):
    begin, end = "<!-- pytorch layers table -->", "<!-- end pytorch layers table -->"
    doc = open(doc_path).read()
    if begin not in doc or end not in doc:
        print(f"pytorch_layers: {doc_path} has no {begin} ... {end} lines; the table:\n\n{text}")
        return
    head, rest = doc.split(begin, 1)
    open(doc_path, "w").write(head + begin + "\n" + text + "\n" + end + rest.split(end, 1)[1])


def main():
    import tempfile
    names = option("--models", ",".join(MODELS)).split(",")
    unknown = [name for name in names if name not in MODELS]
    if unknown:
        sys.exit(f"pytorch_layers: no model {', '.join(unknown)}; the models: {', '.join(MODELS)}")
    ort = OrtProcess(build, tempfile.mkdtemp(prefix="pytorch_layers."), threads)
    print(f"# {models.machine_line()}; {threads} threads; torch {torch.__version__}; "
          f"ORT: {ort.error or 'onnxruntime-node'}", flush=True)
    rows = []
    for name in names:
        shapes = MODELS[name][1]
        for shape in shapes[:1] if quick else shapes:
            rows.append(run_row(name, shape, ort))
    print(f"# {summary(rows)}".replace("**", ""), flush=True)
    header = (f"{models.machine_line()}; {threads} threads; LibTorch {torch.__version__}; ONNX Runtime {ort.version or '-'} "
              f"(onnxruntime-node); {time.strftime('%Y-%m-%d')}; bench/pytorch_layers.py{' --quick' if quick else ''}")
    text = table(header, rows)
    if doc_path:
        write_table(text)
    else:
        print(text)
    if option("--json"):
        with open(option("--json"), "w") as out:
            json.dump({"machine": models.machine_line(), "threads": threads, "torch": torch.__version__, "ort": ort.version,
                       "rows": rows}, out, indent=1)
    ort.close()


if __name__ == "__main__":
    main()
