"""torch-delegate backends from stock Python PyTorch (Debian's python3-torch 1.13).

Run by `meson test` with /usr/bin/python3; the environment gives
  TD_BACKEND_LIBRARY  libbackend_with_compiler_demo.so (registers the backend when loaded)
  TD_DEMO             the C++ demo executable (lowers a module in C++ and saves it)
  TD_PARTIAL_LOWERING the C++ partial_lowering example (partially lowers a module and saves it)
  TD_WORKDIR          a directory for files
"""
import os
import subprocess
import unittest

import torch
from torch.jit.mobile import _load_for_lite_interpreter

BACKEND = "backend_with_compiler_demo"
torch.ops.load_library(os.environ["TD_BACKEND_LIBRARY"])
WORKDIR = os.environ.get("TD_WORKDIR", ".")


def path(name):
    return os.path.join(WORKDIR, f"python_{os.getpid()}_{name}")


def script_unshared(module):
    """Scripts with one JIT type per module instance (what selective lowering needs)."""
    return torch.jit._recursive.create_script_module(
        module, torch.jit._recursive.infer_methods_to_compile, share_types=False)


def to_demo(module, methods=("forward",)):
    return torch._C._jit_to_backend(BACKEND, module, {m: {"": ""} for m in methods})


class BasicModule(torch.nn.Module):
    def forward(self, x, h):
        return self.accum(x, h), self.sub_accum(x, h)

    def accum(self, x, h):
        return x + h

    def sub_accum(self, x, h):
        return x - h


class AddModule(torch.nn.Module):
    def forward(self, x, h):
        return x + h


class SubModule(torch.nn.Module):
    def forward(self, x, h):
        return x - h


class MulModule(torch.nn.Module):
    def forward(self, x, h):
        return x * h


class Composite(torch.nn.Module):
    """An unlowered parent with two children to lower."""

    def __init__(self):
        super().__init__()
        self.adder = AddModule()
        self.subtractor = SubModule()

    def forward(self, x, h):
        return self.adder(x, h) * 2 + self.subtractor(x, h)


class Nested(torch.nn.Module):
    """Two children that share a module name at different depths ("inner")."""

    def __init__(self):
        super().__init__()
        self.inner = AddModule()
        self.outer = Composite()
        self.outer.inner = SubModule()

    def forward(self, x, h):
        return self.inner(x, h) + self.outer(x, h)


def inputs():
    return torch.rand(2, 3), torch.rand(3)


class CppSavedModules(unittest.TestCase):
    def test_partially_lowered_module_from_cpp(self):
        # relu stays in TorchScript, the add/sub regions run in the demo backend.
        workdir = path("partial")
        os.makedirs(workdir, exist_ok=True)
        subprocess.run([os.environ["TD_PARTIAL_LOWERING"]], check=True, capture_output=True, cwd=workdir)
        loaded = torch.jit.load(os.path.join(workdir, "partially_lowered.pt"))
        x, h = torch.rand(2, 4), torch.rand(2, 4)
        expected = torch.relu(x + h - loaded.bias) + x - h
        self.assertTrue(torch.allclose(loaded(x, h), expected))
        self.assertIn("2 regions, 4 nodes delegated", loaded._torch_delegate_report)
        # The rewritten method as TorchScript prints it: weight read and relu in TorchScript, the
        # regions called on the delegate child.
        self.assertEqual(loaded.code,
                         "def forward(self,\n    x: Tensor,\n    h: Tensor) -> Tensor:\n"
                         "  bias = self.bias\n"
                         "  __delegate = self.__delegate\n"
                         "  _0 = (__delegate).forward_region_0(x, h, bias, )\n"
                         "  b = torch.relu(_0)\n"
                         "  __delegate0 = self.__delegate\n"
                         "  _1 = (__delegate0).forward_region_1(b, x, h, )\n"
                         "  return _1\n")
        # (The command line's report of a saved file: tests/python/test_package.py, python -m torch_delegate report.)

        mobile_path = os.path.join(workdir, "partially_lowered.ptl")
        loaded._save_for_lite_interpreter(mobile_path)
        self.assertTrue(torch.allclose(_load_for_lite_interpreter(mobile_path)(x, h), expected))
        # A region's run-time error points at the model's own line, in the full JIT and, symbolicated
        # by LibTorch from the debug handles, in the lite interpreter.
        bad = (torch.rand(2, 4), torch.rand(13, 9))
        debug_path = os.path.join(workdir, "partially_lowered_debug.ptl")
        loaded._save_for_lite_interpreter(debug_path, _save_mobile_debug_info=True)
        for run in (loaded, _load_for_lite_interpreter(debug_path)):
            with self.assertRaises(RuntimeError) as raised:
                run(*bad)
            message = str(raised.exception)
            self.assertIn("backend 'backend_with_compiler_demo', method 'forward_region_0': in execute", message)
            self.assertIn("shapes [2, 4] and [13, 9] are not broadcastable", message)
            self.assertIn("The failing instruction implements aten::add", message)
            self.assertIn("    a = x + h - self.bias\n        ~~~~~ <--- HERE", message)

    def test_load_module_lowered_and_saved_by_cpp(self):
        saved = path("cpp_lowered.pt")
        subprocess.run([os.environ["TD_DEMO"], saved], check=True, capture_output=True)
        loaded = torch.jit.load(saved)
        x, h = inputs()
        self.assertTrue(torch.allclose(loaded(x, h), x))  # forward = accum(x, h) - h
        self.assertTrue(torch.allclose(loaded.accum(x, h), x + h))
        self.assertIn("LoweredWrapper", loaded._c._type().qualified_name())

    def test_golden_code_of_a_module_lowered_by_cpp(self):
        # The whole generated code as TorchScript prints it: the wrapper forwards to
        # __loweredModule__ (the lite interpreter names that frame), which calls the operator
        # named after the execute signature (stable across reorderings of execute_signatures).
        saved = path("cpp_golden.pt")
        subprocess.run([os.environ["TD_DEMO"], saved], check=True, capture_output=True)
        loaded = torch.jit.load(saved)
        self.assertEqual(loaded.code,
                         "def forward(self,\n    x: Tensor,\n    h: Tensor) -> Tensor:\n"
                         "  __loweredModule__ = self.__loweredModule__\n"
                         "  return (__loweredModule__).forward(x, h, )\n")
        self.assertEqual(loaded.__loweredModule__.code,
                         "def forward(self,\n    x: Tensor,\n    h: Tensor) -> Tensor:\n"
                         "  __handles = self.__handles\n"
                         "  _0 = ops.torch_delegate.backend_with_compiler_demo_execute__LTensor_CTensor_R_TTensor("
                         "__handles[\"forward\"], x, h)\n"
                         "  return _0\n")


class ToBackendFromPython(unittest.TestCase):
    def test_jit_to_backend_outputs_and_round_trip(self):
        original = torch.jit.script(BasicModule())
        lowered = to_demo(original, ("forward", "accum", "sub_accum"))
        x, h = inputs()
        for method in ("forward", "accum", "sub_accum"):
            got, want = getattr(lowered, method)(x, h), getattr(original, method)(x, h)
            self.assertEqual(str(type(got)), str(type(want)))
            for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
                self.assertTrue(torch.allclose(g, w))
        saved = path("py_lowered.pt")
        torch.jit.save(lowered, saved)
        loaded = torch.jit.load(saved)
        self.assertTrue(torch.allclose(loaded.accum(x, h), x + h))
        # getattr: a literal "__name" inside a class body would be name-mangled by Python.
        self.assertEqual(getattr(loaded.__loweredModule__, "__method_compile_spec"),
                         {"forward": {"": ""}, "accum": {"": ""}, "sub_accum": {"": ""}})

    def test_lowered_module_as_submodule_of_a_scripted_parent(self):
        lowered = to_demo(torch.jit.script(AddModule()))

        class Parent(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.child = lowered

            def forward(self, x, h):
                return self.child(x, h) * 3

        parent = torch.jit.script(Parent())
        x, h = inputs()
        self.assertTrue(torch.allclose(parent(x, h), (x + h) * 3))
        saved = path("parent.pt")
        torch.jit.save(parent, saved)
        self.assertTrue(torch.allclose(torch.jit.load(saved)(x, h), (x + h) * 3))

    def test_selective_lowering_of_submodules(self):
        original = script_unshared(Nested())
        lowered = torch._C._jit_to_backend_selective(original, lambda m: to_demo(m), ["inner", "outer.adder"])
        x, h = inputs()
        self.assertTrue(torch.allclose(lowered(x, h), original(x, h)))
        self.assertIn("LoweredWrapper", lowered.inner._c._type().qualified_name())
        self.assertIn("LoweredWrapper", lowered.outer.adder._c._type().qualified_name())
        self.assertNotIn("LoweredWrapper", lowered.outer.inner._c._type().qualified_name())
        saved = path("selective.pt")
        torch.jit.save(lowered, saved)
        self.assertTrue(torch.allclose(torch.jit.load(saved)(x, h), original(x, h)))

    def test_unsupported_op_raises_with_the_source_line(self):
        with self.assertRaises(RuntimeError) as raised:
            to_demo(torch.jit.script(MulModule()))
        message = str(raised.exception)
        self.assertIn("The node of aten::mul is not supported in this compiler.", message)
        self.assertIn("return x * h", message)
        self.assertIn("~~~~~ <--- HERE", message)
        self.assertIn("backend 'backend_with_compiler_demo', method 'forward'", message)

    def test_runtime_error_names_the_backend(self):
        lowered = to_demo(torch.jit.script(AddModule()))
        with self.assertRaises(RuntimeError) as raised:
            lowered(torch.rand(2, 4), torch.rand(13, 9))
        self.assertIn("shapes [2, 4] and [13, 9] are not broadcastable", str(raised.exception))


class TopWithSubmodule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.adder = AddModule()

    def forward(self, x, h):
        return self.adder(x, h) - h


class Debuggability(unittest.TestCase):
    def check_points_at_add(self, message):
        self.assertIn("backend 'backend_with_compiler_demo', method 'forward': in execute", message)
        self.assertIn("shapes [2, 4] and [13, 9] are not broadcastable", message)
        self.assertIn("The failing instruction implements aten::add", message)
        self.assertIn("return x + h", message)
        self.assertIn("~~~~~ <--- HERE", message)

    def test_runtime_error_points_at_the_model_source_through_submodules(self):
        lowered = to_demo(torch.jit.script(TopWithSubmodule()))
        bad = (torch.rand(2, 4), torch.rand(13, 9))
        with self.assertRaises(RuntimeError) as raised:
            lowered(*bad)
        self.check_points_at_add(str(raised.exception))
        self.assertIn("entering submodule 'adder' (__torch__.AddModule), method forward", str(raised.exception))
        self.assertIn("return self.adder(x, h) - h", str(raised.exception))
        self.assertIn("test_python.py", str(raised.exception))
        # lite interpreter
        mobile_path = path("debug.ptl")
        lowered._save_for_lite_interpreter(mobile_path, _save_mobile_debug_info=True)
        with self.assertRaises(RuntimeError) as raised:
            _load_for_lite_interpreter(mobile_path)(*bad)
        self.check_points_at_add(str(raised.exception))

    def test_torch_profiler_shows_delegated_instructions(self):
        lowered = to_demo(torch.jit.script(BasicModule()))
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            lowered(*inputs())
        names = [event.key for event in prof.key_averages()]
        delegated = [n for n in names if n.startswith(("aten::add (", "aten::sub ("))]
        self.assertEqual(len(delegated), 2, names)
        self.assertTrue(all("test_python.py:" in n for n in delegated), delegated)
        trace = path("trace.json")
        prof.export_chrome_trace(trace)
        with open(trace) as f:
            text = f.read()
        self.assertIn("aten::add (", text)
        self.assertIn("aten::sub (", text)


class LiteInterpreter(unittest.TestCase):
    def check_same(self, jit_module, x, h):
        mobile_path = path("lite.ptl")
        jit_module._save_for_lite_interpreter(mobile_path)
        mobile = _load_for_lite_interpreter(mobile_path)
        want = jit_module(x, h)
        got = mobile(x, h)
        for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            self.assertTrue(torch.allclose(g, w))
        return mobile

    def test_lowered_module_in_the_lite_interpreter(self):
        lowered = to_demo(torch.jit.script(BasicModule()))
        self.check_same(lowered, *inputs())

    def test_composite_with_two_lowered_children(self):
        original = script_unshared(Composite())
        lowered = torch._C._jit_to_backend_selective(original, lambda m: to_demo(m), ["adder", "subtractor"])
        x, h = inputs()
        self.assertTrue(torch.allclose(lowered(x, h), original(x, h)))
        self.check_same(lowered, x, h)
        # load in the full JIT -> re-save for mobile -> load in the lite interpreter
        saved = path("composite.pt")
        torch.jit.save(lowered, saved)
        self.check_same(torch.jit.load(saved), x, h)

    def test_children_sharing_a_module_name(self):
        original = script_unshared(Nested())
        lowered = torch._C._jit_to_backend_selective(
            original, lambda m: to_demo(m), ["inner", "outer.inner", "outer.adder"])
        x, h = inputs()
        self.assertTrue(torch.allclose(lowered(x, h), original(x, h)))
        self.check_same(lowered, x, h)
        saved = path("nested.pt")
        torch.jit.save(lowered, saved)
        self.check_same(torch.jit.load(saved), x, h)


if __name__ == "__main__":
    unittest.main(verbosity=2)
