"""The design card: exporters/ and runtimes/ at the root, importable only under bnc_deploy."""

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_subpackages_resolve_to_the_same_tree_as_bnc_deploy():
    import bnc_deploy.exporters
    import bnc_deploy.runtimes

    package_dir = Path(bnc_deploy.__file__).resolve().parent
    for module, folder in ((bnc_deploy.exporters, "exporters"), (bnc_deploy.runtimes, "runtimes")):
        path = Path(module.__file__).resolve().parent
        # Either the source tree (root/exporters) or an installed copy (bnc_deploy/exporters): never a mix.
        assert path in (package_dir.parent / folder, package_dir / folder)
        if package_dir.parent == ROOT:
            assert path == ROOT / folder


def test_no_generic_top_level_names_are_importable_from_elsewhere(tmp_path):
    code = (
        "import importlib.util, sys; sys.exit(int(any(importlib.util.find_spec(n) for n in ('exporters', 'runtimes'))))"
    )
    assert subprocess.run([sys.executable, "-c", code], cwd=tmp_path).returncode == 0


def test_pyproject_lists_every_package_and_maps_root_folders():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = {".".join(p.relative_to(ROOT).parts[:-1]) for p in (ROOT / "bnc_deploy").rglob("__init__.py")}
    found |= {
        "bnc_deploy." + p.parent.name for p in ROOT.glob("*/__init__.py") if p.parent.name in ("exporters", "runtimes")
    }
    assert found == listed
    assert config["package-dir"]["bnc_deploy.exporters"] == "exporters"
    assert config["package-dir"]["bnc_deploy.runtimes"] == "runtimes"


def test_package_data_lists_every_c_source_file():
    """The C written as C (``bnc_deploy/formats/c_template.py``) ships as package data: every .c/.h/.ld file in
    a package folder is listed in [tool.setuptools.package-data] under its installed package name, and
    every listed file exists (a file missing from the wheel breaks the installed exporter, runtime or target)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {
        package: ROOT / config["package-dir"].get(package, package.replace(".", "/")) for package in config["packages"]
    }
    found = {
        (package, path.name)
        for package, folder in folders.items()
        for path in folder.iterdir()
        if path.suffix in (".c", ".h", ".ld")
    }
    listed = {(package, name) for package, names in config["package-data"].items() for name in names}
    assert found == listed
    assert {
        ("bnc_deploy.exporters", "c_bnc.h"),
        ("bnc_deploy.runtimes", "native_kernel.c"),
        ("bnc_deploy.targets", "cortex_m_sources.c"),
        ("bnc_deploy.targets", "cortex_m_link.ld"),
    } <= found


def test_torch_is_pinned_to_the_cpu_build_in_constraints():
    assert "torch==2.13.0" in (ROOT / "constraints.txt").read_text().split()
