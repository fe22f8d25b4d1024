"""The environment of programs run in the aarch64 root (:mod:`bnc_deploy.targets.aarch64_root`).

``chroot ROOT /usr/bin/env -i ...``: a clean environment (:data:`ROOT_ENV`), nothing of the host's
leaks in, except the network settings ``pip`` inside the root gets at setup (proxies, a private
index, the host's CA bundle: :func:`pip_network_env`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

#: The host's network settings pip inside the root gets (proxies, a private index); nothing else leaks in.
PIP_NETWORK_VARS = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "PIP_INDEX_URL",
    "PIP_DEFAULT_TIMEOUT",
)
#: Where the host's CA bundle is copied in the root (for pip only).
HOST_CA_IN_ROOT = "/etc/ssl/certs/bnc-deploy-host-ca.crt"


def pip_network_env(build: Path) -> dict:
    """Proxy/index variables of the host, and the host's CA bundle for pip (``PIP_CERT``): a network
    that intercepts TLS with its own CA (added to the host's trust store) is trusted inside too;
    Debian's stock ca-certificates in the root do not know it."""
    env = {k: os.environ[k] for k in PIP_NETWORK_VARS if os.environ.get(k)}
    bundle = next(
        (
            c
            for c in (os.environ.get("PIP_CERT"), os.environ.get("SSL_CERT_FILE"), "/etc/ssl/certs/ca-certificates.crt")
            if c and os.path.isfile(c)
        ),
        None,
    )
    if bundle is not None:
        shutil.copyfile(bundle, build / HOST_CA_IN_ROOT.lstrip("/"))
        env["PIP_CERT"] = HOST_CA_IN_ROOT
    return env


#: The environment of programs run in the root (nothing of the host's leaks in).
ROOT_ENV = {
    "PATH": "/venv/bin:/usr/local/bin:/usr/bin:/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
    "TF_CPP_MIN_LOG_LEVEL": "2",
    "PYTHONDONTWRITEBYTECODE": "1",
}


def chroot_argv(root: Path, argv: list[str], env: dict | None = None) -> list[str]:
    merged = {**ROOT_ENV, **(env or {})}
    return ["chroot", str(root), "/usr/bin/env", "-i", *(f"{k}={v}" for k, v in merged.items()), *argv]
