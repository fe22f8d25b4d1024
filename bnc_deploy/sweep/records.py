"""Configuration records of a sweep: their keys, defaults, values and content-hash ids.

Contract
--------
* A **configuration record** is a flat dict of JSON scalars. Its keys are the names in
  :data:`KEYS`: the fields of ``bnc_deploy.train.bnc.TrainConfig`` (BN models ``nb``/``tan``),
  of ``bnc_deploy.train.structure_learning.StructureLearningConfig`` (``structure = "learn"``),
  of the DNN config (``fc``/``cnn``; ``model`` stands for its ``architecture``), the dataset keys
  ``data``, ``fold``, ``validation``, ``split_seed``, and the label ``draw`` (0-based index of a
  draw). Every key is optional; an omitted key means the trainer's default (:func:`complete`).
* **The data split's seed** (:func:`split_seed`): the validation split (and a cross-validation
  fold split) is seeded by ``split_seed``, which defaults to the configuration's ``seed`` as
  ``bnc-train`` does. Giving one ``split_seed`` to several seeds keeps one split for all of them,
  so they train in one batched program and their errors compare on the same rows. ``complete``
  drops it when it is None or equal to ``seed`` (what it means then anyway), so the ids of records
  without it are the ids they had before the key existed.
* **Values are normalized** on the way in (:func:`normalize_value`): an int given for a float key
  becomes a float, ``-0.0`` becomes ``0.0``, strings are read as their flag text (``"3e-3"``,
  ``"float"``/``"none"`` for ``bits = None``, which TOML cannot write), lists for ``hidden``
  become ``"16,8"``, ``candidates`` 0/``"all"`` become None (every predecessor). An axis written
  as one string is read by :func:`parse_values` (commas separate values, so a ``hidden`` axis is
  written as a list: ``hidden = ["16,8", "32"]``).
* **Ids.** :func:`config_id` = the first 16 hex digits of SHA-256 over the canonical JSON of
  :func:`complete` (record): every omitted key filled with its default from the tables below,
  ``int_bits`` None replaced by the integer bits the trainer would use, labels (``draw``)
  dropped, keys sorted, floats written by ``repr`` (so ``3e-3`` and ``0.003`` are one value).
  Hence key order, number spelling and explicit-vs-omitted defaults never change an id. Keys
  that do not apply to the record's model (``bits`` for ``fc``, ``size_penalty`` without
  ``structure = "learn"``) are refused rather than hashed, so an ignored value cannot split one
  configuration into two ids. ``data`` has no default: when omitted it is not hashed (the runner
  must then keep one dataset per sweep directory). The runner must build the trainer's
  configuration from :func:`complete` (record), so that the defaults hashed here are the ones
  trained.
* Errors are :class:`~bnc_deploy.errors.ConfigError` naming the flag or file, the key and the
  value (with a did-you-mean for misspelt keys).

This module imports neither torch nor the trainers: the key names and defaults are written out
here, and a test checks them against the trainers' dataclasses. Grids of records are
:mod:`bnc_deploy.sweep.grid`.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import re
from dataclasses import dataclass

import numpy as np

from bnc_deploy.errors import ConfigError

__all__ = [
    "BN_DEFAULTS",
    "BN_MODELS",
    "DATA_DEFAULTS",
    "DNN_DEFAULTS",
    "DNN_MODELS",
    "KEYS",
    "LABEL_KEYS",
    "LEARN_DEFAULTS",
    "Key",
    "canonical_json",
    "check_key",
    "complete",
    "config_id",
    "default_int_bits",
    "did_you_mean",
    "normalize_value",
    "parse_values",
    "show_value",
    "split_seed",
]


# -- the keys --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Key:
    """How a key's values are read: ``kind`` int/float/str/bool; ``optional``: None allowed."""

    kind: str
    optional: bool = False
    choices: tuple = ()


#: Defaults of ``TrainConfig`` (BN models), less ``progress`` (display only). A test checks them.
BN_DEFAULTS: dict = {
    "model": "nb",
    "structure": "chow-liu",
    "bits": None,
    "int_bits": None,
    "init": "uniform",
    "smoothing": 1.0,
    "epochs": 500,
    "batch_size": 100,
    "lr": 3e-3,
    "lr_decay": 1e-3,
    "loss": "hybrid",
    "hybrid_lambda": 18.70,
    "hybrid_gamma": 0.1277,
    "hybrid_eta": 10.0,
    "seed": 0,
    "adam_eps": 1e-7,
}
#: Defaults of ``StructureLearningConfig``; they apply only with ``structure = "learn"``.
LEARN_DEFAULTS: dict = {
    "candidates": 8,
    "candidates_file": None,
    "size_penalty": 1e-3,
    "size_penalty_mode": "added",
    "order": "identity",
    "structure_lr": 1e-3,
    "tau_start": 10.0,
    "tau_end": 0.1,
    "finetune_epochs": 0,
}
#: Defaults of a DNN run as ``bnc-train --model fc|cnn`` makes it: ``DNNConfig``'s, except ``epochs``,
#: which is the command's shared ``--epochs`` default (500, not the dataclass's 100). ``architecture``
#: is the record's ``model``; ``progress`` and ``sizing`` are not configuration.
DNN_DEFAULTS: dict = {
    "layers": 2,
    "weight_bits": 2,
    "activation": "relu",
    "batch_norm": False,
    "one_hot": False,
    "hidden": None,
    "match_bits": None,
    "match_ops": None,
    "epochs": 500,
    "batch_size": 100,
    "lr": 3e-3,
    "lr_decay": 1e-4,
    "adam_eps": 1e-7,
    "seed": 0,
    "image_shape": None,
    "pixel_order": None,
}
#: Dataset keys, for every model. ``data`` (a name or a path) has no default.
DATA_DEFAULTS: dict = {"fold": 1, "validation": 0.0}
#: Keys that label a record without changing what is trained: kept in records, left out of ids.
LABEL_KEYS = frozenset({"draw"})

BN_MODELS = ("nb", "tan")
DNN_MODELS = ("fc", "cnn")

#: Every key a record may have, with how its values are read.
KEYS: dict[str, Key] = {
    # every model
    "model": Key("str", choices=BN_MODELS + DNN_MODELS),
    "data": Key("str"),
    "fold": Key("int"),
    "validation": Key("float"),
    "epochs": Key("int"),
    "batch_size": Key("int"),
    "lr": Key("float"),
    "lr_decay": Key("float"),
    "adam_eps": Key("float"),
    "seed": Key("int"),
    "split_seed": Key("int", optional=True),
    # BN models
    "structure": Key("str"),
    "bits": Key("int", optional=True),
    "int_bits": Key("int", optional=True),
    "init": Key("str", choices=("uniform", "ml")),
    "smoothing": Key("float"),
    "loss": Key("str", choices=("hybrid", "nll", "cll")),
    "hybrid_lambda": Key("float"),
    "hybrid_gamma": Key("float"),
    "hybrid_eta": Key("float"),
    # structure learning (structure = "learn")
    "candidates": Key("int", optional=True),
    "candidates_file": Key("str", optional=True),  # FILE or FILE#DATASET; excludes a non-default candidates/order
    "size_penalty": Key("float"),
    "size_penalty_mode": Key("str", choices=("added", "absolute")),
    "order": Key("str", choices=("identity", "random", "chow-liu")),
    "structure_lr": Key("float"),
    "tau_start": Key("float"),
    "tau_end": Key("float"),
    "finetune_epochs": Key("int"),
    # DNN models
    "layers": Key("int"),
    "weight_bits": Key("int"),
    "activation": Key("str", choices=("relu", "sign")),
    "batch_norm": Key("bool"),
    "one_hot": Key("bool"),
    "hidden": Key("str", optional=True),
    "match_bits": Key("int", optional=True),
    "match_ops": Key("int", optional=True),
    "image_shape": Key("str", optional=True),
    "pixel_order": Key("str", optional=True, choices=("row-major", "column-major")),
    # labels
    "draw": Key("int"),
}

_COMMON = (
    frozenset({"model", "epochs", "batch_size", "lr", "lr_decay", "adam_eps", "seed"}) | set(DATA_DEFAULTS) | {"data"}
)
_BN_ONLY = frozenset(BN_DEFAULTS) - _COMMON
_LEARN_ONLY = frozenset(LEARN_DEFAULTS)
_DNN_ONLY = frozenset(DNN_DEFAULTS) - _COMMON


def default_int_bits(total_bits: int) -> int:
    """The integer bits the BN trainer uses when only ``bits`` is given (``train.bnc.default_int_bits``)."""
    return 1 if total_bits == 1 else 2 if total_bits <= 3 else 3


def did_you_mean(name: str, known) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``known`` to ``name``, or ``""``."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _unknown_key(where: str, name: str) -> ConfigError:
    return ConfigError(
        f"{where}: unknown key {name!r}{did_you_mean(name, KEYS)}; known keys: {', '.join(sorted(KEYS))}"
    )


def check_key(name, where: str) -> Key:
    if not isinstance(name, str) or name not in KEYS:
        raise _unknown_key(where, str(name))
    return KEYS[name]


# -- values ----------------------------------------------------------------------------------------
_INT_RE = re.compile(r"[+-]?\d+")
_RANGE_RE = re.compile(r"([+-]?\d+)\s*\.\.\s*([+-]?\d+)")
_FUNC_RE = re.compile(r"(logspace|linspace)\s*\((.*)\)", re.IGNORECASE)
_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def show_value(value) -> str:
    """A value for a message: JSON-like, floats by repr, anything else by repr; at most 80 characters."""
    try:
        text = repr(value) if isinstance(value, float) else json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def normalize_value(key: str, value, where: str = "value"):
    """``value`` of ``key`` in its canonical form (see the module docstring), or ConfigError naming
    ``where``, the key and the value."""
    spec = check_key(key, where)
    bad = f"{where}: {key} = {value!r}" if isinstance(value, str) else f"{where}: {key} = {show_value(value)}"
    if isinstance(value, str):
        return _from_text(value.strip(), key, spec, where, bad)
    if value is None:
        if spec.optional:
            return None
        raise ConfigError(f"{bad}: {key} cannot be none")
    if key == "hidden":
        return _hidden(value, bad)
    if spec.kind == "bool":
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        raise ConfigError(f"{bad}: expected true or false")
    if spec.kind == "int":
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise ConfigError(f"{bad}: expected an integer")
        if isinstance(value, (float, np.floating)) and not float(value).is_integer():
            raise ConfigError(f"{bad}: expected an integer")
        value = int(value)
        return None if key == "candidates" and value == 0 else value  # 0 means every predecessor
    if spec.kind == "float":
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise ConfigError(f"{bad}: expected a number")
        value = float(value)
        if not math.isfinite(value):
            raise ConfigError(f"{bad}: expected a finite number")
        return value + 0.0  # -0.0 -> 0.0: repr would tell them apart, the trainer does not
    raise ConfigError(f"{bad}: expected a string")


def _hidden(value, bad: str) -> str:
    """``hidden`` as the flag writes it: ``"16,8"`` (from a string, an int or a list of ints)."""
    items = value if isinstance(value, (list, tuple)) else [value]
    widths = []
    for item in items:
        text = str(item).strip()
        if isinstance(item, bool) or not _INT_RE.fullmatch(text):
            raise ConfigError(f'{bad}: expected hidden widths, e.g. "16,8" or [16, 8]')
        widths.append(int(text))
    if not widths:
        raise ConfigError(f'{bad}: expected hidden widths, e.g. "16,8" or [16, 8]')
    return ",".join(str(w) for w in widths)


def _from_text(text: str, key: str, spec: Key, where: str, bad: str):
    """One value written as text (a TOML/JSON string, or one token of a flag): its flag syntax."""
    low = text.lower()
    # TOML has no null: "none" (and "float" for bits) stand for None.
    if spec.optional and (low == "none" or (key == "bits" and low == "float")):
        return None
    if key == "hidden":
        return _hidden(text.split(","), bad)
    if key == "candidates" and low == "all":
        return None
    if spec.kind == "int":
        if not _INT_RE.fullmatch(text):
            raise ConfigError(f"{bad}: not an integer" + (" (or none/float)" if key == "bits" else ""))
        return normalize_value(key, int(text), where)
    if spec.kind == "float":
        try:
            number = float(text)
        except ValueError:
            raise ConfigError(f"{bad}: not a number") from None
        return normalize_value(key, number, where)
    if spec.kind == "bool":
        if low in _TRUE or low in _FALSE:
            return low in _TRUE
        raise ConfigError(f"{bad}: expected true or false")
    if not text:
        raise ConfigError(f"{bad}: empty")
    if spec.choices and text not in spec.choices:
        raise ConfigError(f"{bad}: expected one of {', '.join(spec.choices)}{did_you_mean(text, spec.choices)}")
    return text


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside parentheses (``1,logspace(-7,1,41)`` is two tokens)."""
    tokens, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            tokens.append(text[start:i])
            start = i + 1
    tokens.append(text[start:])
    return tokens


def parse_values(text: str, kind: str, *, flag: str | None = None) -> list:
    """The values a flag (or a grid-file string) lists, in order.

    ``kind`` is a key name (``"lr"``, ``"bits"``; its type and the flag ``--lr`` follow from
    :data:`KEYS`) or a bare kind ``"int"``, ``"float"``, ``"str"``, ``"bool"``. Tokens, separated
    by commas: a value (``3e-3``; ``none``/``float`` for ``bits``), an inclusive integer range
    ``1..8``, ``logspace(a,b,n)`` (``10**a .. 10**b``, n values) or ``linspace(a,b,n)``. A value
    may appear once only. ConfigError names the flag and the bad token.
    """
    if kind in KEYS:
        key, spec = kind, KEYS[kind]
        flag = flag or f"--{kind.replace('_', '-')}"
    elif kind in ("int", "float", "str", "bool"):
        key, spec = None, Key(kind)
        flag = flag or "value"
    else:
        raise ConfigError(f"parse_values: unknown kind {kind!r}{did_you_mean(kind, KEYS)}")
    text = str(text)
    values: list = []
    for token in _split_top_level(text):
        token = token.strip()
        where = f"{flag} {text!r}"
        if not token:
            raise ConfigError(f"{where}: empty value (two commas in a row, or a comma at an end)")
        range_match, func_match = _RANGE_RE.fullmatch(token), _FUNC_RE.fullmatch(token)
        if range_match:
            if spec.kind != "int":
                raise ConfigError(
                    f"{where}: the range {token!r} is for integer keys; use a list or logspace(a,b,n)/linspace(a,b,n)"
                )
            lo, hi = int(range_match.group(1)), int(range_match.group(2))
            if lo > hi:
                raise ConfigError(f"{where}: the range {token!r} is empty (write low..high)")
            new = list(range(lo, hi + 1))
        elif func_match:
            new = _spaced(func_match, token, where, spec)
        else:
            new = [_token(token, key, spec, where)]
        for value in new:
            value = normalize_value(key, value, where) if key else value
            if value in values:
                raise ConfigError(f"{where}: {token!r} repeats the value {show_value(value)}")
            values.append(value)
    return values


def _spaced(match, token: str, where: str, spec: Key) -> list:
    name, args = match.group(1).lower(), [a.strip() for a in match.group(2).split(",")]
    if spec.kind != "float":
        raise ConfigError(f"{where}: {token!r} gives fractional values; {name} is for number keys like lr")
    try:
        if len(args) != 3 or not _INT_RE.fullmatch(args[2]):
            raise ValueError
        lo, hi, n = float(args[0]), float(args[1]), int(args[2])
    except ValueError:
        raise ConfigError(f"{where}: bad {token!r}: write {name}(start,stop,count), e.g. {name}(-7,1,41)") from None
    if n < 1 or not (math.isfinite(lo) and math.isfinite(hi)):
        raise ConfigError(f"{where}: bad {token!r}: the count must be >= 1 and the ends finite")
    grid = np.logspace(lo, hi, n) if name == "logspace" else np.linspace(lo, hi, n)
    return [float(v) for v in grid]


def _token(token: str, key: str | None, spec: Key, where: str):
    if key is not None:
        return _from_text(token, key, spec, where, f"{where}: bad value {token!r}")
    if spec.kind == "int":
        if not _INT_RE.fullmatch(token):
            raise ConfigError(f"{where}: bad value {token!r}: not an integer")
        return int(token)
    if spec.kind == "float":
        try:
            value = float(token)
        except ValueError:
            raise ConfigError(f"{where}: bad value {token!r}: not a number") from None
        if not math.isfinite(value):
            raise ConfigError(f"{where}: bad value {token!r}: not a finite number")
        return value + 0.0
    if spec.kind == "bool":
        if token.lower() in _TRUE + _FALSE:
            return token.lower() in _TRUE
        raise ConfigError(f"{where}: bad value {token!r}: expected true or false")
    return token


# -- complete records and ids ----------------------------------------------------------------------
def complete(record: dict, where: str = "configuration") -> dict:
    """``record`` normalized, with every omitted key of its model filled with the default.

    BN models get :data:`BN_DEFAULTS` (and :data:`LEARN_DEFAULTS` with ``structure = "learn"``);
    DNN models :data:`DNN_DEFAULTS`; all get :data:`DATA_DEFAULTS`. ``int_bits`` None with
    ``bits`` set becomes :func:`default_int_bits`. Labels stay. ConfigError for an unknown key,
    a bad value, or a key that does not apply to the model.
    """
    if not isinstance(record, dict):
        raise ConfigError(f"{where}: a configuration is a dict of keys, got {type(record).__name__}")
    values = {name: normalize_value(name, value, where) for name, value in record.items()}
    model = values.get("model", BN_DEFAULTS["model"])
    if model in DNN_MODELS:
        foreign, defaults = _BN_ONLY | _LEARN_ONLY, DNN_DEFAULTS
    else:
        learn = values.get("structure", BN_DEFAULTS["structure"]) == "learn"
        foreign = _DNN_ONLY | (frozenset() if learn else _LEARN_ONLY)
        defaults = {**BN_DEFAULTS, **LEARN_DEFAULTS} if learn else BN_DEFAULTS
    for name in values:
        if name in foreign:
            why = (
                'structure = "learn"'
                if name in _LEARN_ONLY and model not in DNN_MODELS
                else f"model {'/'.join(DNN_MODELS) if name in _DNN_ONLY else '/'.join(BN_MODELS)}"
            )
            implicit = " (no model given means nb)" if "model" not in values else ""
            raise ConfigError(f"{where}: key {name!r} applies only to {why}, not to model {model!r}{implicit}")
    full = {**DATA_DEFAULTS, **defaults, **values}
    if full.get("split_seed", None) in (None, full["seed"]):
        full.pop("split_seed", None)  # the default: the configuration's own seed (one id for both)
    if model in BN_MODELS and full["bits"] is not None and full["int_bits"] is None:
        full["int_bits"] = default_int_bits(full["bits"])  # what the trainer would do: one id for both
    return full


def split_seed(record: dict) -> int:
    """The seed of ``record``'s data split (validation rows, cross-validation folds): its
    ``split_seed`` if given, else its ``seed`` (as ``bnc-train`` splits); ``record`` is complete."""
    value = record.get("split_seed")
    return int(record["seed"] if value is None else value)


def canonical_json(record: dict, where: str = "configuration") -> str:
    """The text :func:`config_id` hashes: :func:`complete` (record) without labels, keys sorted,
    no spaces, floats by ``repr`` (what ``json`` writes)."""
    full = complete(record, where)
    return json.dumps(
        {k: v for k, v in full.items() if k not in LABEL_KEYS}, sort_keys=True, separators=(",", ":"), allow_nan=False
    )


def config_id(record: dict, where: str = "configuration") -> str:
    """First 16 hex digits of SHA-256 of :func:`canonical_json` (record); ``where`` prefixes errors."""
    return hashlib.sha256(canonical_json(record, where).encode("ascii")).hexdigest()[:16]
