"""torch_delegate from Python: lower TorchScript modules (or eager ones, scripted here) to
torch-delegate backends, partially or whole, read the delegation report, and load lowered modules with a check that the file is what was
saved (every record's CRC32) and that their backends are registered.

A backend is a C++ library built with torch-delegate; load it first, as any TorchScript extension:

    import torch, torch_delegate
    torch.ops.load_library("libpointwise_fusion.so")
    lowered = torch_delegate.lower(MyModel(), "pointwise_fusion", partial=True)  # or a scripted/traced module
    print(torch_delegate.report(lowered))
    lowered.save("model.pt")

See docs/python.md.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, List, Mapping, Optional, Sequence, Union

import torch

from . import _C
from ._backends import ENTRY_POINT_GROUP, InstalledBackend, available_backends, installed_backends, load_backend
from ._backends import require_registered as _require_registered
from ._options import Input, LowerOptions, _backend_names, _input_specs, _options, _PARTIAL_KNOBS, _partition_options, _script_module, _specs
from ._report import Backend, BackendReason, DecidedCondition, KeptNode, MethodReport, OptionInfo, Region, Report, TensorSpec, _report_of

__all__ = [
    "Backend",
    "BackendReason",
    "ENTRY_POINT_GROUP",
    "Error",
    "InstalledBackend",
    "DecidedCondition",
    "KeptNode",
    "Input",
    "LowerOptions",
    "MethodReport",
    "OptionInfo",
    "ProgressUpdate",
    "Region",
    "Report",
    "TensorSpec",
    "available_backends",
    "backends",
    "backends_needed",
    "check_archive",
    "installed_backends",
    "keep_freed_memory",
    "load",
    "load_backend",
    "lower",
    "plan",
    "report",
    "runtime_switches",
    "RuntimeSwitch",
    "warm_up",
]

__version__: str = _C.version  #: the version of torch-delegate this package and its extension are

#: The error torch-delegate raises (a RuntimeError), with the text of the C++ error: what was
#: wrong, where (backend, method, the model's source line), what was expected and what given.
Error = _C.Error

#: What a measured lowering reports as it goes (lower(..., measure=True, progress=callable)): stage
#: ("timing", "checking", "choosing", "cached", "done"), detail, step and steps (its lowerings:
#: choose_order makes several), elapsed_s.
ProgressUpdate = _C.ProgressUpdate


def backends() -> List[Backend]:
    """The torch-delegate backends registered in this process (their libraries loaded with
    torch.ops.load_library, or linked in), by name."""
    found = []
    for described in _C.backends():
        options = [OptionInfo(key, type_, required, default) for key, type_, required, default in described["options"]]
        found.append(Backend(described["name"], described["type"], described["available"], described["partial"],
                             described["options_form"], options, list(described["signatures"])))
    return found


@dataclasses.dataclass(frozen=True)
class RuntimeSwitch:
    """An environment variable torch-delegate or a loaded backend reads (docs/runtime-switches.md).

    owner: "torch-delegate" or the backend that declares it; default: its meaning when unset;
    effect: what setting it changes; changes_kernels: whether it changes what runs (the timing
    cache keys on those); value: its value in this process's environment, None when unset."""
    owner: str
    name: str
    default: str
    effect: str
    changes_kernels: bool
    value: Optional[str]


def runtime_switches() -> List[RuntimeSwitch]:
    """The runtime switches declared in this process: torch-delegate's own, then each loaded
    backend's (load a backend's library to see its switches)."""
    return [RuntimeSwitch(*row) for row in _C.runtime_switches()]


def lower(module: Union[torch.jit.ScriptModule, torch.nn.Module], backend: Union[str, Sequence[str]],
          spec: Optional[Mapping[str, Any]] = None, *, options: Optional[LowerOptions] = None,
          **knobs: Any) -> torch.jit.ScriptModule:
    """Lowers a module to a registered backend; the original is not modified.

    module: a scripted or traced module (torch.jit.ScriptModule), or an eager torch.nn.Module,
        which is scripted here with torch.jit.script (if it cannot be, a TypeError says so: script
        or trace it yourself).
    backend: a backend's name, or (partial=True) a priority list of names, ["xnnpack",
        "pointwise_fusion"]: each node goes to the first backend that takes it; one delegate
        child per backend; the report says which backend runs each region.
    spec: compile options, {backend: {method: options}}, e.g. {"xnnpack": {"forward":
        {"num_threads": 2}}}; with one backend, {method: options} is short for it. Options are
        values of any mix of types; a method without options gets the backend's defaults.
    options, knobs: a LowerOptions, and/or its knobs as keywords (partial=True, example_inputs=(x,),
        ...): see LowerOptions. A keyword that is no knob is a TypeError listing the knobs.

    Returns a torch.jit.ScriptModule that saves and loads like any other. Raises TypeError or
    ValueError for a bad argument, torch_delegate.Error for what the backend or lowering refuses.
    """
    who = "torch_delegate.lower"
    options = _options(options, knobs, who)
    cpp_module = _script_module(module, who, script_eager=True)
    backends = _backend_names(backend, who)
    _require_registered(backends, who, bool(options.load_backends))
    if len(backends) > 1 and not options.partial:
        raise ValueError(f"{who}: several backends ({', '.join(backends)}) need partial=True: each node goes to the "
                         f"first backend in the list that takes it")
    specs = _specs(spec, backends, who)
    methods = list(options.methods or dict.fromkeys(method for entry in specs.values() for method in entry) or ["forward"])
    if options.partial:
        if options.input_specs is not None:
            raise ValueError(f"{who}: input_specs apply to whole methods; they cannot be given with partial=True "
                             f"(give example_inputs instead)")
        result = _C.lower_partially(cpp_module, backends, [specs[name] for name in backends],
                                    _partition_options(options, methods, who))
    else:
        knobs = [knob for knob in _PARTIAL_KNOBS if getattr(options, knob) is not None]
        if knobs:
            raise ValueError(f"{who}: {', '.join(knobs)} {'is a' if len(knobs) == 1 else 'are'} partial-lowering "
                             f"knob{'' if len(knobs) == 1 else 's'}; pass partial=True to delegate supported regions "
                             f"and leave the rest to TorchScript")
        result = _C.lower_methods(cpp_module, backends[0], specs[backends[0]], methods,
                                  _input_specs(options.input_specs, who) if options.input_specs else {})
    return torch.jit._recursive.wrap_cpp_module(result)


def plan(module: Union[torch.jit.ScriptModule, torch.nn.Module], backend: Union[str, Sequence[str]], *,
         options: Optional[LowerOptions] = None, **knobs: Any) -> Report:
    """Dry run of lower(module, backend, options=options, partial=True, **knobs): what would be
    delegated and why the rest would stay in TorchScript. Nothing is lowered. It takes the same
    LowerOptions as lower (an eager module is scripted as there); partial=False and input_specs,
    which are whole-method lowering's, are refused."""
    who = "torch_delegate.plan"
    options = _options(options, knobs, who)
    if options.partial is False or options.input_specs is not None:
        raise ValueError(f"{who}: a plan is of partial lowering; {'partial=False' if options.partial is False else 'input_specs'} "
                         f"(whole-method lowering's) cannot be given to it")
    cpp_module = _script_module(module, who, script_eager=True)
    backends = _backend_names(backend, who)
    _require_registered(backends, who, bool(options.load_backends))
    methods = list(options.methods or ["forward"])
    return _report_of(_C.plan(cpp_module, backends, _partition_options(options, methods, who)))


def report(module: torch.jit.ScriptModule) -> Optional[Report]:
    """The delegation report a partially lowered module carries (also after save and load);
    None for a module that was not partially lowered."""
    data = _C.report(_script_module(module, "torch_delegate.report"))
    return None if data is None else _report_of(data)


def warm_up(module: torch.jit.ScriptModule, *shapes: Any, method: str = "forward") -> List[float]:
    """Plans the shapes a lowered module will serve before its first request: calls `method` once
    per argument, without autograd, on zeros of those sizes (a size tuple, e.g. (8, 3, 224, 224),
    or a tuple of them for a method of several tensors) or on the tensors given. Each region is
    re-planned for a shape it has not run (on_other_shapes "automatic" or "replan"); a region that
    cannot take it raises here, as its first call would. Returns the seconds each call took: the
    first-call cost a server pays at start instead of on a request.

    Without shapes: the ranges the module was lowered with (torch_delegate.Input), at their
    min_shape, opt_shape and max_shape, as lowering planned them; a module loaded from a file
    plans them again here."""
    import time
    if not isinstance(module, torch.jit.ScriptModule):
        raise TypeError(f"torch_delegate.warm_up: module must be a lowered torch.jit.ScriptModule, got {type(module).__name__}")
    if not hasattr(module, method):
        raise ValueError(f"torch_delegate.warm_up: the module has no method {method!r}")
    run = getattr(module, method)

    def arguments(shape: Any, where: str) -> tuple:
        if isinstance(shape, torch.Tensor):
            return (shape,)
        if isinstance(shape, (tuple, list, torch.Size)) and all(isinstance(size, int) for size in shape):
            return (torch.zeros(tuple(shape)),)
        if isinstance(shape, (tuple, list)) and shape:
            return tuple(arguments(part, f"{where}[{k}]")[0] for k, part in enumerate(shape))
        raise TypeError(f"torch_delegate.warm_up: {where} must be a tensor's sizes (a tuple of ints), a tensor, or a tuple "
                        f"of them for a method of several tensors; got {shape!r}")

    if not shapes:
        shapes = _declared_shapes(module, method)
    seconds = []
    with torch.no_grad():
        for k, shape in enumerate(shapes):
            given = arguments(shape, f"shape {k + 1}")
            start = time.perf_counter()
            run(*given)
            seconds.append(time.perf_counter() - start)
    return seconds


def _declared_shapes(module: torch.jit.ScriptModule, method: str) -> list:
    """The min, typical and max shapes of `method`'s declared ranges, as warm_up takes them."""
    ranges = getattr(module, _C.shape_ranges_attribute, None) if hasattr(module, _C.shape_ranges_attribute) else None
    if not ranges or method not in ranges:
        raise ValueError(f"torch_delegate.warm_up: no shapes given, and {method!r} was lowered without declared ranges "
                         f"(torch_delegate.Input in example_inputs): give the shapes to plan")
    arguments = ranges[method]
    if not all(arguments):
        raise ValueError(f"torch_delegate.warm_up: no shapes given, and only some arguments of {method!r} have declared "
                         f"ranges: give the shapes to plan (a tuple of sizes or tensors per call)")
    return [tuple(tuple(ends[k]) for ends in arguments) if len(arguments) > 1 else tuple(arguments[0][k]) for k in range(3)]


def load(path: str, map_location: Optional[Union[str, torch.device]] = None, *,
         load_backends: bool = False, verify: bool = True) -> torch.jit.ScriptModule:
    """torch.jit.load, after checking that the file is what was saved and that every backend the
    saved module delegates to is registered in this process and still has the execute signatures
    it was lowered for.

    verify=True (the default) first checks the archive (check_archive): a record whose data no
    longer matches the CRC32 the archive stores for it (the file was changed after it was saved),
    a file cut short or a damaged zip structure is a torch_delegate.Error naming the file and the
    record; LibTorch's own reader checks none of it. It reads the whole file once more
    (docs/deployment.md gives the cost); verify=False skips it.

    A backend that is not registered is a torch_delegate.Error that names it and says how to
    register it (for an installed backend: torch_delegate.load_backend(name), or
    load_backends=True to load it here)."""
    if not isinstance(path, str):
        path = str(path)
    if verify:
        _C.check_archive(path)
    if os.path.isfile(path):
        _require_registered(_C.backends_needed(path), "torch_delegate.load", load_backends)
    _C.check_loadable(path, verify=False)  # the archive, when asked for, was checked above
    return torch.jit.load(path, map_location=map_location)


def check_archive(path: str) -> None:
    """Checks that a saved module's file is what was saved: every record's data against the CRC32
    its zip archive stores, each record's headers against the central directory, the central
    directory and its ZIP64 records against the file. Raises torch_delegate.Error
    "torch-delegate: <path>: record '<name>' is damaged: ...; refusing to load it" (or names the
    damaged structure). load() does this first unless verify=False."""
    _C.check_archive(str(path))


def backends_needed(path: str) -> List[str]:
    """The backends a saved module delegates to, read from its code without loading it."""
    return list(_C.backends_needed(str(path)))


def keep_freed_memory(bytes: int = _C.default_kept_memory) -> bool:
    """Tells glibc's malloc to keep the memory this process frees, up to `bytes` (1 GiB by
    default), instead of giving it back to the kernel: a block smaller than `bytes` comes from the
    heap, not a mapping of its own, and the heap is trimmed only when more than `bytes` lie free
    at its top. A partially lowered model's TorchScript parts allocate large tensors in every
    call; with glibc's defaults each call can fault them in again, page by page (Swin V2-T lowered
    to onednn, in a fresh process: 2.2x slower; docs/performance.md, "What the allocator costs").

    Process-wide and not undone: call it once, early. The process keeps up to `bytes` more memory
    resident than it otherwise would. Returns True when glibc took the settings; False, changing
    nothing, where the C library is not glibc. A preloaded allocator (tcmalloc, jemalloc) keeps
    or returns memory by its own rules, which this does not change. `bytes` must be an int from
    32 MiB to 2**31 - 1 (glibc's mallopt takes an int)."""
    if isinstance(bytes, bool) or not isinstance(bytes, int):
        raise TypeError(f"torch_delegate.keep_freed_memory: bytes must be an int, given {type(bytes).__name__}")
    if not _C.min_kept_memory <= bytes <= 2**31 - 1:
        raise ValueError(f"torch_delegate.keep_freed_memory: bytes must be {_C.min_kept_memory} (32 MiB) to "
                         f"{2**31 - 1} (glibc's mallopt takes an int), given {bytes}")
    return bool(_C.keep_freed_memory(bytes))
