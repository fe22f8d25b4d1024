"""Signed model files (``bnc-export --sign-key``): the server's key (``--key-file``) and a model's own
``DIR/<name>.key``. A signed file loads only with its key; without a key, with another key, or an
unsigned file under a key, it is refused with a reason in the index that says which key was used
(or how to give one), and the version serving before keeps serving. A key file others may read is
refused; a key added or changed is picked up by polling."""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest

pytest.importorskip("starlette", reason="bnc-serve needs the 'serve' extra")

import serve_support as ss

from bnc_deploy.serve.model import ModelLoadError, file_version
from bnc_deploy.serve.repository import ModelRepository
from bnc_deploy.testing import random_bnc_artifact
from bnc_deploy.verify import export_path

KEY = bytes(range(32))
OTHER = bytes(range(100, 140))
SERVER_KEY = "the server's key (--key-file)"


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, bytes]:
    """ONNX bytes: ``a``/``b`` signed with KEY, ``a_other`` signed with OTHER, ``a_plain`` unsigned."""
    folder = tmp_path_factory.mktemp("signed")
    rng = np.random.default_rng(6)
    arts = {
        t: random_bnc_artifact(rng, n_classes=3, tan=False, bits=3, int_bits=2, cardinalities=[3, 4, 2]) for t in "ab"
    }
    plan = {"a": ("a", KEY), "b": ("b", KEY), "a_other": ("a", OTHER), "a_plain": ("a", None)}
    return {
        name: export_path(arts[art], folder / f"{name}.onnx", "onnx", **({"key": key} if key else {})).read_bytes()
        for name, (art, key) in plan.items()
    }


def put(path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp"
    tmp.write_bytes(data)
    os.replace(tmp, path)


def key_file(path, key: bytes, mode: int = 0o600) -> None:
    path.write_bytes(key)
    path.chmod(mode)


def reasons(repo: ModelRepository) -> dict[str, str]:
    return {e["name"]: e["reason"] for e in repo.index()}


def test_the_server_key_loads_signed_files_and_refuses_the_others(tmp_path, files):
    put(tmp_path / "signed.onnx", files["a"])
    put(tmp_path / "plain.onnx", files["a_plain"])
    put(tmp_path / "other.onnx", files["a_other"])
    repo = ModelRepository(tmp_path, key=KEY)
    repo.load_all()
    state = {e["name"]: e["state"] for e in repo.index()}
    assert state == {"other": "UNAVAILABLE", "plain": "UNAVAILABLE", "signed": "READY"}
    why = reasons(repo)
    assert "not signed" in why["plain"] and why["plain"].endswith(f"(checked with {SERVER_KEY})")
    assert "signature mismatch" in why["other"] and why["other"].endswith(f"(checked with {SERVER_KEY})")
    repo.close()


def test_a_signed_file_without_a_key_is_refused_with_how_to_give_one(tmp_path, files):
    put(tmp_path / "m.onnx", files["a"])
    repo = ModelRepository(tmp_path)
    repo.load_all()
    [entry] = repo.index()
    assert entry["state"] == "UNAVAILABLE" and "is signed (hmac-sha256)" in entry["reason"]
    assert entry["reason"].endswith("(no key for 'm': give bnc-serve --key-file FILE, or put it in m.key)")
    repo.close()


def test_a_file_signed_with_another_key_keeps_the_previous_version_serving(tmp_path, files):
    put(tmp_path / "m.onnx", files["a"])
    repo = ModelRepository(tmp_path, key=KEY)
    repo.load_all()
    served = repo.get("m")
    put(tmp_path / "m.onnx", files["a_other"])  # replaced in place by a file signed with another key
    with pytest.raises(ModelLoadError, match="signature mismatch"):
        repo.load("m")
    [entry] = repo.index()
    assert entry["state"] == "READY" and entry["version"] == file_version(files["a"])
    assert entry["reason"].startswith(f"load failed, still serving version {served.version}: ")
    assert "HMAC-SHA256 signature mismatch" in entry["reason"]
    assert repo.get("m") is served
    put(tmp_path / "m.onnx", files["b"])  # correctly signed: replaces it
    assert repo.load("m").version == file_version(files["b"])
    repo.close()


def test_a_models_own_key_file_wins_and_polling_follows_it(tmp_path, files):
    put(tmp_path / "own.onnx", files["a_other"])
    key_file(tmp_path / "own.key", OTHER)
    put(tmp_path / "server.onnx", files["a"])
    put(tmp_path / "ver" / "2" / "model.onnx", files["a_other"])  # Triton's layout: DIR/<name>.key too
    key_file(tmp_path / "ver.key", OTHER)
    repo = ModelRepository(tmp_path, key=KEY)
    repo.load_all()
    assert all(e["state"] == "READY" for e in repo.index()), repo.index()
    served = repo.get("own")
    (tmp_path / "own.key").chmod(0o644)  # readable by others: refused, the loaded version keeps serving
    repo.poll_once()
    why = reasons(repo)["own"]
    assert why.startswith(f"load failed, still serving version {served.version}: key file own.key is accessible")
    assert why.endswith("chmod 600 own.key") and repo.get("own") is served
    (tmp_path / "own.key").unlink()  # now the server's key: the file is signed with another
    repo.poll_once()
    assert "signature mismatch" in reasons(repo)["own"] and reasons(repo)["own"].endswith(
        f"(checked with {SERVER_KEY})"
    )
    key_file(tmp_path / "own.key", OTHER)
    put(tmp_path / "own.onnx", files["a_other"])  # same content again: a new file, same version
    repo.poll_once()
    assert reasons(repo)["own"] == "" and repo.get("own") is served
    key_file(tmp_path / "own.key", KEY[:16])
    put(tmp_path / "own.onnx", files["b"])
    repo.poll_once()
    assert "key file own.key: an integrity key needs at least 32 bytes" in reasons(repo)["own"]
    repo.close()


def test_bnc_serve_key_file_flag(tmp_path, files):
    short = tmp_path / "short.key"
    short.write_bytes(b"x" * 8)
    for args, match in [
        (["--key-file", str(tmp_path / "none.key")], "--key-file"),
        (["--key-file", str(short)], "at least 32 bytes"),
        (["--version-policy", "latest:0"], "--version-policy: bad version policy"),
    ]:
        r = subprocess.run(
            [*ss.BNC_SERVE, "--repository", str(tmp_path), *args], capture_output=True, text=True, timeout=120
        )
        assert r.returncode == 2 and match in r.stderr.splitlines()[-1], r.stderr
    repo = tmp_path / "repo"
    put(repo / "m.onnx", files["a"])
    put(repo / "plain.onnx", files["a_plain"])
    key = tmp_path / "server.key"
    key.write_bytes(KEY)
    with ss.start_server(repo, args=["--key-file", key]) as server:
        status, index = server.json("POST", "/v2/repository/index")
        assert status == 200
        assert [(e["name"], e["state"]) for e in index] == [("m", "READY"), ("plain", "UNAVAILABLE")]
        assert "not signed" in index[1]["reason"]
        assert server.stop() == 0, server.log()
