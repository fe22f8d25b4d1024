"""Exports on emulated aarch64 (``bnc_deploy.targets.aarch64``): qemu-user in a cached arm64 Debian root.

The emulated checks are marked ``slow``. They set up the root first (cached in
``$BNC_DEPLOY_TARGET_CACHE/aarch64`` or ``~/.cache/bnc-deploy/aarch64``; a first setup downloads
Debian packages and PyPI wheels) and are skipped, with the reason, when that is not possible here
(not root, ``debootstrap qemu-user-static binfmt-support`` not installed, no network for a first
setup), unless ``BNC_DEPLOY_REQUIRE_AARCH64=1`` (CI sets it once it has installed them: then they
fail). The caching, the cleanup of an interrupted setup, the comparison and the one-line errors
are tested without the emulator.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from bnc_deploy.artifacts import load_artifact, save_artifact
from bnc_deploy.targets import aarch64, aarch64_root, apt_sources
from bnc_deploy.targets.aarch64_root import TargetSetupError
from bnc_deploy.testing import random_bnc_artifact, random_dnn_artifact
from bnc_deploy.validation import random_valid_codes
from bnc_deploy.verify import export_path

#: CI sets this after installing the Debian packages: then an unavailable target fails instead of skipping.
REQUIRED = os.environ.get("BNC_DEPLOY_REQUIRE_AARCH64", "") not in ("", "0")
IS_ROOT = os.geteuid() == 0

#: (format, options) of every BN export checked; exact ones must be bit-identical.
BN_EXPORTS = [
    ("onnx", {}),
    ("onnx", {"lowering": "onehot-fc"}),
    ("onnx", {"lowering": "gather-grouped"}),
    ("ort", {}),
    ("tflite", {}),
    ("tflite", {"lowering": "onehot-fc"}),
    ("tflite", {"lowering": "onehot-fc", "onehot": "relu"}),
    ("c", {}),
]
DNN_EXPORTS = [("onnx", {}), ("ort", {}), ("tflite", {})]


@pytest.fixture(scope="module")
def target_root():
    """The cached root (set up when missing); skip, or fail when required, if it cannot be."""
    try:
        return aarch64_root.setup(progress=None)
    except TargetSetupError as exc:
        if REQUIRED:
            pytest.fail(f"BNC_DEPLOY_REQUIRE_AARCH64 is set but the aarch64 target is unavailable: {exc}")
        pytest.skip(f"aarch64 target unavailable: {exc}")


def _export_all(artifact, folder: Path, stem: str, exports) -> list[Path]:
    """The .bnc and each export (every one through the verifier, so each passed on x86_64 first)."""
    folder.mkdir(parents=True, exist_ok=True)
    model = folder / f"{stem}.bnc"
    save_artifact(artifact, model)
    artifact = load_artifact(model)  # as bnc-export does: the exports name the saved file's hash
    files = [model]
    for i, (fmt, options) in enumerate(exports):
        ext = {"onnx": ".onnx", "ort": ".ort", "tflite": ".tflite", "c": ".h"}[fmt]
        files.append(export_path(artifact, folder / f"{stem}-{i}{ext}", fmt, **options))
    return files


def _assert_acceptance(report: dict, n_files: int) -> None:
    text = aarch64.format_report(report)
    assert report["machine"] == "aarch64", text
    assert len(report["files"]) == n_files
    for e in report["files"]:
        assert e["error"] is None and e["ok"], text
        assert e["check_set"] in ("ok", None), text
        if e["exact_expected"]:  # bit-identical with x86_64 and with the model file's NumPy reference
            assert e["exact"] and e["max_abs_score_diff"] == 0.0 and e["label_agreement"] == 1.0, text
            if not e["file"].endswith(".bnc"):
                assert e["reference"] is not None and e["reference"]["exact"], text
        else:  # float / ReLU: the same labels, the score difference reported (finite)
            assert e["label_mismatches"] == 0 and np.isfinite(e["max_abs_score_diff"]), text
    assert report["ok"], text


# -- without the emulator --------------------------------------------------------------------------
def test_compare_sees_one_ulp_and_one_label():
    s = np.array([[-1.5, -2.25], [-3.0, -0.5]], dtype=np.float32).astype(np.float64)
    labels = np.argmax(s, axis=1)
    assert aarch64._compare(s, labels, s.copy(), labels.copy())["exact"]
    nudged = s.copy()
    nudged[1, 0] = np.nextafter(np.float32(-3.0), np.float32(0))
    r = aarch64._compare(nudged, labels, s, labels)
    assert not r["exact"] and r["label_agreement"] == 1.0 and 0 < r["max_abs_score_diff"] < 1e-6
    r = aarch64._compare(s, labels[::-1].copy(), s, labels)
    assert not r["exact"] and r["label_mismatches"] == 2 and r["label_agreement"] == 0.0


def test_not_root_is_a_one_line_error(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(TargetSetupError, match="needs root"):
        aarch64_root.check_host()
    from bnc_deploy.cli.target import main

    with pytest.raises(SystemExit) as exc:
        main(["setup", "--target", "aarch64", "--cache", str(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("bnc-target: error:") and "root" in err[0]
    assert not any(tmp_path.iterdir())  # nothing written


def test_missing_tools_name_the_debian_packages(monkeypatch, tmp_path):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(TargetSetupError) as exc:
        aarch64_root.check_host()
    for package in aarch64_root.DEBIAN_PACKAGES:
        assert package in str(exc.value)


def test_run_without_a_root_says_to_set_up(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(aarch64_root, "check_host", lambda: {"qemu": "qemu (test)"})
    a = random_bnc_artifact(np.random.default_rng(1), d=3, n_classes=2, bits=3, int_bits=2)
    save_artifact(a, tmp_path / "m.bnc")
    assert aarch64.main(["run", str(tmp_path / "m.bnc"), "--cache", str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err
    assert "no aarch64 root" in err and "setup --target aarch64" in err


def _fake_build(calls):
    def build(folder, want, mirror, log, progress, timings):
        calls.append(folder)
        (folder / "venv").mkdir()
        timings["debootstrap"] = 0.0

    return build


@pytest.mark.usefixtures("debian_apt")
def test_setup_caches_by_recipe_and_reuses(monkeypatch, tmp_path):
    """The caching logic (the emulated steps replaced): build once, reuse, rebuild on a new recipe."""
    calls = []
    monkeypatch.setattr(aarch64_root, "check_host", lambda: {"qemu": "qemu (test)"})
    monkeypatch.setattr(aarch64_root, "_build", _fake_build(calls))
    monkeypatch.setattr(aarch64_root, "_smoke", lambda root: "aarch64")
    monkeypatch.setattr(aarch64_root, "_versions", lambda root: {"python": "3.11"})
    first = aarch64_root.setup(tmp_path, progress=None)
    assert not first["cached"] and len(calls) == 1 and aarch64_root.root_status(tmp_path) is None
    stamp = json.loads((tmp_path / "root" / aarch64_root.STAMP).read_text())
    assert stamp["recipe_sha256"] == aarch64_root.recipe_hash() and "numpy" in " ".join(stamp["recipe"]["pip"])
    second = aarch64_root.setup(tmp_path, progress=None)
    assert second["cached"] and len(calls) == 1
    monkeypatch.setattr(aarch64_root, "RECIPE_REVISION", aarch64_root.RECIPE_REVISION + 1)
    assert "another recipe" in aarch64_root.root_status(tmp_path)
    third = aarch64_root.setup(tmp_path, progress=None)
    assert not third["cached"] and len(calls) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [".lock", "root", "setup.log"]  # old root removed


@pytest.mark.usefixtures("debian_apt")
def test_interrupted_setup_leaves_no_root(monkeypatch, tmp_path):
    def broken(folder, *args):
        (folder / "usr").mkdir()
        raise KeyboardInterrupt

    monkeypatch.setattr(aarch64_root, "check_host", lambda: {"qemu": "qemu (test)"})
    monkeypatch.setattr(aarch64_root, "_build", broken)
    with pytest.raises(KeyboardInterrupt):
        aarch64_root.setup(tmp_path, progress=None)
    assert not (tmp_path / "root").exists() and not list(tmp_path.glob(".building-*"))
    assert aarch64_root.root_status(tmp_path).startswith("no aarch64 root")
    # leftovers of a setup killed outright (no cleanup ran) are removed by the next setup
    (tmp_path / ".building-killed" / "etc").mkdir(parents=True)
    calls = []
    monkeypatch.setattr(aarch64_root, "_build", _fake_build(calls))
    monkeypatch.setattr(aarch64_root, "_smoke", lambda root: "aarch64")
    monkeypatch.setattr(aarch64_root, "_versions", lambda root: {})
    aarch64_root.setup(tmp_path, progress=None)
    assert not (tmp_path / ".building-killed").exists() and (tmp_path / "root" / aarch64_root.STAMP).is_file()


@pytest.mark.skipif(not IS_ROOT, reason="mounting needs root")
def test_remove_tree_unmounts_first(tmp_path):
    import subprocess

    tree = tmp_path / "partial"
    (tree / "proc").mkdir(parents=True)
    # what an interrupted debootstrap or run may leave behind: /proc still mounted in the tree
    if subprocess.run(["mount", "-t", "proc", "proc", str(tree / "proc")], capture_output=True).returncode != 0:
        pytest.skip("this container does not allow mounting /proc")
    assert aarch64_root.mounts_under(tree) == [str((tree / "proc").resolve())]
    aarch64_root.remove_tree(tree)  # unmounts first: deletes nothing of the host's /proc
    assert not tree.exists() and Path("/proc/self/status").is_file() and not aarch64_root.mounts_under(tmp_path)


# -- the Debian mirror: --mirror, $BNC_DEPLOY_DEBIAN_MIRROR, the host's apt sources (no network, no root) ----------
@pytest.fixture
def debian_apt(monkeypatch, tmp_path_factory):
    """apt sources naming a Debian mirror, and no $BNC_DEPLOY_DEBIAN_MIRROR: setup never reads this host's /etc/apt."""
    etc = tmp_path_factory.mktemp("etc-apt")
    (etc / "sources.list").write_text("deb http://mirror.test/debian bookworm main\n")
    monkeypatch.setattr(apt_sources, "ETC_APT", etc)
    monkeypatch.delenv(aarch64_root.MIRROR_ENV, raising=False)
    return etc


ONE_LINE = """\
# deb http://commented.test/debian bookworm main
deb-src http://source.test/debian bookworm main
deb [arch=amd64 signed-by=/usr/share/keyrings/docker.gpg] https://download.docker.com/linux/debian bookworm stable
deb http://security.test/debian-security bookworm-security main
deb http://archive.ubuntu.com/ubuntu jammy main universe
deb cdrom:[Debian GNU/Linux 12.5.0 _Bookworm_ - Official amd64 DVD Binary-1]/ bookworm main

deb [ arch=arm64,amd64 trusted=yes ] http://mirror.test/debian bookworm main contrib  # the archive
deb http://second.test/debian bookworm main
"""

DEB822 = """\
# Debian's own, as a bookworm install writes it (but two URIs, one apt-only)
Types: deb deb-src
# a comment inside an entry does not end it
URIs: mirror+file:/etc/apt/mirrors/debian.list
  http://first.test/debian http://second.test/debian
Suites: bookworm bookworm-updates
Components: main non-free-firmware
Signed-By:
 -----BEGIN PGP PUBLIC KEY BLOCK-----
 .
 mQINBGPL0BUBEAC
 -----END PGP PUBLIC KEY BLOCK-----

Types: deb
URIs: http://security.test/debian-security
Suites: bookworm-security
Components: main
"""


def test_one_line_sources_options_and_comments():
    entries = apt_sources.parse_one_line_sources(ONE_LINE)
    assert [e["uris"][0] for e in entries] == [
        "http://source.test/debian",
        "https://download.docker.com/linux/debian",
        "http://security.test/debian-security",
        "http://archive.ubuntu.com/ubuntu",
        "cdrom:[Debian",
        "http://mirror.test/debian",
        "http://second.test/debian",
    ]
    docker, archive = entries[1], entries[5]
    assert docker["types"] == ["deb"] and docker["suites"] == ["bookworm"] and docker["components"] == ["stable"]
    assert archive["suites"] == ["bookworm"] and archive["components"] == ["main", "contrib"]  # comment dropped
    # deb-src, a third-party suite, -security, Ubuntu and a CD are not the Debian archive debootstrap can use
    assert apt_sources.debian_uri(entries) == "http://mirror.test/debian"
    assert apt_sources.parse_one_line_sources("deb [arch=amd64 http://x.test/debian bookworm main\ndeb\n") == []


def test_deb822_sources_fields_continuations_comments_and_several_uris():
    entries = apt_sources.parse_deb822_sources(DEB822)
    assert len(entries) == 2
    first = entries[0]
    assert first["types"] == ["deb", "deb-src"] and first["suites"] == ["bookworm", "bookworm-updates"]
    assert first["uris"] == [
        "mirror+file:/etc/apt/mirrors/debian.list",
        "http://first.test/debian",
        "http://second.test/debian",
    ]
    assert first["enabled"] and first["components"] == ["main", "non-free-firmware"]
    assert apt_sources.debian_uri(entries) == "http://first.test/debian"  # the first one debootstrap can fetch
    # Enabled: no turns an entry off; field names are case-insensitive
    off = "Types: deb\nURIs: http://off.test/debian\nSuites: bookworm\nComponents: main\nEnabled: no\n\n"
    on = "types: deb\nuris: http://on.test/debian\nsuites: stable\ncomponents: main\n"
    assert apt_sources.debian_uri(apt_sources.parse_deb822_sources(off + on)) == "http://on.test/debian"
    assert apt_sources.debian_uri(apt_sources.parse_deb822_sources(off)) is None


def test_host_mirror_is_the_first_debian_entry_in_apts_order(tmp_path):
    (tmp_path / "sources.list").write_text("deb http://archive.ubuntu.com/ubuntu jammy main\n")
    parts = tmp_path / "sources.list.d"
    parts.mkdir()
    (parts / "debian.sources.disabled").write_text(
        "Types: deb\nURIs: http://off.test/debian\nSuites: bookworm\nComponents: main\n"
    )  # not a name apt reads
    (parts / "z-local.list").write_text("deb http://z.test/debian bookworm main\n")
    (parts / "m-debian.sources").write_text(DEB822)
    assert [p.name for p in apt_sources.apt_source_files(tmp_path)] == [
        "sources.list",
        "m-debian.sources",
        "z-local.list",
    ]
    assert apt_sources.host_debian_mirror(tmp_path) == ("http://first.test/debian", parts / "m-debian.sources")
    (tmp_path / "sources.list").write_text("deb http://list.test/debian trixie main\n")
    assert apt_sources.host_debian_mirror(tmp_path) == ("http://list.test/debian", tmp_path / "sources.list")


def test_mirror_flag_then_environment_then_apt_sources_else_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.delenv(aarch64_root.MIRROR_ENV, raising=False)
    with pytest.raises(TargetSetupError) as exc:
        aarch64_root.debian_mirror(None, tmp_path)  # no sources.list, no sources.list.d
    message = str(exc.value)
    assert "--mirror URL" in message and "apt sources" in message and aarch64_root.MIRROR_ENV in message
    (tmp_path / "sources.list").write_text("deb http://apt.test/debian bookworm main\n")
    assert aarch64_root.debian_mirror(None, tmp_path)[0] == "http://apt.test/debian"
    monkeypatch.setenv(aarch64_root.MIRROR_ENV, "http://env.test/debian")
    assert aarch64_root.debian_mirror(None, tmp_path)[0] == "http://env.test/debian"
    assert aarch64_root.debian_mirror("http://flag.test/debian", tmp_path) == ("http://flag.test/debian", "--mirror")


def test_setup_without_a_mirror_stops_before_building(monkeypatch, tmp_path, tmp_path_factory, capsys):
    monkeypatch.setattr(apt_sources, "ETC_APT", tmp_path_factory.mktemp("empty-etc-apt"))
    monkeypatch.delenv(aarch64_root.MIRROR_ENV, raising=False)
    monkeypatch.setattr(aarch64_root, "check_host", lambda: {"qemu": "qemu (test)"})
    monkeypatch.setattr(aarch64_root, "_build", lambda *args: pytest.fail("built without a mirror"))
    with pytest.raises(TargetSetupError, match="no Debian mirror"):
        aarch64_root.setup(tmp_path, progress=None)
    assert not list(tmp_path.glob(".building-*")) and not (tmp_path / "root").exists()
    from bnc_deploy.cli.target import main

    with pytest.raises(SystemExit) as exit_:
        main(["setup", "--target", "aarch64", "--cache", str(tmp_path)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("bnc-target: error: no Debian mirror") and "--mirror URL" in err[0]


# -- emulated ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_random_models_on_aarch64(target_root, tmp_path):
    """Every exact export bit-identical with x86_64 and the reference; float/ReLU label-identical."""
    rng = np.random.default_rng(17)
    groups = {
        "nb3": (random_bnc_artifact(rng, d=7, n_classes=4, tan=False, bits=3, int_bits=2, n_check=30), BN_EXPORTS),
        "tan5": (random_bnc_artifact(rng, d=6, n_classes=5, tan=True, bits=5, int_bits=3, n_check=30), BN_EXPORTS),
        "tan-float": (
            random_bnc_artifact(rng, d=6, n_classes=5, tan=True, bits=None, n_check=30),
            [("onnx", {}), ("tflite", {})],
        ),
        "dnn-sign": (random_dnn_artifact(3, activation="sign", bits=2), DNN_EXPORTS),
        "dnn-relu": (random_dnn_artifact(4, activation="relu", bits=4), [("onnx", {}), ("tflite", {})]),
    }
    files, rows = [], {}
    for stem, (artifact, exports) in groups.items():
        x = random_valid_codes(artifact.cardinalities, 400, seed=5)
        for f in _export_all(artifact, tmp_path, stem, exports):
            files.append(f)
            rows[str(f)] = x
    report = aarch64.check_files(files, rows=rows)
    _assert_acceptance(report, len(files))
    by_name = {Path(e["file"]).name: e for e in report["files"]}
    assert by_name["nb3-7.h"]["runtime"] == "native"  # the C export, compiled by the root's gcc
    assert not by_name["tan-float-0.onnx"]["exact_expected"] and not by_name["tan-float.bnc"]["exact_expected"]
    assert all(e["n_rows"] == 400 for e in report["files"])


@pytest.mark.slow
def test_cli_and_profile_columns(target_root, tmp_path, capsys):
    a = random_bnc_artifact(np.random.default_rng(8), d=5, n_classes=3, tan=True, bits=4, int_bits=2)
    files = [str(f) for f in _export_all(a, tmp_path, "m", [("onnx", {}), ("tflite", {})])]
    from bnc_deploy.cli.profile import main as profile
    from bnc_deploy.cli.target import main as target

    assert target(["run", "--target", "aarch64", *files, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [e["ok"] for e in report["files"]] == [True] * 3
    assert all(set(aarch64.FILE_KEYS) <= set(e) for e in report["files"])
    assert profile([*files, "--target", "aarch64", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["target"] for r in rows] == ["aarch64"] * 3
    for r in rows:
        assert r["target_ok"] and r["target_exact"] and r["target_max_abs_score_diff"] == 0.0
        assert r["latency_us_p50_batch1"] is None and r["n_ops"] == a.n_ops  # analytic ops, no latency
    assert rows[1]["target_reference_exact"] is True


def _train(tmp_path, data: str, *args) -> Path:
    from bnc_deploy.cli.train import main as train

    out = tmp_path / f"{data}-{'-'.join(a.lstrip('-') for a in args)}.bnc"
    assert train(["--data", data, *args, "-o", str(out), "--quiet"]) == 0
    return out


@pytest.mark.slow
@pytest.mark.shared_data
@pytest.mark.parametrize("data", ["letter", "usps"])
def test_trained_models_on_every_test_row(data, target_root, tmp_path, shared_datasets, monkeypatch):
    """Acceptance: letter and usps NB/TAN 3-bit (every exact export), a float TAN and sign/ReLU FC nets,
    on every test row: bit-identical with x86_64 and the reference where exact, label-identical otherwise."""
    monkeypatch.setenv("BNC_DEPLOY_DATA_DIR", str(shared_datasets))
    quick = ["--init", "ml", "--epochs", "0", "--bits", "3", "--int-bits", "2"]
    models = {
        "nb": (_train(tmp_path, data, "--model", "nb", *quick), BN_EXPORTS),
        "tan": (_train(tmp_path, data, "--model", "tan", "--structure", "chow-liu", *quick), BN_EXPORTS),
        "tan-float": (
            _train(tmp_path, data, "--model", "tan", "--structure", "chow-liu", "--init", "ml", "--epochs", "0"),
            [("onnx", {}), ("tflite", {})],
        ),
        "sign": (
            _train(
                tmp_path,
                data,
                "--model",
                "fc",
                "--activation",
                "sign",
                "--weight-bits",
                "1",
                "--batch-norm",
                "--hidden",
                "32",
                "--epochs",
                "1",
            ),
            DNN_EXPORTS,
        ),
        "relu": (
            _train(
                tmp_path,
                data,
                "--model",
                "fc",
                "--activation",
                "relu",
                "--weight-bits",
                "4",
                "--hidden",
                "32",
                "--epochs",
                "1",
            ),
            [("onnx", {}), ("tflite", {})],
        ),
    }
    files = []
    for stem, (model, exports) in models.items():
        files += _export_all(load_artifact(model), tmp_path / "exports", stem, exports)
    report = aarch64.check_files(files, data=aarch64.load_data(data, None))
    print(aarch64.format_report(report))
    _assert_acceptance(report, len(files))
    n_test = len(aarch64.load_data(data, None)[0])
    assert all(e["n_rows"] == n_test and e["test_error"] is not None for e in report["files"])


@pytest.mark.usefixtures("debian_apt")
def test_a_finished_debootstrap_is_kept_when_a_later_step_fails(monkeypatch, tmp_path):
    """pip failing (no PyPI, say) keeps the debootstrapped base (no stamp: never taken for a root);
    the next setup starts from it instead of downloading and unpacking Debian again."""
    want = aarch64_root.recipe()
    calls = []

    def debootstrapped_then_pip_fails(folder, *args):
        calls.append(aarch64_root._base_marker(folder))
        (folder / aarch64_root.BASE_MARKER).write_text(aarch64_root.base_hash(want))
        (folder / "venv").mkdir()
        raise TargetSetupError("pip install inside the root failed")

    monkeypatch.setattr(aarch64_root, "check_host", lambda: {"qemu": "qemu (test)"})
    monkeypatch.setattr(aarch64_root, "_build", debootstrapped_then_pip_fails)
    with pytest.raises(TargetSetupError, match="pip"):
        aarch64_root.setup(tmp_path, progress=None)
    assert (tmp_path / "base" / aarch64_root.BASE_MARKER).is_file() and not (tmp_path / "root").exists()
    assert aarch64_root.root_status(tmp_path).startswith("no aarch64 root")
    monkeypatch.setattr(apt_sources, "ETC_APT", tmp_path / "no-apt")  # a kept base needs no mirror
    with pytest.raises(TargetSetupError, match="pip"):
        aarch64_root.setup(tmp_path, progress=None)
    assert calls == [None, aarch64_root.base_hash(want)]  # the second try got the kept base, its venv removed
