"""--api-key-file: a bearer token on every route but liveness, compared in constant time; 401 otherwise."""

from __future__ import annotations

import pytest

pytest.importorskip("starlette", reason="bnc-serve needs the 'serve' extra")
pytest.importorskip("starlette.testclient", reason="Starlette's TestClient needs httpx2 (extra 'test')")

import serve_support as ss
from starlette.testclient import TestClient

from bnc_deploy.errors import ConfigError
from bnc_deploy.serve.app import create_app
from bnc_deploy.serve.auth import load_api_keys, token_ok
from bnc_deploy.serve.repository import ModelRepository

KEY = "k3y-0123456789abcdef"
OTHER = "second-key-fedcba9876543210"


def test_token_ok():
    keys = [KEY.encode(), OTHER.encode()]
    assert token_ok(f"Bearer {KEY}", keys) and token_ok(f"bearer {OTHER}".encode(), keys)
    assert not token_ok(None, keys)
    assert not token_ok(KEY, keys)  # no scheme
    assert not token_ok(f"Basic {KEY}", keys)
    assert not token_ok(f"Bearer {KEY[:-1]}", keys) and not token_ok(f"Bearer {KEY}x", keys)
    assert not token_ok("Bearer ", keys) and not token_ok("Bearer \u00e9\u4e2d", keys)


def test_load_api_keys(tmp_path):
    f = tmp_path / "keys"
    f.write_text(f"# comment\n\n  {KEY}  \n{OTHER}\n")
    assert load_api_keys(f) == [KEY.encode(), OTHER.encode()]
    f.write_text("short\n")
    with pytest.raises(ConfigError, match="line 1: a key must be at least 16"):
        load_api_keys(f)
    f.write_text("# nothing\n")
    with pytest.raises(ConfigError, match="no API keys"):
        load_api_keys(f)
    with pytest.raises(ConfigError, match="cannot read"):
        load_api_keys(tmp_path / "missing")


def test_every_route_but_liveness_needs_the_token(tmp_path):
    ss.build_repository(tmp_path / "repo", tflite=False)
    repo = ModelRepository(tmp_path / "repo")
    repo.load_all()
    routes = [
        ("GET", "/v2/health/ready"),
        ("GET", "/v2"),
        ("GET", "/v2/models/nb_onnx"),
        ("GET", "/v2/models/nb_onnx/ready"),
        ("POST", "/v2/models/nb_onnx/infer"),
        ("POST", "/v2/repository/index"),
        ("POST", "/v2/repository/models/nb_onnx/load"),
        ("POST", "/v2/repository/models/nope/unload"),
        ("GET", "/metrics"),
        ("GET", "/nope"),
    ]
    with TestClient(create_app(repo, api_keys=[KEY.encode()], access_log=False)) as client:
        assert client.get("/v2/health/live").status_code == 200
        for method, path in routes:
            for headers in ({}, {"Authorization": "Bearer wrong-key-0123456789"}, {"Authorization": KEY}):
                r = client.request(method, path, headers=headers)
                assert r.status_code == 401, (method, path, headers)
                assert r.headers["www-authenticate"] == "Bearer" and "bearer token" in r.json()["error"]
        good = {"Authorization": f"Bearer {KEY}"}
        assert client.get("/v2/health/ready", headers=good).status_code == 200
        assert client.get("/v2/models/nb_onnx", headers=good).status_code == 200
        assert client.post("/v2/repository/index", headers=good).status_code == 200
        assert client.get("/metrics", headers=good).status_code == 200
    repo.close()
