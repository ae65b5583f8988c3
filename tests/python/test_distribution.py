"""The package the way Python users work (issue 29): backends by name (shipped ones, third-party
ones through entry points), the command line, the picture of a partition, the version check.

Run by `meson test` with /usr/bin/python3; the environment gives
  PYTHONPATH                <build>/python (the package, assembled there; the shipped backends
                            are found in the build tree)
  TD_TEST_BACKENDS_LIBRARY  libtorch_delegate_test_backends.so (a third-party backend here)
  TD_SOURCE                 the source tree (meson.build, pyproject.toml, version.hpp)
  TD_WORKDIR                a directory for files
Nothing is loaded in this process before a test asks for it: the tests of "installed but not
loaded" run in child processes, so their order does not matter.
"""
import atexit
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest
import xml.etree.ElementTree as ElementTree

import torch
import torch_delegate as td

SOURCE = os.environ["TD_SOURCE"]
# This run's files, in a directory of its own under TD_WORKDIR, removed when the run ends (they
# piled up in the build tree, six files a run).
WORKDIR = tempfile.mkdtemp(prefix="distribution_", dir=os.environ.get("TD_WORKDIR", "."))
atexit.register(shutil.rmtree, WORKDIR, ignore_errors=True)
TEST_BACKENDS = os.environ["TD_TEST_BACKENDS_LIBRARY"]
SVG = "{http://www.w3.org/2000/svg}"


def path(name):
    return os.path.join(WORKDIR, f"distribution_{os.getpid()}_{name}")


def child(code, env=None):
    """Runs `code` in a fresh /usr/bin/python3 (nothing loaded), returns (exit code, stdout, stderr)."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    return done.returncode, done.stdout, done.stderr


def cli_process(*arguments):
    """`python -m torch_delegate ARGUMENTS` in a new interpreter: (exit code, stdout, stderr)."""
    done = subprocess.run([sys.executable, "-m", "torch_delegate", *arguments], capture_output=True, text=True)
    return done.returncode, done.stdout, done.stderr


# What `python -m torch_delegate` runs (__main__.py: sys.exit(main())), in a fork of one server
# that has imported the package as that command does and nothing more: each command starts from a
# process that has loaded no backend, without paying for `import torch` again (about 1.5 s of the
# 20 commands here each; cli_process runs the real command line once, in test_backends).
CLI_SERVER = r"""
import json, os, sys, traceback
import torch_delegate._cli
for line in sys.stdin:
    arguments, out, err = json.loads(line)
    child = os.fork()
    if child == 0:
        os.dup2(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 1)
        os.dup2(os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
        try:
            code = torch_delegate._cli.main(arguments)
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else (print(exit.code, file=sys.stderr), 1)[1])
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    print(os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]), flush=True)
"""
_cli_server = None


def cli(*arguments):
    """(exit code, stdout, stderr) of `python -m torch_delegate ARGUMENTS` (see CLI_SERVER)."""
    global _cli_server
    if _cli_server is None:
        _cli_server = subprocess.Popen([sys.executable, "-c", CLI_SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        atexit.register(_cli_server.kill)
    out, err = path("cli_out"), path("cli_err")
    _cli_server.stdin.write(json.dumps([list(arguments), out, err]) + "\n")
    _cli_server.stdin.flush()
    code = int(_cli_server.stdout.readline())
    with open(out) as stdout, open(err) as stderr:
        return code, stdout.read(), stderr.read()


class Model(torch.nn.Module):
    """A small CNN with a GELU head: xnnpack takes the convolutions, pointwise_fusion the GELU
    chain, and the cat stays in TorchScript (XNNPACK 2022 has no concatenate)."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        y = torch.relu(self.conv1(x))
        z = torch.cat([y, self.conv2(y)], 1)
        return torch.nn.functional.gelu(z * 0.5 + 1.0)


def saved_lowered(name):
    """Saves Model lowered to [xnnpack, pointwise_fusion] (loading both backends in this process)."""
    x = torch.rand(1, 3, 16, 16)
    lowered = td.lower(torch.jit.script(Model().eval()), ["xnnpack", "pointwise_fusion"], partial=True,
                       example_inputs=(x,), load_backends=True)
    lowered.save(path(name))
    return path(name), lowered


class BackendsByName(unittest.TestCase):
    def test_listed_without_loading(self):
        code, out, err = child("""
            import torch_delegate as td
            names = [b.name for b in td.installed_backends()]
            print(names, [b.name for b in td.backends()], all(not b.loaded for b in td.installed_backends()))
        """)
        self.assertEqual(code, 0, err)
        self.assertEqual(out.strip(), "['pointwise_fusion', 'xnnpack', 'onednn', 'packed_linear'] [] True")

    def test_lower_says_how_to_load_an_installed_backend(self):
        code, out, err = child("""
            import torch, torch_delegate as td
            m = torch.jit.script(torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3)).eval())
            try:
                td.lower(m, ["xnnpack", "pointwise_fusion"], partial=True, example_inputs=(torch.rand(1, 3, 8, 8),))
            except td.Error as error:
                print(error)
            print([b.name for b in td.backends()])
            td.lower(m, "xnnpack", partial=True, example_inputs=(torch.rand(1, 3, 8, 8),), load_backends=True)
            print([b.name for b in td.backends()])
        """)
        self.assertEqual(code, 0, err)
        lines = out.splitlines()
        self.assertEqual(lines[0], "torch_delegate.lower: the backends 'xnnpack', 'pointwise_fusion' are installed but "
                                   "not loaded in this process: call torch_delegate.load_backend('xnnpack'); "
                                   "torch_delegate.load_backend('pointwise_fusion') first, or pass load_backends=True")
        self.assertEqual(lines[1], "[]")  # nothing was loaded behind the caller's back
        self.assertEqual(lines[2], "['xnnpack']")

    def test_load_says_how_to_load_then_loads_when_asked(self):
        file, _ = saved_lowered("load_hint.pt")
        code, out, err = child(f"""
            import torch_delegate as td
            try:
                td.load({file!r})
            except td.Error as error:
                print(error)
            module = td.load({file!r}, load_backends=True)
            print(sorted(b.name for b in td.backends()))
        """)
        self.assertEqual(code, 0, err)
        lines = out.splitlines()
        self.assertEqual(lines[0], "torch_delegate.load: the backends 'xnnpack', 'pointwise_fusion' are installed but not "
                                   "loaded in this process: call torch_delegate.load_backend('xnnpack'); "
                                   "torch_delegate.load_backend('pointwise_fusion') first, or pass load_backends=True")
        self.assertEqual(lines[1], "['pointwise_fusion', 'xnnpack']")

    def test_load_backend(self):
        library = td.load_backend("packed_linear")
        self.assertTrue(library.endswith("libpacked_linear.so"), library)
        self.assertIn("packed_linear", [b.name for b in td.backends()])
        self.assertEqual(td.load_backend("packed_linear"), library)  # again: nothing to do
        self.assertTrue([b for b in td.installed_backends() if b.name == "packed_linear"][0].loaded)
        with self.assertRaisesRegex(td.Error, r"^torch_delegate.load_backend: no backend named 'tpu' is installed "
                                              r"\(installed: 'pointwise_fusion', 'xnnpack', 'onednn', 'packed_linear'\)\. A third-party "
                                              r"backend declares itself in the entry-point group 'torch_delegate.backends'$"):
            td.load_backend("tpu")
        with self.assertRaisesRegex(TypeError, "name must be a str, got int"):
            td.load_backend(3)


class EntryPoints(unittest.TestCase):
    """A third-party backend: a Python package whose entry point names its library."""

    @classmethod
    def setUpClass(cls):
        cls.site = tempfile.mkdtemp(dir=WORKDIR)
        with open(os.path.join(cls.site, "td_fake_backends.py"), "w") as module:
            module.write(f"def library():\n    return {TEST_BACKENDS!r}\n\nnot_a_path = 3\nmissing = '/nonexistent/libx.so'\n")
        info = os.path.join(cls.site, "td_fake_backends-1.0.dist-info")
        os.makedirs(info)
        with open(os.path.join(info, "METADATA"), "w") as metadata:
            metadata.write("Metadata-Version: 2.1\nName: td-fake-backends\nVersion: 1.0\n")
        with open(os.path.join(info, "entry_points.txt"), "w") as entry_points:
            entry_points.write("[torch_delegate.backends]\ntest_backend = td_fake_backends:library\n"
                               "broken = td_fake_backends:not_a_path\ngone = td_fake_backends:missing\n"
                               "xnnpack = td_fake_backends:library\n")
        cls.env = {"PYTHONPATH": cls.site + os.pathsep + os.environ["PYTHONPATH"]}

    def test_listed_and_loaded(self):
        code, out, err = child("""
            import torch_delegate as td
            found = {b.name: b for b in td.installed_backends()}
            print(found["test_backend"].source, repr(found["test_backend"].library), found["xnnpack"].source)
            print(td.load_backend("test_backend") == td._backends._entry_point_library(
                [e for e in td._backends._entry_points() if e.name == "test_backend"][0]))
            print("test_backend" in [b.name for b in td.backends()])
            for name in ("broken", "gone"):
                try:
                    td.load_backend(name)
                except td.Error as error:
                    print(error)
        """, self.env)
        self.assertEqual(code, 0, err)
        lines = out.splitlines()
        # Listed without importing anything; a shipped name is not shadowed by an entry point.
        self.assertEqual(lines[0], "entry point td-fake-backends '' build tree")
        self.assertEqual(lines[1:3], ["True", "True"])
        self.assertEqual(lines[3], "torch_delegate: the entry point 'broken = td_fake_backends:not_a_path' of the group "
                                   "'torch_delegate.backends' gives int; it must give the path of the backend's library "
                                   "(a str or os.PathLike), or a callable that returns one")
        self.assertEqual(lines[4], "torch_delegate: the entry point 'gone = td_fake_backends:missing' names the library "
                                   "/nonexistent/libx.so, which does not exist")


class CommandLine(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.lowered_file, cls.lowered = saved_lowered("cli_lowered.pt")
        cls.scripted_file = path("cli_scripted.pt")
        torch.jit.script(Model().eval()).save(cls.scripted_file)

    def test_backends(self):
        code, out, err = cli_process("backends", "--json")  # the command line itself, in a new interpreter
        self.assertEqual(code, 0, err)
        rows = json.loads(out)
        self.assertEqual([row["name"] for row in rows], ["pointwise_fusion", "xnnpack", "onednn", "packed_linear"])
        self.assertEqual({row["source"] for row in rows}, {"build tree"})
        code, out, err = cli("backends")
        self.assertEqual(code, 0, err)
        self.assertRegex(out.splitlines()[1], r"^xnnpack +build tree +/.*libxnnpack_backend\.so$")

    def test_needs(self):
        self.assertEqual(cli("needs", self.lowered_file), (0, "xnnpack\npointwise_fusion\n", ""))
        code, out, _ = cli("needs", self.lowered_file, "--json")
        self.assertEqual(json.loads(out), ["xnnpack", "pointwise_fusion"])

    def test_report(self):
        code, out, err = cli("report", self.lowered_file)
        self.assertEqual(code, 5)
        self.assertEqual(err, f"torch_delegate report: {self.lowered_file} needs the backends xnnpack, pointwise_fusion, not "
                              f"loaded in this process: pass --load-backends to load xnnpack, pointwise_fusion\n")
        code, out, err = cli("report", self.lowered_file, "--load-backends")
        self.assertEqual(code, 0, err)
        self.assertEqual(out.strip(), str(td.report(self.lowered)).strip())
        code, out, err = cli("report", self.lowered_file, "--load-backends", "--json")
        self.assertEqual(code, 0, err)
        data = json.loads(out)
        self.assertEqual([region["backend"] for region in data["methods"][0]["regions"]], ["xnnpack", "pointwise_fusion"])
        self.assertEqual(data["regions"], 2)

    def test_plan(self):
        code, out, err = cli("plan", self.scripted_file, "xnnpack", "pointwise_fusion", "--example-input", "1x3x16x16", "--json")
        self.assertEqual(code, 0, err)
        data = json.loads(out)
        self.assertEqual(data["backends"], ["xnnpack", "pointwise_fusion"])
        self.assertEqual(data["backend"], "xnnpack, pointwise_fusion")  # deprecated, kept for older readers
        self.assertEqual([region["backend"] for region in data["methods"][0]["regions"]], ["xnnpack", "pointwise_fusion"])
        self.assertIn("aten::cat", [kept["kind"] for kept in data["methods"][0]["kept"]])
        # Measured, with a minimum gain no region can reach: every region measured faster or slower
        # stays in TorchScript; only one whose times do not separate goes by the list's order. (The
        # method never counts as shorter than a region's own TorchScript time, which is timed at
        # another moment: before, on a loaded CI runner, one region once "saved 99 %" of a method
        # timed in a quiet moment.)
        code, out, err = cli("plan", self.scripted_file, "xnnpack", "pointwise_fusion", "--example-input", "1x3x16x16",
                             "--measure", "--min-gain", "0.99", "--json")
        self.assertEqual(code, 0, err)
        data = json.loads(out)
        for region in data["methods"][0]["regions"]:
            self.assertTrue(region["decision"].startswith("not separable: of "), region["decision"])
        kept = {kept["reason_token"] for kept in data["methods"][0]["kept"]}
        self.assertTrue({"gain_below_minimum", "slower_on_backend"} & kept or data["methods"][0]["regions"])
        # A time limit spent at once: nothing measured, every region by the list's order.
        code, out, err = cli("plan", self.scripted_file, "xnnpack", "pointwise_fusion", "--example-input", "1x3x16x16",
                             "--measure", "--measure-time-limit", "1e-9", "--json")
        self.assertEqual(code, 0, err)
        regions = json.loads(out)["methods"][0]["regions"]
        self.assertTrue(regions)
        for region in regions:
            self.assertEqual(region["decision"], "not measured: too little of measure_time_limit_s was left; delegated, "
                                                 "as the list's order says")

    def test_errors(self):
        missing = path("nothing_here.pt")
        self.assertEqual(cli("needs", missing), (3, "", f"torch_delegate needs: {missing}: no such file\n"))
        text = path("text.pt")
        with open(text, "w") as out:
            out.write("not a model")
        self.assertEqual(cli("report", text), (4, "", f"torch_delegate report: {text}: not a TorchScript module (not a zip "
                                                     f"archive; save one with torch.jit.save or module.save)\n"))
        pickled = path("pickled.pt")
        torch.save({"weight": torch.ones(2)}, pickled)
        code, _, err = cli("plan", pickled, "xnnpack")
        self.assertEqual(code, 4)
        self.assertIn("torch.save writes those", err)
        code, _, err = cli("plan", self.scripted_file, "tpu")
        self.assertEqual((code, err), (5, "torch_delegate plan: unknown backend 'tpu' (installed: onednn, packed_linear, "
                                          "pointwise_fusion, xnnpack)\n"))
        self.assertEqual(cli("frobnicate")[0], 2)
        self.assertEqual(cli("plan", self.scripted_file, "xnnpack", "--example-input", "1xthree")[0], 2)
        code, _, err = cli("plan", self.scripted_file, "xnnpack", "--measure", "--min-gain", "5")
        self.assertEqual(code, 2)
        self.assertIn("argument --min-gain: a share of the method's time in [0, 1) (0.01: 1 %), got '5'", err)
        code, _, err = cli("plan", self.scripted_file, "xnnpack", "--measure", "--measure-time-limit", "-1")
        self.assertEqual(code, 2)
        self.assertIn("argument --measure-time-limit: seconds, a finite number >= 0 (0: no limit), got '-1'", err)
        code, _, err = cli("plan", self.scripted_file, "xnnpack", "--measure")
        self.assertEqual(code, 2)
        self.assertIn("error: plan --measure times each candidate region on example inputs: give --example-input SIZES "
                      "(once per argument, e.g. --example-input 1x3x224x224), or leave --measure off", err)


def svg_boxes(svg_text):
    """{title: fill colour} of the SVG's node boxes, and the titles of its clusters."""
    root = ElementTree.fromstring(svg_text)
    nodes, clusters = {}, []
    for group in root.iter(SVG + "g"):
        title = group.find(SVG + "title")
        if group.get("class") == "node":
            # The box (inside an <a> where the node has a tooltip): a path (rounded), polygon or ellipse.
            shape = next(element for element in group.iter() if element.tag in (SVG + "path", SVG + "polygon", SVG + "ellipse"))
            nodes[title.text] = shape.get("fill")
        elif group.get("class") == "cluster":
            clusters.append(title.text)
    return root, nodes, clusters


class Picture(unittest.TestCase):
    def test_regions_coloured_kept_grey(self):
        _, lowered = saved_lowered("picture.pt")
        report = td.report(lowered)
        dot = report.to_dot(lowered)
        root, nodes, clusters = svg_boxes(report.to_svg(lowered))
        texts = " ".join(text.text or "" for text in root.iter(SVG + "text"))
        colours = {"xnnpack": "#8ecae6", "pointwise_fusion": "#ffb703"}
        # One cluster per region, coloured by its backend, its box labelled with name and size.
        region_boxes = [name for name in nodes if nodes[name] in colours.values() and not name.startswith("legend")]
        self.assertEqual(len(region_boxes), 2)
        self.assertEqual(sorted(nodes[name] for name in region_boxes), sorted(colours.values()))
        self.assertEqual(sum(1 for title in clusters if title.startswith("cluster_m0_n")), 2)
        for region in report.methods[0].regions:
            self.assertIn(region.name, texts)
            self.assertIn(f"{region.backend}: {region.node_count} nodes", texts)
        # The cat kept in TorchScript: grey, with its reason; its tooltip carries the model's line.
        kept = [node for node in report.methods[0].kept if node.kind == "aten::cat"][0]
        self.assertIn("cat", texts)
        self.assertIn(kept.reason, texts)
        self.assertIn(f"aten::cat: {kept.reason}", dot)
        self.assertIn("test_distribution.py:", dot)
        greys = [name for name, fill in nodes.items() if fill == "#d9d9d9" and not name.startswith("legend")]
        self.assertGreaterEqual(len(greys), 1)
        # Data edges: the cat reads the first region's output and feeds the second region.
        edges = [group.find(SVG + "title").text for group in root.iter(SVG + "g") if group.get("class") == "edge"]
        self.assertGreaterEqual(len(edges), 4)

    def test_large_method_stays_readable(self):
        """A method of 3,000 nodes: each region is one box, so the picture has one box per region
        and per kept node, not per node."""
        lines = ["def forward(self, x):"]
        for i in range(1000):
            lines.append(f"    x = torch.tanh(x) * {1.0 + (i % 7) * 1e-3}")
            if i % 50 == 49:
                lines.append("    x = torch.floor_divide(x, 1.0)")
        lines.append("    return x")
        module = torch.jit.script(torch.nn.Module())
        module.define("\n".join(lines) + "\n")
        td.load_backend("pointwise_fusion")
        lowered = td.lower(module, "pointwise_fusion", partial=True)
        report = td.report(lowered)
        self.assertGreater(report.methods[0].delegated_nodes, 1900)
        _, nodes, _ = svg_boxes(report.to_svg(lowered))
        regions, kept = len(report.methods[0].regions), len(report.methods[0].kept)
        self.assertEqual((regions, kept), (20, 20))
        boxes = [name for name in nodes if not name.startswith("legend")]
        self.assertLessEqual(len(boxes), regions + kept + 2 + 40)  # + inputs, return, a few nodes lowering adds


class Version(unittest.TestCase):
    def test_one_version_everywhere(self):
        with open(os.path.join(SOURCE, "meson.build")) as meson:
            meson_version = re.search(r"version: '([^']+)'", meson.read()).group(1)
        with open(os.path.join(SOURCE, "pyproject.toml")) as pyproject:
            pyproject_version = re.search(r'^version = "([^"]+)"', pyproject.read(), re.M).group(1)
        with open(os.path.join(SOURCE, "include", "torch_delegate", "version.hpp")) as header:
            header_version = re.search(r'#define TORCH_DELEGATE_VERSION "([^"]+)"', header.read()).group(1)
        self.assertEqual({meson_version, pyproject_version, header_version, td.__version__, td._C.library_version()},
                         {td.__version__})

    def test_another_library_is_refused(self):
        self.assertEqual(td._C.version_mismatch("0.1.0", "0.1.0"), "")
        self.assertEqual(td._C.version_mismatch("0.2.0", "0.1.0"),
                         "torch_delegate: the extension torch_delegate._C was built for libtorch_delegate 0.2.0, but the "
                         "libtorch_delegate.so loaded in this process is version 0.1.0. Install one version of the package "
                         "(pip install --no-build-isolation --force-reinstall .) or put the matching build first on "
                         "LD_LIBRARY_PATH.")


if __name__ == "__main__":
    unittest.main(verbosity=2)
