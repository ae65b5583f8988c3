# Type stubs of torch_delegate._C, the package's C++ bindings (python/src/module.cpp). Use the
# functions of the torch_delegate package; these take torch._C.ScriptModule, not ScriptModule.
from typing import Any, Dict, List, Optional, Tuple

import torch

class Error(RuntimeError): ...

# {"backend", "module", "methods": [{"method", "regions": [{field: value}],
#   "kept": [{field: value, "per_backend": [{"backend", "reason", "detail"}]}]}], "text"}
ReportData = Dict[str, Any]

def backends() -> List[Dict[str, Any]]: ...
def lower_methods(module: torch._C.ScriptModule, backend: str, spec: Dict[str, Any], methods: List[str],
                  input_specs: Dict[str, List[Optional[Tuple[List[int], torch.dtype]]]]) -> torch._C.ScriptModule: ...
def lower_partially(module: torch._C.ScriptModule, backends: List[str], specs: List[Dict[str, Any]], methods: List[str],
                    min_region_size: int, keep_kinds: List[str], keep_submodules: List[str],
                    lower_submodules: List[str], require_full: bool, fallback: bool,
                    example_inputs: Dict[str, List[Any]], on_other_shapes: str,
                    max_replans: int, measure: bool, min_gain: float, choose_order: bool, replay: Any) -> torch._C.ScriptModule: ...
def plan(module: torch._C.ScriptModule, backends: List[str], methods: List[str], min_region_size: int, keep_kinds: List[str],
         keep_submodules: List[str], lower_submodules: List[str], require_full: bool,
         example_inputs: Dict[str, List[Any]], measure: bool, min_gain: float, replay: Any) -> ReportData: ...
def report(module: torch._C.ScriptModule) -> Optional[ReportData]: ...
def check_loadable(path: str, verify: bool = True) -> None: ...
def check_archive(path: str) -> None: ...
def backends_needed(path: str) -> List[str]: ...

version: str  # TORCH_DELEGATE_VERSION of the headers this extension was built with
def library_version() -> str: ...  # the loaded libtorch_delegate's version
def version_mismatch(extension: str, library: str) -> str: ...  # the import-time refusal's text, "" when they agree
