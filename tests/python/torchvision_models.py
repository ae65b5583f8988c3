"""What the tests that run torchvision's architectures share: which models a run takes, and
random BatchNorm statistics.

Which models. `meson test` (the README's test command) runs a bounded smoke set per test, chosen
to cover what each backend does differently (residual adds, squeeze-excitation, channel shuffles,
attention); the sweep (`tools/sweep`: `meson test --setup sweep --suite sweep`, which sets
TD_SWEEP=1) runs every model; TD_MODELS=a,b (or "all") picks by hand."""
import os

from torch import nn


def selected(every, smoke):
    """The models this run takes, in `every`'s order: TD_MODELS (a comma-separated list, or
    "all"), else every one under TD_SWEEP=1, else `smoke`. An unknown name is an error."""
    every = list(every)
    chosen = os.environ.get("TD_MODELS", "")
    if chosen == "all" or (not chosen and os.environ.get("TD_SWEEP") == "1"):
        return every
    names = [name for name in chosen.split(",") if name] or list(smoke)
    unknown = [name for name in names if name not in every]
    if unknown:
        raise ValueError(f"TD_MODELS: unknown model(s) {unknown}; expected some of {every}")
    return names


def randomized(model):
    """Random BatchNorm statistics and affine parameters, so that folding them is checked (with
    the defaults some models' outputs do not depend on their input, and an equal output would
    prove nothing)."""
    for module in model.modules():
        if isinstance(module, (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
            module.weight.data.uniform_(0.5, 1.5)
            module.bias.data.uniform_(-0.5, 0.5)
    return model.eval()
