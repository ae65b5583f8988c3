# Type stubs of torch_delegate._C, the package's C++ bindings (python/src/module.cpp). Use the
# functions of the torch_delegate package; these take torch._C.ScriptModule, not ScriptModule.
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import torch

class Error(RuntimeError): ...

# {"backends": [name], "module", "methods": [{"method", "regions": [{field: value}],
#   "kept": [{field: value, "reason_token", "per_backend": [{"backend", "reason", "detail", "reason_token"}]}]}], "text"}
ReportData = Dict[str, Any]

# Each kept reason as (token, label), in torch_delegate::kept_reason's order.
kept_reasons: List[Tuple[str, str]]

class OtherShapes:  # torch_delegate::other_shapes
    error: OtherShapes
    torchscript: OtherShapes
    replan: OtherShapes
    __members__: Dict[str, OtherShapes]

class ProgressUpdate:  # torch_delegate::progress_update
    stage: str  # "timing", "checking", "choosing", "cached" or "done"
    detail: str
    step: int
    steps: int
    elapsed_s: float

class PartitionOptions:  # torch_delegate::partition_options, field for field; C++'s defaults
    methods: List[str]
    min_region_size: int
    keep_kinds: Set[str]
    keep_submodules: Set[str]
    lower_submodules: Set[str]
    require_full: bool
    example_inputs: Dict[str, List[Any]]
    on_other_shapes: OtherShapes
    max_replans: int
    measure: bool
    min_gain: float
    choose_order: bool
    measure_time_limit_s: float
    replay: Optional[ReportData]  # set from a torch_delegate.Report (or None); read back as its data
    fallback_when_unavailable: bool
    timing_cache: bool
    fold_shapes: bool
    timing_cache_dir: str
    progress: Optional[Callable[[ProgressUpdate], None]]
    def __init__(self) -> None: ...

def backends() -> List[Dict[str, Any]]: ...
def runtime_switches() -> List[Tuple[str, str, str, str, bool, Optional[str]]]: ...
def lower_methods(module: torch._C.ScriptModule, backend: str, spec: Dict[str, Any], methods: List[str],
                  input_specs: Dict[str, List[Optional[Tuple[List[int], torch.dtype]]]]) -> torch._C.ScriptModule: ...
def lower_partially(module: torch._C.ScriptModule, backends: List[str], specs: List[Dict[str, Any]],
                    options: PartitionOptions) -> torch._C.ScriptModule: ...
def plan(module: torch._C.ScriptModule, backends: List[str], options: PartitionOptions) -> ReportData: ...
def report(module: torch._C.ScriptModule) -> Optional[ReportData]: ...
def check_loadable(path: str, verify: bool = True) -> None: ...
def check_archive(path: str) -> None: ...
def backends_needed(path: str) -> List[str]: ...
def keep_freed_memory(bytes: int) -> bool: ...  # torch_delegate::keep_freed_memory
min_kept_memory: int
default_kept_memory: int

version: str  # TORCH_DELEGATE_VERSION of the headers this extension was built with
def library_version() -> str: ...  # the loaded libtorch_delegate's version
def version_mismatch(extension: str, library: str) -> str: ...  # the import-time refusal's text, "" when they agree
