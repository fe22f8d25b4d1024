"""Bearer-token auth (``--api-key-file``): every route but liveness needs ``Authorization: Bearer <key>``.

The key file holds one key per line (blank lines and lines starting with ``#`` are ignored;
surrounding whitespace is stripped). A request's token is compared with every key in constant
time (:func:`hmac.compare_digest`, and every key is compared, so the time does not tell which key
or how much of it matched).
"""

from __future__ import annotations

import hmac
from pathlib import Path

from bnc_deploy.errors import ConfigError

#: Shortest key accepted (a short key is guessable whatever the compare).
MIN_KEY_CHARS = 16


def load_api_keys(path) -> list[bytes]:
    """The keys of ``path``; ConfigError naming the file when it is unreadable, empty, or a key is short."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p}: cannot read the API key file ({exc})") from None
    keys = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if len(line) < MIN_KEY_CHARS or any(c.isspace() for c in line):
            raise ConfigError(f"{p}: line {number}: a key must be at least {MIN_KEY_CHARS} characters without spaces")
        keys.append(line.encode())
    if not keys:
        raise ConfigError(f"{p}: no API keys in the file")
    return keys


def token_ok(authorization, keys) -> bool:
    """Whether an ``Authorization`` header value (str or bytes; None when absent) carries one of ``keys``."""
    if authorization is None:
        return False
    if isinstance(authorization, str):
        try:
            authorization = authorization.encode("latin-1")
        except UnicodeEncodeError:
            return False
    scheme, _, token = authorization.strip().partition(b" ")
    if scheme.lower() != b"bearer":
        return False
    token = token.strip()
    ok = False
    for key in keys:
        ok |= hmac.compare_digest(token, key)  # no early exit: every key is compared
    return ok
