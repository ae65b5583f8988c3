"""LibTorch 1.13's Python backend tests (pytorch test/jit/test_backends.py), re-expressed.

The scenarios of upstream's TestBackends and TestBackendsWithCompiler, written here with
plain `unittest` (upstream's JitTestCase needs expecttest) and run with Debian's stock
PyTorch against backends written with torch-delegate:
  * "test_backend" / "test_backend_unavailable" (tests/libtorch_scenarios/test_backend.hpp):
    lowered `forward` -> (x + h, x - h), `accum` -> x + h, `sub_accum` -> x - h;
  * "backend_with_compiler_demo" (examples/backend_with_compiler_demo): the demo compiler,
    aten::add / aten::sub over float tensors, in the full JIT and the lite interpreter.

Run by `meson test` with /usr/bin/python3; the environment gives
  TD_BACKEND_LIBRARY        libbackend_with_compiler_demo.so (registers the demo when loaded)
  TD_TEST_BACKENDS_LIBRARY  libtorch_delegate_test_backends.so (registers the test backends)
  TD_WORKDIR                a writable directory (unused: modules are saved to memory)
"""
import contextlib
import inspect
import io
import os
import re
import sys
import tempfile
import unittest
import warnings

import torch
import torch.utils.bundled_inputs
from torch.jit.mobile import _load_for_lite_interpreter
from torch.testing import FileCheck

DEMO = "backend_with_compiler_demo"
TEST_BACKEND = "test_backend"
UNAVAILABLE = "test_backend_unavailable"
torch.ops.load_library(os.environ["TD_BACKEND_LIBRARY"])
torch.ops.load_library(os.environ["TD_TEST_BACKENDS_LIBRARY"])

# The spec LibTorch's tests give a backend without options, for each of BasicModule's methods.
ALL_METHODS_SPEC = {"accum": {"": ""}, "sub_accum": {"": ""}, "forward": {"": ""}}
# The demo's spec in upstream's tests: keys the demo does not know about must be accepted.
INPUT_SHAPES_SPEC = {"forward": {"input_shapes": "((1, 1, 320, 240), (1, 3))", "some_other_option": "True"}}


# -- helpers ---------------------------------------------------------------------------------

def script_unshared(module):
    """Scripts with one JIT type per module instance (what selective lowering needs)."""
    return torch.jit._recursive.create_script_module(
        module, torch.jit._recursive.infer_methods_to_compile, share_types=False)


def jit_round_trip(module):
    """torch.jit.save to memory, then torch.jit.load."""
    buffer = io.BytesIO()
    torch.jit.save(module, buffer)
    buffer.seek(0)
    return torch.jit.load(buffer)


def lite(module, **save_options):
    """The module saved for, and loaded into, the lite interpreter."""
    return _load_for_lite_interpreter(io.BytesIO(module._save_to_buffer_for_lite_interpreter(**save_options)))


def compile_spec_of(lowered):
    # getattr: a literal "__method_compile_spec" inside a class body would be name-mangled.
    return getattr(lowered.__loweredModule__, "__method_compile_spec")


def selective_to_test_backend(module, submodules, method_spec=""):
    """Upstream's to_test_backend_selective: lowers `submodules` with {"forward": method_spec}."""
    def lower(submodule):
        return torch._C._jit_to_backend(TEST_BACKEND, submodule, {"forward": method_spec})
    return torch._C._jit_to_backend_selective(module, lower, submodules)


@contextlib.contextmanager
def captured_warnings():
    """Collects what the block warns: Python warnings, Python's sys.stderr and the process's
    file descriptor 2 (where c10's default handler prints a TORCH_WARN that is not turned
    into a Python warning). Yields a dict filled when the block ends."""
    result = {"python": [], "stderr": ""}
    sys.stderr.flush()
    saved_fd = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as fd_capture, \
            warnings.catch_warnings(record=True) as python_warnings:
        warnings.simplefilter("always")
        python_stderr = io.StringIO()
        os.dup2(fd_capture.fileno(), 2)
        try:
            with contextlib.redirect_stderr(python_stderr):
                yield result
        finally:
            sys.stderr.flush()
            os.dup2(saved_fd, 2)
            os.close(saved_fd)
            fd_capture.seek(0)
            result["python"] = [str(w.message) for w in python_warnings]
            result["stderr"] = python_stderr.getvalue() + fd_capture.read().decode(errors="replace")


class ScenarioTestCase(unittest.TestCase):
    def assert_same_outputs(self, got, want):
        """Same structure (a Tensor or a tuple of them) and the same values, exactly."""
        self.assertIs(type(got), type(want), f"got {got!r}, want {want!r}")
        if isinstance(want, tuple):
            self.assertEqual(len(got), len(want))
            for g, w in zip(got, want):
                self.assert_same_outputs(g, w)
        else:
            torch.testing.assert_close(got, want, rtol=0, atol=0)

    def check_function(self, name, inputs):
        """Upstream's check_function: Python, scripted and lowered give the same for `name`."""
        python_output = getattr(self.module, name)(*inputs)
        jit_output = getattr(self.scripted_module, name)(*inputs)
        backend_output = getattr(self.lowered_module, name)(*inputs)
        self.assert_same_outputs(backend_output, python_output)
        self.assert_same_outputs(backend_output, jit_output)

    def check_forward_with_mobile(self, inputs):
        """Upstream's check_forward: Python, scripted, lowered and lite interpreter agree."""
        python_output = self.module.forward(*inputs)
        jit_output = self.scripted_module.forward(*inputs)
        backend_output = self.lowered_module(*inputs)
        mobile_output = self.mobile_module(*inputs)
        self.assert_same_outputs(backend_output, python_output)
        self.assert_same_outputs(backend_output, jit_output)
        self.assert_same_outputs(mobile_output, backend_output)

    def assert_raises_with_highlight(self, texts, call):
        """Upstream's assertRaisesRegexWithHighlight for plain strings: every text in the
        message; returns the message."""
        with self.assertRaises(Exception) as raised:
            call()
        message = str(raised.exception)
        for text in texts:
            self.assertIn(text, message, f"\n--- actual message ---\n{message}\n---")
        return message


# -- the modules of upstream's tests ---------------------------------------------------------

class BasicModule(torch.nn.Module):
    """forward returns (accum, sub_accum)."""

    def forward(self, x, h):
        return self.accum(x, h), self.sub_accum(x, h)

    def accum(self, x, h):
        return x + h

    def sub_accum(self, x, h):
        return x - h


class NestedModule(torch.nn.Module):
    """Holds a (possibly lowered) module and forwards to it."""

    def __init__(self, submodule):
        super().__init__()
        self.submodule = submodule

    def forward(self, x, h):
        return self.submodule.forward(x, h)


class MiddleModule(torch.nn.Module):
    def __init__(self, submodule):
        super().__init__()
        self.submodule = submodule

    def forward(self, x, y):
        return self.submodule.forward(x, y)


class OuterModule(torch.nn.Module):
    def __init__(self, sub1, sub2, other):
        super().__init__()
        self.sub1 = sub1
        self.sub2 = sub2
        self.other = other

    def forward(self, x, y):
        # sub1's grandchild is called directly: the lowered type must be remapped in this
        # module's graph too, not only in its parent's.
        a, b = self.sub1.submodule.forward(x, y)
        c, d = self.sub2.forward(x, y)
        e, f = self.other.forward(x, y)
        return a + c + e, b + d + f


def three_level_hierarchy():
    """OuterModule -> three MiddleModules -> a BasicModule each."""
    return OuterModule(MiddleModule(BasicModule()), MiddleModule(BasicModule()), MiddleModule(BasicModule()))


class BasicModuleAdd(torch.nn.Module):
    def forward(self, x, h):
        return x + h


class BasicModuleSub(torch.nn.Module):
    def forward(self, x, h):
        return x - h


class ModuleNotSupported(torch.nn.Module):
    """aten::mul: not something the demo compiles."""

    def forward(self, x, h):
        return x * h


class CompModule(torch.nn.Module):
    """Two lowered modules as submodules."""

    def __init__(self, addmodule, submodule):
        super().__init__()
        self.lowered_add = addmodule
        self.lowered_sub = submodule

    def forward(self, a, b, s):
        c = self.lowered_add.forward(a, b)
        d = self.lowered_sub.forward(a, b)
        return s * (c * d)


class ModuleAdd(torch.nn.Module):
    def forward(self, x, h):
        return x + h


class SameNameCompModule(torch.nn.Module):
    """Two lowered modules made from the same Python class (so with the same type name)."""

    def __init__(self):
        super().__init__()
        spec = {"forward": {"some_other_option": "True"}}
        self.add = torch._C._jit_to_backend(DEMO, torch.jit.script(ModuleAdd()), spec)
        self.sub = torch._C._jit_to_backend(DEMO, torch.jit.script(ModuleAdd()), spec)

    def forward(self, a, b, s: int):
        c = self.add.forward(a, b)
        d = self.sub.forward(a, b)
        return s * (c * d)


# -- upstream's TestBackends: test_backend and test_backend_unavailable ----------------------

class TestBackendsBasicModule(ScenarioTestCase):
    """Upstream's BasicModuleTest."""

    def setUp(self):
        self.module = BasicModule()
        self.scripted_module = torch.jit.script(BasicModule())
        self.lowered_module = torch._C._jit_to_backend(TEST_BACKEND, self.scripted_module, ALL_METHODS_SPEC)

    def check_execution(self):
        x = torch.randn(5)
        for name in ("accum", "sub_accum", "forward"):
            self.check_function(name, (x, x))

    def test_basic_module_execution(self):
        self.check_execution()

    def test_basic_module_save_load(self):
        self.check_execution()
        spec_before = compile_spec_of(self.lowered_module)
        self.assertEqual(spec_before, ALL_METHODS_SPEC)
        self.lowered_module = jit_round_trip(self.lowered_module)
        self.assertEqual(compile_spec_of(self.lowered_module), spec_before)
        self.check_execution()


class TestBackendsBasicModuleUnavailable(ScenarioTestCase):
    """Upstream's BasicModuleUnavailableTest: lowering and saving work, running and loading
    raise "Backend is not available." from the generated code."""

    TEXTS = ("Backend is not available.", 'raise Exception("Backend is not available."')

    def lower(self):
        with captured_warnings():  # the warning checked below, kept out of the test's output
            return torch._C._jit_to_backend(UNAVAILABLE, torch.jit.script(BasicModule()), {"forward": {"": ""}})

    def test_basic_module_unavailable_lowering_warns(self):
        with captured_warnings() as captured:
            torch._C._jit_to_backend(UNAVAILABLE, torch.jit.script(BasicModule()), {"forward": {"": ""}})
        expected = f"Backend [{UNAVAILABLE}] is not available"
        # Debian's LibTorch 1.13 does not turn this TORCH_WARN (from its codegen_backend_module)
        # into a Python warning: c10's default handler logs it through glog to file descriptor 2.
        self.assertTrue(any(expected in w for w in captured["python"]) or expected in captured["stderr"],
                        f"no warning containing {expected!r}: {captured}")

    def test_basic_module_unavailable_execution(self):
        lowered = self.lower()
        x = torch.randn(5)
        self.assert_raises_with_highlight(self.TEXTS, lambda: lowered.forward(x, x))

    def test_basic_module_unavailable_save_load(self):
        lowered = self.lower()
        buffer = io.BytesIO()
        torch.jit.save(lowered, buffer)  # saving works
        buffer.seek(0)
        self.assert_raises_with_highlight(self.TEXTS, lambda: torch.jit.load(buffer))


class TestBackendsNestedModule(ScenarioTestCase):
    """Upstream's NestedModuleTest: a lowered module as the submodule of a scripted one."""

    def setUp(self):
        self.module = NestedModule(BasicModule())
        self.scripted_module = torch.jit.script(NestedModule(BasicModule()))
        lowered = torch._C._jit_to_backend(TEST_BACKEND, torch.jit.script(BasicModule()), ALL_METHODS_SPEC)
        self.lowered_module = torch.jit.script(NestedModule(lowered))

    def check_execution(self):
        x = torch.randn(5)
        self.check_function("forward", (x, x))

    def test_nested_module_execution(self):
        self.check_execution()

    def test_nested_module_save_load(self):
        self.check_execution()
        self.lowered_module = jit_round_trip(self.lowered_module)
        self.check_execution()


class TestBackendsSelectiveLowering(ScenarioTestCase):
    """Upstream's SelectiveLoweringTest: lower sub1.submodule and sub2.submodule in place,
    with the per-method spec the empty string (not a dict)."""

    BACKEND_CLASS = "__torch__.torch.classes.__backends__.test_backend"

    def setUp(self):
        self.module = three_level_hierarchy()
        self.scripted_module = script_unshared(three_level_hierarchy())
        self.lowered_module = selective_to_test_backend(
            script_unshared(three_level_hierarchy()), ["sub1.submodule", "sub2.submodule"])

    def check_execution(self):
        x = torch.randn(5)
        self.check_function("forward", (x, x))
        self.check_type_remap()

    def check_type_remap(self):
        scripted, lowered = self.scripted_module, self.lowered_module
        # The root is not lowered, but calls a lowered module directly.
        FileCheck().check("OuterModule").check("BasicModule").run(scripted.graph)
        FileCheck().check("OuterModule").check_not(self.BACKEND_CLASS).check("LoweredWrapper.test_backend") \
            .run(lowered.graph)
        # sub1 and sub2 are not lowered, but their BasicModule was replaced.
        for name in ("sub1", "sub2"):
            FileCheck().check("MiddleModule").check("BasicModule").check_not("LoweredWrapper.test_backend") \
                .run(getattr(scripted, name).graph)
            FileCheck().check("MiddleModule").check_not(self.BACKEND_CLASS).check("LoweredWrapper.test_backend") \
                .run(getattr(lowered, name).graph)
            # Their submodule was lowered: its __loweredModule__ calls the backend's TorchBind class.
            FileCheck().check("LoweredModule.test_backend").check(self.BACKEND_CLASS) \
                .run(getattr(lowered, name).submodule.__loweredModule__.graph)
        # `other` and its submodule are left alone.
        for other in (scripted.other, lowered.other):
            FileCheck().check("MiddleModule").check("BasicModule").check_not(self.BACKEND_CLASS) \
                .check_not("LoweredWrapper.test_backend").run(other.graph)
            FileCheck().check("BasicModule").check_not(self.BACKEND_CLASS) \
                .check_not("LoweredModule.test_backend").run(other.submodule.graph)

    def test_selective_lowering_execution(self):
        self.check_execution()

    def test_selective_lowering_save_load(self):
        self.check_execution()
        self.lowered_module = jit_round_trip(self.lowered_module)
        self.check_execution()

    def test_selective_lowering_type_remap(self):
        self.check_type_remap()

    def test_selective_lowering_errors_not_a_script_module(self):
        with self.assertRaisesRegex(RuntimeError, r"Object .* is not a ScriptModule"):
            selective_to_test_backend(torch.nn.ReLU(), ["submodule"])

    def test_selective_lowering_errors_attribute_not_a_module(self):
        module = MiddleModule(BasicModule())
        module.new_attr = 3
        with self.assertRaisesRegex(RuntimeError, r"Attribute named new_attr is not a Module"):
            selective_to_test_backend(torch.jit.script(module), ["new_attr"])

    def test_selective_lowering_errors_shared_types(self):
        with self.assertRaisesRegex(RuntimeError,
                                    r"Selective lowering is only supported for module hierarchies with unique types"):
            selective_to_test_backend(torch.jit.script(three_level_hierarchy()), ["sub1.submodule"])


# -- upstream's TestBackendsWithCompiler: backend_with_compiler_demo --------------------------

class TestBackendsWithCompilerBasicModuleAdd(ScenarioTestCase):
    """Upstream's BasicModuleTestWithCompiler: the demo in the JIT and the lite interpreter,
    lowered with option keys it does not declare."""

    def setUp(self):
        self.module = BasicModuleAdd()
        self.scripted_module = torch.jit.script(BasicModuleAdd())
        self.lowered_module = torch._C._jit_to_backend(DEMO, self.scripted_module, INPUT_SHAPES_SPEC)
        self.mobile_module = lite(self.lowered_module)

    def test_basic_module_add_execution(self):
        x = torch.ones(1, dtype=torch.float)
        self.check_forward_with_mobile((x, x))
        y, z = torch.rand(2, 3), torch.rand(3)
        self.check_forward_with_mobile((y, z))


class TestBackendsWithCompilerErrorMessages(ScenarioTestCase):
    """Upstream's ErrorMessagesWithCompiler: the demo rejects aten::mul, in its seed's format:
    "The node of aten::mul is not supported in this compiler. Source code: " and the node's
    source range (File "...", line N, the source lines, "~~~~~ <--- HERE")."""

    def test_errors_unsupported_operator(self):
        scripted = torch.jit.script(ModuleNotSupported())
        with self.assertRaises(RuntimeError) as raised:
            torch._C._jit_to_backend(DEMO, scripted, {"forward": {"": ""}})
        message = str(raised.exception)
        shown = f"\n--- actual message ---\n{message}\n---"
        # Upstream's pattern, line by line.
        self.assertRegex(
            message,
            r"The node of aten::mul is not supported in this compiler\. Source code: .*\n"
            r"\s*def forward\(self, x, h\):\n"
            r"\s*return x \* h\n"
            r"\s*~~~~~ <--- HERE",
            shown)
        # The first line exactly as the demo's seed builds it: the message, " Source code: ",
        # then the node's SourceRange::str(), which begins with '  File "<file>", line <N>'.
        mul = next(n for n in scripted.graph.nodes() if n.kind() == "aten::mul")
        seed_text = "The node of aten::mul is not supported in this compiler. Source code: " + mul.sourceRange()
        first_line = message.split("\n", 1)[0]
        self.assertEqual(first_line, seed_text.split("\n", 1)[0], shown)
        file_line = re.fullmatch(
            re.escape("The node of aten::mul is not supported in this compiler. Source code: ") +
            r' {2}File "([^"]+)", line (\d+)', first_line)
        self.assertIsNotNone(file_line, shown)
        self.assertEqual(os.path.basename(file_line.group(1)), os.path.basename(__file__), shown)
        source_lines, first = inspect.getsourcelines(ModuleNotSupported.forward)
        self.assertIn(int(file_line.group(2)), range(first, first + len(source_lines)), shown)
        # ... and the whole source range, as LibTorch prints it.
        self.assertTrue(message.startswith(seed_text.rstrip("\n")), f"{shown}\n--- expected prefix ---\n{seed_text}")


class TestBackendsWithCompilerCompModule(ScenarioTestCase):
    """Upstream's CompModuleTestWithCompiler: two lowered submodules, JIT and lite interpreter."""

    def setUp(self):
        lowered_add = torch._C._jit_to_backend(DEMO, torch.jit.script(BasicModuleAdd()), INPUT_SHAPES_SPEC)
        lowered_sub = torch._C._jit_to_backend(DEMO, torch.jit.script(BasicModuleSub()), {"forward": {"": ""}})
        self.module = CompModule(lowered_add, lowered_sub)
        self.scripted_module = torch.jit.script(CompModule(lowered_add, lowered_sub))
        self.lowered_module = self.scripted_module  # no lowered CompModule: upstream's filler
        self.mobile_module = lite(self.scripted_module)

    def test_comp_module_execution(self):
        one = torch.ones(1, dtype=torch.float)
        self.check_function("forward", (one, one, one))
        self.check_forward_with_mobile((one, one, one))
        a, b, s = torch.tensor([3.0]), torch.tensor([1.0]), torch.tensor([2.0])
        self.check_forward_with_mobile((a, b, s))
        self.assert_same_outputs(self.mobile_module(a, b, s), torch.tensor([16.0]))


class TestBackendsWithCompilerCompModuleSameName(ScenarioTestCase):
    """Upstream's CompModuleTestSameNameWithCompiler: two lowered modules of one Python class."""

    def setUp(self):
        self.module = SameNameCompModule()
        self.scripted_module = torch.jit.script(self.module)
        self.lowered_module = self.scripted_module
        self.mobile_module = lite(self.scripted_module)

    def test_comp_module_same_name_execution(self):
        a, b, s = torch.ones(1), 3 * torch.ones(1), 3
        self.check_function("forward", (a, b, s))
        self.check_forward_with_mobile((a, b, s))
        self.assert_same_outputs(self.mobile_module(a, b, s), torch.tensor([48.0]))  # 3 * (4 * 4)


class TestBackendsAddedAttributes(ScenarioTestCase):
    """Upstream's AddedAttributesTest: bundled inputs added to a lowered module survive
    save/load. (Upstream's own version never ran: it names an undefined variable, uses the
    return value of augment_model_with_bundled_inputs, which is None, and bundles one input
    for the two-argument BasicModule; here the inputs match forward.)"""

    def test_added_attributes_bundled_inputs(self):
        lowered = torch._C._jit_to_backend(TEST_BACKEND, torch.jit.script(BasicModule()), ALL_METHODS_SPEC)
        inputs = [(torch.ones(5), torch.ones(5))]
        pre_bundled = lowered(*inputs[0])
        # Adds attributes and methods to `lowered` in place (it returns None).
        torch.utils.bundled_inputs.augment_model_with_bundled_inputs(lowered, inputs)
        post_bundled = lowered(*lowered.get_all_bundled_inputs()[0])
        loaded = jit_round_trip(lowered)
        bundled = loaded.get_all_bundled_inputs()
        self.assertEqual(len(bundled), 1)
        post_load = loaded(*bundled[0])
        self.assert_same_outputs(post_bundled, pre_bundled)
        self.assert_same_outputs(post_load, post_bundled)
        self.assert_same_outputs(post_load, (2 * torch.ones(5), torch.zeros(5)))


class TestBackendsWithCompilerDebugInfo(ScenarioTestCase):
    """The lite interpreter symbolicates a demo runtime error from its debug handle, as in
    LibTorch's C++ TestBackendWithCompiler.DebugInfo scenarios, here from Python."""

    def test_lite_interpreter_debug_info_module_hierarchy(self):
        lowered = torch._C._jit_to_backend(DEMO, torch.jit.script(BasicModuleAdd()), {"forward": {"": ""}})
        mobile = lite(lowered, _save_mobile_debug_info=True)
        with self.assertRaises(Exception) as raised:
            mobile(torch.rand(2, 4), torch.rand(13, 9))
        message = str(raised.exception)
        shown = f"\n--- actual message ---\n{message}\n---"
        hierarchy = re.search(r"Module hierarchy:(\S*)", message)
        self.assertIsNotNone(hierarchy, shown)
        # What LibTorch's own demo gives (C++: "top(m)::<unknown>.__loweredModule__(m)::forward.aten::add"
        # for a module of type m): the backend's instruction resolved to the delegated aten::add.
        self.assertEqual(hierarchy.group(1),
                         "top(BasicModuleAdd)::<unknown>.__loweredModule__(BasicModuleAdd)::forward.aten::add", shown)
        self.assertIn("shapes [2, 4] and [13, 9] are not broadcastable", message, shown)
        # The traceback ends in the model's own source: its last frame is this file's `return x + h`.
        last_file = message.rfind('  File "')
        self.assertNotEqual(last_file, -1, shown)
        last_frame = message[last_file:]
        self.assertIn(os.path.basename(__file__), last_frame.split("\n", 1)[0], shown)
        self.assertRegex(last_frame, r"\n\s*def forward\(self, x, h\):\n\s*return x \+ h\n\s*~~~~~ <--- HERE\n", shown)


# -- compile specs from Python ---------------------------------------------------------------

class TestCompileSpecFromPython(ScenarioTestCase):
    """Per-method spec values that are not dicts, as Python passes them through
    torch._C._jit_to_backend (a Dict[str, Any]): kept verbatim in __method_compile_spec."""

    def check_spec(self, spec):
        lowered = torch._C._jit_to_backend(TEST_BACKEND, torch.jit.script(BasicModule()), spec)
        x, h = torch.randn(5), torch.randn(5)
        self.assert_same_outputs(lowered(x, h), (x + h, x - h))
        self.assertEqual(compile_spec_of(lowered), spec)
        loaded = jit_round_trip(lowered)
        self.assertEqual(compile_spec_of(loaded), spec)
        self.assert_same_outputs(loaded(x, h), (x + h, x - h))

    def test_options_string_method_spec(self):
        self.check_spec({"forward": ""})

    def test_options_int_method_spec(self):
        self.check_spec({"forward": 3})


if __name__ == "__main__":
    unittest.main(verbosity=2)
