"""The dependency rules of ARCHITECTURE.md, checked on the import graph read from the sources (AST).

One test per rule, each listing every offending import as ``file:line: importer imports target``.
The checker is ``tests/import_graph.py`` (``python tests/import_graph.py`` prints all violations);
the tests at the bottom feed it small synthetic trees to prove that each rule bites.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from import_graph import (
    ROOT,
    RULES,
    build_graph,
    build_graph_from_sources,
    check_all,
    find_cycles,
    module_name,
    source_files,
    stage_of,
)


@pytest.fixture(scope="module")
def graph():
    return build_graph(ROOT)


def test_the_graph_covers_the_tree(graph):
    assert "bnc_deploy.exporters.onnx_bnc" in graph.modules
    assert "bnc_deploy.runtimes.base" in graph.modules
    assert "bnc_deploy.artifacts" in graph.modules
    assert not any(name.startswith(("tests", "benchmarks")) for name in graph.modules)
    assert any(imp.lazy for imp in graph.imports)


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.name)
def test_dependency_rule(graph, rule):
    violations = rule.check(graph)
    if violations:
        pytest.fail(
            f"{rule.text} {len(violations)} violation(s):\n" + "\n".join(f"  {v.message}" for v in violations),
            pytrace=False,
        )


# -- the checker bites ----------------------------------------------------------------------------
def _found(files):
    return {(v.rule, v.importer, v.target, v.line) for v in check_all(build_graph_from_sources(files))}


CLEAN = {
    "bnc_deploy/__init__.py": "",
    "bnc_deploy/errors.py": "class BncDeployError(Exception): pass\n",
    "bnc_deploy/fileio.py": "import os\nfrom bnc_deploy.errors import BncDeployError\n",
    "bnc_deploy/formats/__init__.py": "from . import metadata\n",
    "bnc_deploy/formats/metadata.py": "import json\nfrom ..errors import BncDeployError\n",
    "bnc_deploy/models/__init__.py": "",
    "bnc_deploy/models/bnc.py": "import torch\nfrom torch import nn\n",
    "bnc_deploy/train/__init__.py": "",
    "bnc_deploy/train/bnc.py": "import torch\nfrom bnc_deploy.models import bnc\n",
    "bnc_deploy/testing.py": "from bnc_deploy.formats import metadata\n",
    "bnc_deploy/cli/__init__.py": "",
    "bnc_deploy/cli/train.py": "def main():\n    from bnc_deploy.train.bnc import x\n",
    "exporters/__init__.py": "",
    "exporters/onnx_bnc.py": "import onnx\nfrom bnc_deploy.formats.metadata import KEY\n",
    "runtimes/__init__.py": "",
    "runtimes/base.py": "from bnc_deploy.formats import metadata\n",
}


def test_a_clean_synthetic_tree_passes():
    assert _found(CLEAN) == set()


@pytest.mark.parametrize(
    "path, source, expected",
    [
        pytest.param(
            "exporters/onnx_bnc.py",
            "def verify():\n    from bnc_deploy.runtimes.base import load_runtime\n",
            {("exporters-and-runtimes-independent", "bnc_deploy.exporters.onnx_bnc", "bnc_deploy.runtimes.base", 2)},
            id="exporter-imports-runtime-lazily",
        ),
        pytest.param(
            "runtimes/base.py",
            "from bnc_deploy import exporters\n",
            {("exporters-and-runtimes-independent", "bnc_deploy.runtimes.base", "bnc_deploy.exporters", 1)},
            id="runtime-imports-exporters-package",
        ),
        pytest.param(
            "runtimes/base.py",
            "import numpy\nimport torch.nn\n",
            {
                ("torch-only-in-models-and-train", "bnc_deploy.runtimes.base", "torch.nn", 2),
                ("torch-free-stages", "bnc_deploy.runtimes.base", "torch.nn", 2),
            },
            id="runtime-imports-torch",
        ),
        pytest.param(
            "bnc_deploy/cli/train.py",
            "def main():\n    import torch\n",
            {("torch-only-in-models-and-train", "bnc_deploy.cli.train", "torch", 2)},
            id="cli-imports-torch",
        ),
        pytest.param(
            "bnc_deploy/formats/metadata.py",
            "from ..train import bnc\n",
            {("torch-free-stages", "bnc_deploy.formats.metadata", "bnc_deploy.train.bnc", 1)},
            id="format-imports-train-relatively",
        ),
        pytest.param(
            "exporters/onnx_bnc.py",
            "import importlib\nm = importlib.import_module('bnc_deploy.models.bnc')\n",
            {("torch-free-stages", "bnc_deploy.exporters.onnx_bnc", "bnc_deploy.models.bnc", 2)},
            id="exporter-imports-models-dynamically",
        ),
        pytest.param(
            "bnc_deploy/testing.py", "from bnc_deploy.train import bnc\n", set(), id="testing-may-import-train"
        ),
        pytest.param(
            "bnc_deploy/formats/metadata.py",
            "from bnc_deploy.cli.train import main\n",
            {("nothing-imports-cli", "bnc_deploy.formats.metadata", "bnc_deploy.cli.train", 1)},
            id="format-imports-cli",
        ),
        pytest.param(
            "bnc_deploy/fileio.py",
            "import numpy, os\nimport scipy.io\nfrom bnc_deploy.formats import metadata\n",
            {
                ("foundations-self-contained", "bnc_deploy.fileio", "scipy.io", 2),
                ("foundations-self-contained", "bnc_deploy.fileio", "bnc_deploy.formats.metadata", 3),
            },
            id="foundation-imports-scipy-and-a-stage",
        ),
        pytest.param(
            "bnc_deploy/formats/metadata.py",
            "from bnc_deploy.nowhere import x\nimport exporters.onnx_bnc\n",
            {
                ("imports-resolve", "bnc_deploy.formats.metadata", "bnc_deploy.nowhere", 1),
                ("imports-resolve", "bnc_deploy.formats.metadata", "exporters.onnx_bnc", 2),
            },
            id="import-of-a-missing-module",
        ),
        pytest.param(
            "bnc_deploy/serving.py",
            "x = 1\n",
            {("every-module-has-a-stage", "bnc_deploy.serving", "", 0)},
            id="module-without-a-stage",
        ),
        pytest.param(
            "runtimes/base.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\n"
            "    from bnc_deploy.exporters import onnx_bnc\n",
            {
                ("torch-only-in-models-and-train", "bnc_deploy.runtimes.base", "torch", 3),
                ("torch-free-stages", "bnc_deploy.runtimes.base", "torch", 3),
                ("exporters-and-runtimes-independent", "bnc_deploy.runtimes.base", "bnc_deploy.exporters.onnx_bnc", 4),
            },
            id="type-checking-imports-count",
        ),
    ],
)
def test_the_checker_reports_a_forbidden_import(path, source, expected):
    assert _found({**CLEAN, path: source}) == expected


def test_the_checker_reports_a_torch_free_stage_reaching_train_through_another_stage():
    files = {
        **CLEAN,
        "bnc_deploy/testing.py": "from bnc_deploy.train import bnc\n",
        "bnc_deploy/formats/metadata.py": "def f():\n    from bnc_deploy import testing\n",
    }
    violations = check_all(build_graph_from_sources(files))
    assert [(v.rule, v.importer, v.target, v.line) for v in violations] == [
        ("torch-free-stages-indirectly", "bnc_deploy.formats.metadata", "bnc_deploy.testing", 2)
    ]
    assert "bnc_deploy/testing.py:1: bnc_deploy.testing imports bnc_deploy.train.bnc" in violations[0].message


def test_the_checker_reports_a_file_that_does_not_parse():
    assert {rule for rule, *_ in _found({**CLEAN, "bnc_deploy/errors.py": "def f(:\n"})} == {"sources-parse"}


def test_the_checker_reports_cycles_with_their_imports():
    files = {
        **CLEAN,
        "bnc_deploy/formats/metadata.py": "def f():\n    from bnc_deploy.formats import bnc\n",
        "bnc_deploy/formats/bnc.py": "from bnc_deploy.formats.metadata import KEY\n",
        "bnc_deploy/errors.py": "from bnc_deploy import fileio\n",
    }  # errors <-> fileio
    cycles = find_cycles(build_graph_from_sources(files))
    assert sorted(component for component, _ in cycles) == [
        ["bnc_deploy.errors", "bnc_deploy.fileio"],
        ["bnc_deploy.formats.bnc", "bnc_deploy.formats.metadata"],
    ]
    for component, path in cycles:
        assert path[0].importer == path[-1].target == component[0]
        assert [imp.target for imp in path[:-1]] == [imp.importer for imp in path[1:]]
    assert {v.rule for v in check_all(build_graph_from_sources(files))} == {"no-import-cycles"}


def test_a_cycle_through_a_type_checking_import_is_reported():
    files = {
        **CLEAN,
        "bnc_deploy/formats/metadata.py": "import typing\nif typing.TYPE_CHECKING:\n"
        "    from bnc_deploy.formats.bnc import Plan\n",
        "bnc_deploy/formats/bnc.py": "from bnc_deploy.formats.metadata import KEY\n",
    }
    violations = check_all(build_graph_from_sources(files))
    assert [(v.rule, v.importer) for v in violations] == [("no-import-cycles", "bnc_deploy.formats.bnc")]
    assert (
        "bnc_deploy/formats/metadata.py:3: bnc_deploy.formats.metadata imports bnc_deploy.formats.bnc (type checking)"
    ) in violations[0].message


def test_the_else_branch_of_type_checking_counts_too():
    files = {
        **CLEAN,
        "runtimes/base.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    pass\n"
        "else:\n    from bnc_deploy.exporters import onnx_bnc\n",
    }
    assert _found(files) == {
        ("exporters-and-runtimes-independent", "bnc_deploy.runtimes.base", "bnc_deploy.exporters.onnx_bnc", 5)
    }


def test_discovering_the_exporters_imports_no_target():
    """An exporter lookup loads exporters (and what they import), never a device target's code."""
    code = (
        "import sys; from bnc_deploy.exporters.base import exporters; exporters(); "
        "print(sorted(m for m in sys.modules if m.startswith('bnc_deploy.targets')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_forbidden_import_added_to_the_real_tree_is_reported():
    """Acceptance of issue 10: the rule test fails when a forbidden import is added to the real tree."""
    files = source_files(ROOT)
    before = _found(files)
    exporter = "exporters/onnx_bnc.py"
    files[exporter] += (
        "\n\ndef _forbidden():\n    from bnc_deploy.runtimes.base import load_runtime\n    import torch\n"
    )
    line = files[exporter].count("\n")  # the last line: import torch
    assert _found(files) - before == {
        ("exporters-and-runtimes-independent", "bnc_deploy.exporters.onnx_bnc", "bnc_deploy.runtimes.base", line - 1),
        ("torch-only-in-models-and-train", "bnc_deploy.exporters.onnx_bnc", "torch", line),
        ("torch-free-stages", "bnc_deploy.exporters.onnx_bnc", "torch", line),
    }


def test_module_names_and_stages():
    assert module_name("exporters/onnx_bnc.py") == "bnc_deploy.exporters.onnx_bnc"
    assert module_name("runtimes/__init__.py") == "bnc_deploy.runtimes"
    assert module_name("bnc_deploy/formats/__init__.py") == "bnc_deploy.formats"
    assert module_name("tests/test_x.py") is None and module_name("benchmarks/b.py") is None
    assert stage_of("bnc_deploy") == "root"
    assert stage_of("bnc_deploy.quantizers") == "foundations"
    assert stage_of("bnc_deploy.train.bnc") == "train"
    assert stage_of("bnc_deploy.exporters") == "exporters"
    assert stage_of("bnc_deploy.nowhere") is None
