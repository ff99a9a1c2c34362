"""Tests of scripts/run-notebook (the notebook runner make test uses):
code cells in order in one namespace, the last expression shown, and a
loud failure on an exception, IPython syntax or a file that is no notebook.

    /usr/bin/python3 -m unittest discover -s python/tests -t python/tests
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
RUNNER = os.path.join(os.path.dirname(os.path.dirname(HERE)), "scripts", "run-notebook")


def notebook(*cells):
    """An nbformat 4 notebook of (cell_type, source) pairs."""
    out = []
    for i, (kind, src) in enumerate(cells):
        cell = {"cell_type": kind, "id": "c%d" % i, "metadata": {}, "source": src.splitlines(True)}
        if kind == "code":
            cell.update(execution_count=None, outputs=[])
        out.append(cell)
    return {"cells": out, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


class RunNotebook(unittest.TestCase):
    def run_nb(self, nb):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "t.ipynb")
            with open(path, "w") as f:
                f.write(nb if isinstance(nb, str) else json.dumps(nb))
            return subprocess.run([sys.executable, RUNNER, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  universal_newlines=True, cwd=d)

    def test_cells_share_one_namespace_in_order(self):
        p = self.run_nb(notebook(("markdown", "# title\n"), ("code", "x = 2\nprint('x is', x)\n"),
                                 ("code", "y = x * 21\ny\n"), ("code", "None\n")))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.splitlines(), ["--- cell 2", "x is 2", "--- cell 3", "42", "--- cell 4",
                                                 "--- %s: 3 code cells ran" % p.args[-1]])

    def test_an_exception_fails_the_run_and_names_the_cell(self):
        p = self.run_nb(notebook(("code", "print('first')\n"), ("code", "raise RuntimeError('boom')\n"),
                                 ("code", "print('never')\n")))
        self.assertEqual(p.returncode, 1)
        self.assertNotIn("never", p.stdout)
        self.assertIn("Traceback", p.stderr)
        self.assertIn("cell 2 failed: RuntimeError: boom", p.stderr)

    def test_sys_exit_in_a_cell_fails_too(self):
        p = self.run_nb(notebook(("code", "import sys\nsys.exit(0)\n"), ("code", "print('never')\n")))
        self.assertEqual(p.returncode, 1)
        self.assertIn("cell 1 failed: SystemExit", p.stderr)

    def test_ipython_syntax_is_refused(self):
        p = self.run_nb(notebook(("code", "x = 1\n!pip install foo\n")))
        self.assertEqual(p.returncode, 1)
        self.assertIn("cell 1, line 2: IPython syntax '!pip install foo'", p.stderr)

    def test_not_a_notebook(self):
        for text, want in (("{", "cannot read the notebook"), ('{"nbformat": 3, "worksheets": []}', "not an nbformat 4")):
            p = self.run_nb(text)
            self.assertEqual(p.returncode, 2)
            self.assertIn(want, p.stderr)

    def test_the_example_notebook_is_valid(self):
        with open(os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples", "table2.ipynb")) as f:
            cells = json.load(f)
        self.assertEqual((cells["nbformat"], cells["nbformat_minor"]), (4, 5))
        for c in cells["cells"]:
            self.assertIn(c["cell_type"], ("code", "markdown"))
            self.assertIsInstance(c["id"], str)
            if c["cell_type"] == "code":
                self.assertEqual((c["execution_count"], c["outputs"]), (None, []))
                compile("".join(c["source"]), c["id"], "exec")


if __name__ == "__main__":
    unittest.main()
