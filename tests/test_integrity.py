"""Tamper evidence of exported files (bnc_deploy.formats.integrity): seal on export, check on load.

Every exported ONNX/TFLite file (BN and DNN) carries ``integrity`` = its SHA-256 (or HMAC-SHA256
under a user key) in its metadata; runtimes and bnc-profile refuse a file modified after export
with one RuntimeLoadError line, unless told to skip the check.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from bnc_deploy.artifacts import save_artifact  # noqa: E402
from bnc_deploy.errors import ConfigError, RuntimeLoadError  # noqa: E402
from bnc_deploy.exporters.base import exporter_for, exporters  # noqa: E402
from bnc_deploy.formats import integrity  # noqa: E402
from bnc_deploy.runtimes.base import load_runtime  # noqa: E402
from bnc_deploy.testing import random_bnc_artifact, random_dnn_artifact, runtimes_for  # noqa: E402
from bnc_deploy.verify import build, export_file, verification_rows  # noqa: E402

MODIFIED = "was modified after export"
KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))


def _available(kind: str, format: str) -> bool:
    if (kind, format) not in exporters():
        return False
    return bool(runtimes_for(exporter_for(kind, format).extension))


CASES = [
    pytest.param(
        kind,
        fmt,
        id=f"{kind}-{fmt}",
        marks=pytest.mark.skipif(not _available(kind, fmt), reason=f"no {kind} {fmt} exporter/runtime"),
    )
    for kind in ("bnc", "dnn")
    for fmt in ("onnx", "tflite")
]


def artifact_of(kind: str):
    if kind == "bnc":
        return random_bnc_artifact(np.random.default_rng(11), d=5, n_classes=3, tan=True, bits=3)
    return random_dnn_artifact(3)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(kind, format) -> (artifact, path, report) of a sealed export; built on first use."""
    root = tmp_path_factory.mktemp("integrity")
    cache: dict = {}

    def get(kind: str, format: str):
        if (kind, format) not in cache:
            artifact = artifact_of(kind)
            path = root / f"{kind}{exporter_for(kind, format).extension}"
            cache[kind, format] = (artifact, path, export_file(artifact, path, format))
        return cache[kind, format]

    return get


def copy_with(tmp_path: Path, src: Path, data: bytes, name: str = "edited") -> Path:
    path = tmp_path / f"{name}{src.suffix}"
    path.write_bytes(data)
    return path


def seal_offsets(data: bytes) -> tuple[int, int]:
    """(start of the field's value, start of its 64 hex digits) in a sealed file."""
    found = integrity.find_seal(data)
    assert found is not None
    return found.start - len(found.scheme) - 1, found.start


# -- round trip --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind,format", CASES)
def test_export_is_sealed_and_loads_in_every_runtime(exported, kind, format):
    artifact, path, report = exported(kind, format)
    data = path.read_bytes()
    assert report.integrity == "sha256" and report.sha256 is not None
    assert data.count(integrity.MARKER) == 1 and integrity.PLACEHOLDER.encode() not in data
    found = integrity.verify_bytes(data)
    assert found.scheme == "sha256" and found.sealed
    assert integrity.describe(data) == {"scheme": "sha256", "digest": found.digest}
    x, _ = verification_rows(artifact, n_random=8)
    for runtime in runtimes_for(path.suffix):
        rt = load_runtime(path, runtime, threads=1)
        assert rt.metadata["integrity"] == f"sha256:{found.digest}", runtime
        rt.run(x)


@pytest.mark.parametrize("kind,format", CASES)
def test_exports_are_deterministic(exported, kind, format, tmp_path):
    artifact, path, _ = exported(kind, format)
    first, _ = build(artifact, format)
    assert build(artifact, format)[0] == first == path.read_bytes()
    again = export_file(artifact, tmp_path / path.name, format)
    assert (tmp_path / path.name).read_bytes() == first and again.sha256 == exported(kind, format)[2].sha256


def test_seal_keeps_the_length_and_only_touches_the_field(exported):
    artifact, path, _ = exported("bnc", "onnx")
    raw = exporter_for("bnc", "onnx").build(artifact)
    sealed = path.read_bytes()
    assert len(raw) == len(sealed)
    begin, _ = seal_offsets(sealed)
    differ = [i for i in range(len(raw)) if raw[i] != sealed[i]]
    assert differ and begin <= min(differ) and max(differ) < begin + integrity.VALUE_WIDTH


# -- edits are detected ------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind,format", CASES)
def test_a_changed_byte_anywhere_is_detected(exported, kind, format, tmp_path):
    _, path, _ = exported(kind, format)
    data = path.read_bytes()
    begin, hex_start = seal_offsets(data)
    marker = data.find(integrity.MARKER)
    positions = sorted(
        {
            0,
            5,
            8,
            len(data) // 3,
            len(data) // 2,
            len(data) - 1,
            marker,
            marker + 1,
            marker + 5,
            marker + len(integrity.MARKER) - 1,  # key and quotes
            begin,
            begin + 3,  # scheme name
            hex_start,
            hex_start + 31,
            hex_start + 63,  # digest
            begin + integrity.VALUE_WIDTH - 1,
            begin + integrity.VALUE_WIDTH,
        }
    )  # padding, closing quote
    runtime = runtimes_for(path.suffix)[0]
    for pos in positions:
        for new in {data[pos] ^ 0x01, data[pos] ^ 0x80, ord("0") if data[pos] != ord("0") else ord("1")}:
            edited = bytearray(data)
            edited[pos] = new
            target = copy_with(tmp_path, path, bytes(edited), f"edit{pos}")
            with pytest.raises(RuntimeLoadError) as info:
                load_runtime(target, runtime)
            message = str(info.value)
            assert MODIFIED in message and str(target) in message and "\n" not in message, (pos, message)


def test_an_edited_table_initializer_and_cardinalities_are_refused(exported, tmp_path):
    """The issue's cases: an edited table entry runs silently, an edited cardinalities initializer
    defeats the in-graph guard. Both are now refused on load (the check covers every byte)."""
    onnx = pytest.importorskip("onnx")
    from onnx import numpy_helper

    _, path, _ = exported("bnc", "onnx")
    model = onnx.load(str(path))
    names = [t.name for t in model.graph.initializer]
    for name in [n for n in names if "card" in n or "max_code" in n][:1] + [names[0]]:
        edited = onnx.load(str(path))
        init = next(t for t in edited.graph.initializer if t.name == name)
        values = numpy_helper.to_array(init).copy()
        values.flat[0] = values.flat[0] + 1
        init.CopyFrom(numpy_helper.from_array(values, name))
        target = tmp_path / f"{name}.onnx"
        onnx.save(edited, str(target))
        with pytest.raises(RuntimeLoadError, match=f"{re.escape(target.name)}: the file {MODIFIED}"):
            load_runtime(target)


def test_skip_flag_loads_an_edited_file(exported, tmp_path):
    _, path, _ = exported("bnc", "onnx")
    data = bytearray(path.read_bytes())
    _, hex_start = seal_offsets(bytes(data))
    data[hex_start] = ord("a") if data[hex_start] != ord("a") else ord("b")  # a harmless edit: the digest itself
    target = copy_with(tmp_path, path, bytes(data))
    with pytest.raises(RuntimeLoadError, match=MODIFIED):
        load_runtime(target)
    rt = load_runtime(target, verify_integrity=False)
    assert rt.metadata["integrity"] == "sha256:" + bytes(data[hex_start : hex_start + 64]).decode()
    assert rt.predict(np.zeros((1, rt.n_features), dtype=np.int64)).shape == (1,)


def test_unsealed_exporter_bytes_are_refused(exported, tmp_path):
    artifact, path, _ = exported("bnc", "onnx")
    target = copy_with(tmp_path, path, exporter_for("bnc", "onnx").build(artifact), "unsealed")
    with pytest.raises(RuntimeLoadError, match="never sealed"):
        load_runtime(target)
    assert load_runtime(target, verify_integrity=False).metadata["integrity"] == integrity.PLACEHOLDER.strip()


def test_seal_refuses_bytes_without_a_placeholder_or_already_sealed(exported):
    from bnc_deploy.errors import ExportError

    _, path, _ = exported("bnc", "onnx")
    with pytest.raises(ExportError, match="placeholder"):
        integrity.seal(path.read_bytes())
    with pytest.raises(ExportError, match="placeholder"):
        integrity.seal(b"no metadata here")


# -- signing with a key ------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind,format", [CASES[0], CASES[1]])
def test_signed_file_needs_its_key(exported, kind, format, tmp_path):
    artifact, plain, _ = exported(kind, format)
    path = tmp_path / f"signed{plain.suffix}"
    report = export_file(artifact, path, format, key=KEY)
    assert report.integrity == "hmac-sha256"
    data = path.read_bytes()
    assert integrity.describe(data)["scheme"] == "hmac-sha256"
    assert len(data) == len(plain.read_bytes())
    rt = load_runtime(path, key=KEY)
    assert rt.metadata["integrity"].startswith("hmac-sha256:")
    with pytest.raises(RuntimeLoadError, match=r"signed \(hmac-sha256\); pass its key"):
        load_runtime(path)
    with pytest.raises(RuntimeLoadError, match="signature mismatch"):
        load_runtime(path, key=OTHER_KEY)
    with pytest.raises(RuntimeLoadError, match="not signed"):
        load_runtime(plain, key=KEY)  # an unkeyed seal (anyone can recompute it) does not pass for a signature
    edited = bytearray(data)
    edited[len(edited) // 2] ^= 0x10
    with pytest.raises(RuntimeLoadError, match=MODIFIED):
        load_runtime(copy_with(tmp_path, path, bytes(edited)), key=KEY)
    assert build(artifact, format, key=KEY)[0] == data  # deterministic with a key too


def test_keys_must_be_long_enough(exported, tmp_path):
    _, path, _ = exported("bnc", "onnx")
    with pytest.raises(ConfigError, match="at least 32 bytes"):
        load_runtime(path, key=b"short")
    with pytest.raises(ConfigError, match="must be bytes"):
        load_runtime(path, key="a string key that is long enough......")
    short = tmp_path / "short.key"
    short.write_bytes(b"x" * 31)
    with pytest.raises(ConfigError, match="short.key: .*at least 32 bytes"):
        integrity.read_key(short)
    with pytest.raises(ConfigError, match="missing.key: cannot read"):
        integrity.read_key(tmp_path / "missing.key")
    good = tmp_path / "good.key"
    good.write_bytes(KEY)
    assert integrity.read_key(good) == KEY


# -- files exported before seals existed -------------------------------------------------------------------
@pytest.mark.parametrize("kind,format", CASES)
def test_legacy_file_without_the_field_loads(exported, kind, format, tmp_path, monkeypatch):
    import bnc_deploy.formats.bnc as bnc_formats
    import bnc_deploy.formats.dnn as dnn_formats

    artifact, path, _ = exported(kind, format)
    for module in (bnc_formats, dnn_formats):  # an exporter of the previous release: no placeholder
        monkeypatch.setattr(module, "with_integrity_placeholder", lambda meta: meta)
    legacy = exporter_for(kind, format).build(artifact)
    monkeypatch.undo()
    assert integrity.MARKER not in legacy and integrity.describe(legacy) == {"scheme": "none", "digest": None}
    target = copy_with(tmp_path, path, legacy, "legacy")
    x, _ = verification_rows(artifact, n_random=8)
    for runtime in runtimes_for(path.suffix):
        rt = load_runtime(target, runtime)
        assert rt.metadata["integrity"] == "none"
        rt.run(x)
    with pytest.raises(RuntimeLoadError, match="not signed"):
        load_runtime(target, key=KEY)


def test_model_files_keep_their_own_hash(tmp_path):
    artifact = artifact_of("bnc")
    save_artifact(artifact, tmp_path / "m.bnc")
    rt = load_runtime(tmp_path / "m.bnc", verify_integrity=True)
    assert "integrity" not in rt.metadata  # .bnc files carry content_sha256, checked by load_artifact


# -- command-line tools ------------------------------------------------------------------------------------
def _one_line_exit_2(capsys, main, argv, message, prog):
    try:
        code = main(argv)  # bnc-export returns its status for some errors, cli_main raises SystemExit(2)
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{prog}: error:") and err.count("\n") == 1 and message in err, err
    assert "Traceback" not in err
    return err


def test_bnc_profile_refuses_an_edited_file(exported, tmp_path, capsys):
    from bnc_deploy.cli.profile import main

    _, path, _ = exported("bnc", "onnx")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x04
    target = copy_with(tmp_path, path, bytes(data))
    quick = ["--no-latency", "--json"]
    err = _one_line_exit_2(capsys, main, [str(target), *quick], f"{target}: the file {MODIFIED}", "bnc-profile")
    assert "--no-integrity-check" in err
    # Skipped on request: the graph counter and the runtime see the edited file (which may or may not load).
    try:
        code = main([str(target), *quick, "--no-integrity-check"])
    except SystemExit as exc:
        code = exc.code
        assert MODIFIED not in capsys.readouterr().err
    assert code in (0, 2)
    capsys.readouterr()
    assert main([str(path), *quick]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(r["file"] == str(path) for r in rows)


def test_bnc_profile_and_export_with_a_key(exported, tmp_path, capsys):
    from bnc_deploy.cli.export import main as export_main
    from bnc_deploy.cli.profile import main as profile_main

    artifact, _, _ = exported("bnc", "onnx")
    model = tmp_path / "m.bnc"
    save_artifact(artifact, model)
    key = tmp_path / "k.key"
    key.write_bytes(KEY)
    out = tmp_path / "signed.onnx"
    assert export_main([str(model), "--format", "onnx", "-o", str(out), "--sign-key", str(key), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["integrity"] == "hmac-sha256" and report["published"]
    quick = ["--no-latency", "--json"]
    assert profile_main([str(model), str(out), *quick, "--key", str(key)]) == 0
    capsys.readouterr()
    _one_line_exit_2(capsys, profile_main, [str(out), *quick], "pass its key", "bnc-profile")
    wrong = tmp_path / "wrong.key"
    wrong.write_bytes(OTHER_KEY)
    _one_line_exit_2(capsys, profile_main, [str(out), *quick, "--key", str(wrong)], "signature mismatch", "bnc-profile")
    assert profile_main([str(out), *quick, "--no-integrity-check"]) == 0
    capsys.readouterr()
    plain = tmp_path / "plain.onnx"
    assert export_main([str(model), "--format", "onnx", "-o", str(plain), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["integrity"] == "sha256"
    short = tmp_path / "short.key"
    short.write_bytes(b"123")
    _one_line_exit_2(
        capsys,
        export_main,
        [str(model), "--format", "onnx", "-o", str(tmp_path / "x.onnx"), "--sign-key", str(short)],
        "at least 32 bytes",
        "bnc-export",
    )
    assert not (tmp_path / "x.onnx").exists()


def test_bnc_profile_notes_a_legacy_file(exported, tmp_path, capsys, monkeypatch):
    import bnc_deploy.formats.bnc as bnc_formats
    from bnc_deploy.cli.profile import main

    artifact, path, _ = exported("bnc", "onnx")
    monkeypatch.setattr(bnc_formats, "with_integrity_placeholder", lambda meta: meta)
    legacy = copy_with(tmp_path, path, exporter_for("bnc", "onnx").build(artifact), "legacy")
    monkeypatch.undo()
    assert main([str(legacy), "--no-latency", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert any("no integrity digest" in n for r in rows for n in r["notes"])


# -- the module itself -------------------------------------------------------------------------------------
def test_integrity_module_is_standard_library_only():
    source = Path(integrity.__file__).read_text()
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module if node.module.startswith("bnc_deploy") else node.module.split(".")[0])
    assert imported <= {"__future__", "hashlib", "hmac", "os", "re", "dataclasses", "pathlib", "bnc_deploy.errors"}
    assert "threat model" in integrity.__doc__.lower() and "attacker" in integrity.__doc__
