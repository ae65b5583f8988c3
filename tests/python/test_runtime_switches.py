"""Runtime switches: docs/runtime-switches.md's tables are the declared ones (torch-delegate's own
and every shipped backend's, loaded), every TD_*/POINTWISE_FUSION_* name the backends' sources
spell is declared, and the Python view and the command line agree.

Environment: PYTHONPATH (the built package), TD_SOURCE_ROOT (the checkout).
Regenerate the doc's tables: this script with --write.
"""
import os
import re
import subprocess
import sys
import unittest
import warnings

import torch_delegate
from torch_delegate import _cli

ROOT = os.environ.get("TD_SOURCE_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "runtime-switches.md")
BEGIN, END = "<!-- runtime switches -->\n", "<!-- end runtime switches -->"


def declared():
    for backend in torch_delegate.installed_backends():
        torch_delegate.load_backend(backend.name)
    return torch_delegate.runtime_switches()


class Tables(unittest.TestCase):
    def test_the_doc_is_the_declared_tables(self):
        with open(DOC) as doc:
            text = doc.read()
        self.assertIn(BEGIN, text)
        got = text[text.index(BEGIN) + len(BEGIN):text.index(END)].strip()
        self.assertEqual(got, _cli.switches_markdown(declared()).strip(),
                         "docs/runtime-switches.md differs from the declared switches: run "
                         "tests/python/test_runtime_switches.py --write")

    def test_every_switch_the_backends_spell_is_declared(self):
        names = {each.name for each in declared()}
        self.assertTrue({"TD_ONEDNN_WINOGRAD", "TD_XNNPACK_UNAVAILABLE", "POINTWISE_FUSION_ISA"} <= names, names)
        spelled = set()
        for folder, _, files in os.walk(os.path.join(ROOT, "backends")):
            for name in files:
                if name.endswith((".cpp", ".hpp", ".ipp")):
                    with open(os.path.join(folder, name)) as source:
                        spelled |= set(re.findall(r'"((?:TD|POINTWISE_FUSION)_[A-Z0-9_]+)"', source.read()))
        self.assertEqual(spelled - names, set(), "read by a backend but declared by no table")
        # A test hook is not a switch: the shipped libraries do not read it.
        self.assertNotIn("TD_ONEDNN_TREAT_AS_REFERENCE", spelled | names)

    def test_values_and_the_command_line(self):
        env = dict(os.environ, TD_ONEDNN_WINOGRAD="0")
        listing = subprocess.run([sys.executable, "-m", "torch_delegate", "switches", "--load-backends"], env=env,
                                 capture_output=True, text=True)
        self.assertEqual(listing.returncode, 0, listing.stderr)
        self.assertRegex(listing.stdout, r"onednn\s+TD_ONEDNN_WINOGRAD\s+0\n")
        self.assertRegex(listing.stdout, r"onednn\s+TD_ONEDNN_SILU\s+unset \(default: 1\)")
        first = declared()[0]
        self.assertEqual(first.owner, "torch-delegate")

    def test_the_former_names_warn(self):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.assertEqual([b.name for b in torch_delegate.available_backends()],
                             [b.name for b in torch_delegate.installed_backends()])
        self.assertTrue(any(issubclass(w.category, DeprecationWarning) and "installed_backends" in str(w.message)
                            for w in caught))


def write():
    with open(DOC) as doc:
        text = doc.read()
    head, rest = text.split(BEGIN)
    tail = rest[rest.index(END):]
    with open(DOC, "w") as doc:
        doc.write(head + BEGIN + _cli.switches_markdown(declared()) + "\n" + tail)


if __name__ == "__main__":
    if "--write" in sys.argv:
        write()
    else:
        unittest.main()
