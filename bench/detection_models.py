"""torchvision's detection, segmentation and video models lowered to ["onednn"] (issue 39: models
the bench has not seen): a backbone behind IntermediateLayerGetter, a feature pyramid, heads that
run once per pyramid level, RoI pooling that sets its scales on the first call, and the per-call
TorchScript of proposals, NMS and post-processing around them; video classifiers, whose 3-d
convolutions, poolings and batch norms read [N, C, T, H, W] clips; and torchaudio's speech models,
whose 1-d convolutions read [N, C, L] (a second of 16 kHz audio; skipped where torchaudio is not
installed).

Per model: the regions and nodes delegated; how far the lowered module's outputs and the scripted
model's are from the same model computed in float64 (eager), as the largest difference relative to
the largest magnitude (segmentation: the masks' logits; video, audio: the logits or the separated sources; detection: the backbone's feature maps,
since with random weights the scores tie and a 1e-7 difference reorders the detections);
and the time of a call, scripted and lowered side by side in one process, interleaved (each round
a block of calls of each, the first dropped, the order drawn anew each round; medians). Video
and audio models also run as torch.jit.optimize_for_inference makes them (LibTorch's fastest path; its
Conv3d on the same oneDNN, one ATen op at a time), in the same rounds.

Batch 1, random weights (weights=None, weights_backbone=None), the batch norms' statistics from one
batch of random images (calibrate), 2 threads unless TD_BENCH_THREADS.
Usage: PYTHONPATH=<build>/python /usr/bin/python3 bench/detection_models.py [--rounds N] [--models a,b] [--json f]
"""
import argparse
import copy
import json
import os
import statistics
import sys
import time
import warnings

import torch
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import SETTLE, blas_in_use, machine_line, round_order  # noqa: E402

import torch_delegate  # noqa: E402

warnings.filterwarnings("ignore")

# name: (constructor, input side, keyword arguments). Detection models take a list of 3xHxW
# images (their transform resizes them: RetinaNet and FCOS to 800 on the shorter side);
# segmentation models a 1x3xHxW batch.
DETECTION = {
    "fasterrcnn_mobilenet_v3_large_320_fpn": (torchvision.models.detection.fasterrcnn_mobilenet_v3_large_320_fpn, 320,
                                              {"box_score_thresh": 0.0}),
    "ssdlite320_mobilenet_v3_large": (torchvision.models.detection.ssdlite320_mobilenet_v3_large, 320, {}),
    "retinanet_resnet50_fpn": (torchvision.models.detection.retinanet_resnet50_fpn, 320, {}),
}
SEGMENTATION = {
    "lraspp_mobilenet_v3_large": (torchvision.models.segmentation.lraspp_mobilenet_v3_large, 320, {}),
    "deeplabv3_mobilenet_v3_large": (torchvision.models.segmentation.deeplabv3_mobilenet_v3_large, 320, {}),
    "fcn_resnet50": (torchvision.models.segmentation.fcn_resnet50, 320, {}),
}
# Video classifiers take a 1x3xTxHxW clip: 16 frames of 112x112 (S3D: 224x224, its last pooling's
# window is 7x7).
VIDEO = {
    "r3d_18": (torchvision.models.video.r3d_18, 112, {}),
    "mc3_18": (torchvision.models.video.mc3_18, 112, {}),
    "r2plus1d_18": (torchvision.models.video.r2plus1d_18, 112, {}),
    "s3d": (torchvision.models.video.s3d, 224, {}),
}
FRAMES = 16
# Speech models (torchaudio): (constructor name, keyword arguments, whether forward takes lengths).
AUDIO = {
    "wav2letter": ("Wav2Letter", {"num_classes": 40, "input_type": "waveform", "num_features": 1}, False),
    "wav2vec2_base": ("wav2vec2_base", {}, True),
    "conv_tasnet": ("ConvTasNet", {}, False),
}


def calibrate(model, side, frames=None):
    """Each batch norm's statistics set from one batch of random images (two: a pooled 1x1 map
    needs more than one value per channel), so that the activations keep their scale: with the
    initial statistics (mean 0, variance 1) MobileNetV3's feature maps end around 1e-8, the
    heads see only their biases, and outputs agree whatever the backbone computes."""
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # a cumulative average: one batch sets them
    part = model.backbone if hasattr(model, "transform") else model  # detection: its backbone alone (no targets)
    part.train()
    with torch.no_grad():
        part(torch.rand(2, 3, side, side) if frames is None else torch.rand(2, 3, frames, side, side))
    model.eval()


def build(name):
    if name in AUDIO:
        import torchaudio
        constructor, kwargs, takes_lengths = AUDIO[name]
        torch.manual_seed(0)
        model = getattr(torchaudio.models, constructor)(**kwargs).eval()
        wave = torch.rand(1, 16000) * 2 - 1
        example = (wave, None) if takes_lengths else (wave.unsqueeze(1),)

        def call(module):
            out = module(*example)
            return out[0] if isinstance(out, tuple) else out
        call.example = example
        return model, example, call
    constructor, side, kwargs = {**DETECTION, **SEGMENTATION, **VIDEO}[name]
    torch.manual_seed(0)
    if name in DETECTION:
        model = constructor(weights=None, weights_backbone=None, **kwargs).eval()
        calibrate(model, side)
        example = ([torch.rand(3, side, side)], None)
        call = lambda module: module([example[0][0]])[1][0]  # noqa: E731  (losses, detections): the detections
    else:
        video = name in VIDEO
        model = (constructor(weights=None, **kwargs) if video else constructor(weights=None, weights_backbone=None, **kwargs)).eval()
        calibrate(model, side, FRAMES if video else None)
        example = (torch.rand(1, 3, FRAMES, side, side) if video else torch.rand(1, 3, side, side),)

        def call(module):
            return module(example[0])
        call.example = example
    return model, example, call


def in_float64(module):
    """A copy of an eager module computing in float64 (its parameters and buffers)."""
    module = copy.deepcopy(module).double()
    for part in module.modules():
        for name, buffer in list(part._buffers.items()):
            if buffer is not None and buffer.is_floating_point():
                part._buffers[name] = buffer.double()
    return module


def compare(name, model, scripted, lowered, call):
    """How far the lowered module and the scripted one are from the same model in float64: the
    largest difference relative to the largest magnitude, each, and what it is of. Detection: the
    backbone's feature maps, its scripted and lowered forms (with random weights the scores tie,
    and a 1e-7 difference reorders the detections: their boxes are not comparable one to one)."""
    def relative(exact, a):
        if isinstance(exact, torch.Tensor):
            exact, a = {"out": exact}, {"out": a}
        return max(((exact[k] - a[k].double()).abs().max() / exact[k].abs().max().clamp_min(1e-300)).item() for k in exact)
    with torch.no_grad():
        if name in AUDIO:
            out = in_float64(model)(*(x.double() if x is not None else None for x in call.example))
            exact = out[0] if isinstance(out, tuple) else out
            return relative(exact, call(lowered)), relative(exact, call(scripted)), "logits" if name != "conv_tasnet" else "sources"
        if name in SEGMENTATION or name in VIDEO:
            exact = in_float64(model)(call.example[0].double())
            return relative(exact, call(lowered)), relative(exact, call(scripted)), "logits" if name in VIDEO else "masks' logits"
        torch.manual_seed(1)
        features = torch.jit.script(model.backbone)
        images = torch.rand(1, 3, 320, 320)
        lowered_features = torch_delegate.lower(features, ["onednn"], partial=True, example_inputs=(images,))
        exact = in_float64(model.backbone)(images.double())
        return relative(exact, lowered_features(images)), relative(exact, features(images)), "backbone's feature maps"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--models", default="")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    threads = int(os.environ.get("TD_BENCH_THREADS", "2"))
    torch.set_num_threads(threads)
    torch_delegate.load_backend("onednn")
    names = args.models.split(",") if args.models else list(DETECTION) + list(SEGMENTATION) + list(VIDEO) + list(AUDIO)
    print(f"Machine: {machine_line()}; {threads} threads; LibTorch's BLAS: {blas_in_use()}; torch {torch.__version__}")
    rows = []
    for name in names:
        try:
            model, example, call = build(name)
        except (ImportError, OSError) as error:  # torchaudio not installed (or not loadable): said, and the next model
            print(f"{name}: not measured: {error}", flush=True)
            continue
        scripted = torch.jit.script(model)
        start = time.perf_counter()
        try:
            lowered = torch_delegate.lower(scripted, ["onednn"], partial=True, example_inputs=example,
                                           on_other_shapes="torchscript")
        except Exception as error:  # a build that cannot lower it: said, and the next model
            message = str(error).splitlines()[-1]
            print(f"{name}: lowering failed: {message}", flush=True)
            rows.append({"model": name, "failed": message})
            continue
        lowering_s = time.perf_counter() - start
        summary = str(torch_delegate.report(lowered)).splitlines()[1].strip()  # "forward: N regions, ..."
        error, scripted_error, of = compare(name, model, scripted, lowered, call)
        variants = {"scripted": scripted, "lowered": lowered}
        if name in VIDEO or name in AUDIO:
            variants["optimize_for_inference"] = torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.script(model)))
        times = {key: [] for key in variants}
        with torch.no_grad():
            for module in variants.values():  # warm-up: the profiling executor's runs, the plans
                for _ in range(3):
                    call(module)
            first = time.perf_counter()
            call(scripted)
            per_call = time.perf_counter() - first
            calls = max(2, min(6, int(0.5 / max(per_call, 1e-3))))  # blocks of about half a second
            for round_ in range(args.rounds):
                for key in round_order(variants, round_):
                    time.sleep(SETTLE)
                    call(variants[key])  # dropped: pays for what the other left behind
                    block = []
                    for _ in range(calls):
                        begin = time.perf_counter()
                        call(variants[key])
                        block.append(time.perf_counter() - begin)
                    times[key].append(min(block))
        ms = {key: 1e3 * statistics.median(values) for key, values in times.items()}
        row = {"model": name, "regions": summary, "lowering_s": lowering_s, "error": error,
               "scripted_error": scripted_error, "of": of, **ms,
               "speedup": ms["scripted"] / ms["lowered"]}
        oif = ""
        if "optimize_for_inference" in ms:
            row["vs_optimize_for_inference"] = ms["optimize_for_inference"] / ms["lowered"]
            oif = f"optimize_for_inference {ms['optimize_for_inference']:.1f} ms ({row['vs_optimize_for_inference']:.2f}x), "
        rows.append(row)
        print(f"{name}: scripted {ms['scripted']:.1f} ms, {oif}lowered {ms['lowered']:.1f} ms, "
              f"{row['speedup']:.2f}x; {summary}; lowered in {lowering_s:.1f} s; "
              f"from float64: lowered {error:.1e}, scripted {scripted_error:.1e} ({of})", flush=True)
    print()
    print("| model | scripted, ms | lowered to onednn, ms | lowered vs scripted | lowered vs optimize_for_inference | regions | "
          "from float64, lowered / scripted |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        if "failed" in row:
            print(f"| {row['model']} | | | lowering failed: {row['failed']} | | | |")
            continue
        oif = (f"{row['vs_optimize_for_inference']:.2f}x ({row['optimize_for_inference']:.1f} ms)"
               if "vs_optimize_for_inference" in row else "—")
        print(f"| {row['model']} | {row['scripted']:.1f} | {row['lowered']:.1f} | {row['speedup']:.2f}x | {oif} | "
              f"{row['regions'].removeprefix('forward: ')} | {row['error']:.0e} / {row['scripted_error']:.0e} ({row['of']}) |")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"machine": machine_line(), "threads": threads, "rows": rows}, out, indent=1)


if __name__ == "__main__":
    main()
