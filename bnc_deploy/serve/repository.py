"""The model repository: model files and versions of one directory, loaded, checked and swapped atomically.

Layout (:mod:`~bnc_deploy.serve.versions`): flat files ``DIR/<name>.onnx``, ``.ort``, ``.tflite``,
``.h`` (C export) or ``.bnc``, the model name being the stem, and Triton's version directories
``DIR/<name>/<version>/model.<ext>``. A flat file is version 1 of its model; its ``model_version``
(responses, index, metadata) is the first 12 hex digits of its SHA-256, so that a reload shows,
and a request may name it by that digest or by ``1``. A version directory's ``model_version`` is
its number. Two files for one version are an error shown in the index for that version. Hidden
files (a leading ``.``) and names containing ``.tmp`` are ignored: they are files still being
written. Publish a file by writing it under such a name and renaming it (``os.replace``) to its
final name; ``bnc-export -o DIR/<name>.onnx`` does exactly that (:mod:`bnc_deploy.fileio`).

Which versions serve: the version policy (``version_policy``: ``latest:N``, the default
``latest:1``, ``all`` or ``specific:V,...``; a load request's ``config`` may set one per model).
Several versions of one model serve at once; a request without a version gets the highest
serving one. Signed files are checked with the model's key (:mod:`~bnc_deploy.serve.keys`:
``DIR/<name>.key``, else ``key``, the server's).

``load(name)`` loads every version the policy selects (``load(name, version)``: that one): each
version's :class:`~bnc_deploy.serve.model.ServedModel` is built *beside* the one serving (it loads
and reproduces the file's check set), then swapped in with one reference assignment: requests
that already hold the old model finish on it (its batcher drains before it stops), new requests
get the new one, none waits for a gap, and the other versions are not touched. A file that fails
to load or check leaves the version that served before serving; the error is that version's
``reason`` in :meth:`index` (and ``load`` raises it). Loading a file whose content is already
serving does nothing. A version the policy no longer selects (a newer one arrived) stops serving
once every selected version serves, so a newer version that fails leaves the older one serving.
``unload(name[, version])`` stops serving a model or one version (its files stay); polling leaves
it unloaded until a load names it. :meth:`start_polling` loads new and changed files and unloads
removed ones every ``S`` seconds.

Index (Triton's repository index): one row ``{"name", "version", "state", "reason"}`` per version
(a model without any file or version: one row with version ``""``); ``version`` is ``""`` for a
flat file that is not serving. States: ``READY`` (serving), ``UNAVAILABLE`` (failed, unloaded, not
selected by the policy, not loaded yet), ``LOADING`` (first load under way).

Requests read a per-model view replaced in one assignment (no lock on the inference path); loads
of one model are serialised by its lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from bnc_deploy.errors import ConfigError
from bnc_deploy.runtimes.base import model_suffixes
from bnc_deploy.serve import metrics, versions
from bnc_deploy.serve.errors import BadRequest, ModelNotFound, ModelNotReady
from bnc_deploy.serve.keys import KeyRing, ModelKey, read_server_key
from bnc_deploy.serve.model import ModelLoadError, ServedModel
from bnc_deploy.serve.versions import VersionPolicy, is_candidate

log = logging.getLogger("bnc_deploy.serve")


@dataclass
class _Slot:
    """One version of a model."""

    number: int
    flat: bool = False  # DIR/<name>.<ext>: its model_version is the content digest
    model: ServedModel | None = None
    state: str = "UNAVAILABLE"
    reason: str = ""
    unloaded: bool = False  # unloaded on request: polling leaves it so
    removed: bool = False  # its file went away (reloaded when it returns)
    stamp: tuple | None = None  # the files and key file last tried (_Repository._stamp)

    def row(self, name: str) -> dict:
        version = self.model.version if self.model else ("" if self.flat else str(self.number))
        return {"name": name, "version": version, "state": self.state, "reason": self.reason}


@dataclass(frozen=True)
class _View:
    """What requests read: the serving models by version key (number and model_version), the latest."""

    latest: ServedModel | None = None
    by_key: Mapping[str, ServedModel] = field(default_factory=dict)
    versions: tuple[str, ...] = ()


@dataclass
class _Entry:
    name: str
    slots: dict[int, _Slot] = field(default_factory=dict)
    view: _View = field(default_factory=_View)
    policy: VersionPolicy | None = None  # set by a load request's config; else the repository's
    reason: str = ""  # why nothing loaded when there is no version to show (no file, none selected)
    unloaded: bool = False  # the whole model unloaded (on request, or its files went away)
    removed: bool = False
    gauged: set[int] = field(default_factory=set)  # versions with a ready gauge
    lock: threading.Lock = field(default_factory=threading.Lock)


def _file_stamp(path: Path) -> tuple | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


class ModelRepository:
    """The models of one directory (see the module docstring).

    ``runtime``: run every file in this runtime (None: by extension); ``threads``: the runtimes'
    intra-op threads; ``max_batch``/``max_queue_delay_ms``: the dynamic batcher (0: off);
    ``key``: the HMAC key of signed files (models without a key file of their own);
    ``version_policy``: a :class:`~bnc_deploy.serve.versions.VersionPolicy` or its text.
    """

    def __init__(
        self,
        root,
        *,
        runtime: str | None = None,
        threads: int | None = None,
        max_batch: int = 0,
        max_queue_delay_ms: float = 0.0,
        key: bytes | None = None,
        version_policy: VersionPolicy | str = "latest:1",
    ) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise ConfigError(f"{self.root}: the model repository must be a directory")
        if max_batch < 0 or max_queue_delay_ms < 0:
            raise ConfigError("--max-batch and --max-queue-delay-ms must be >= 0")
        self._options = {
            "runtime": runtime,
            "threads": threads,
            "max_batch": max_batch,
            "max_queue_delay_ms": max_queue_delay_ms,
        }
        if isinstance(version_policy, str):
            version_policy = VersionPolicy.parse(version_policy)
        self.policy = version_policy
        self.keys = KeyRing(self.root, key)
        self._entries: dict[str, _Entry] = {}
        self._entries_lock = threading.Lock()
        self._closed = False
        self._poller: threading.Thread | None = None
        self._stop = threading.Event()

    @staticmethod
    def options_from_env(env: Mapping[str, str]) -> dict[str, Any]:
        """The keyword arguments ``BNC_SERVE_VERSION_POLICY`` and ``BNC_SERVE_KEY_FILE`` give (app factory)."""
        key_file = env.get("BNC_SERVE_KEY_FILE")
        return {
            "version_policy": env.get("BNC_SERVE_VERSION_POLICY") or "latest:1",
            "key": read_server_key(key_file, "BNC_SERVE_KEY_FILE") if key_file else None,
        }

    # -- files ------------------------------------------------------------------------------------
    def scan(self) -> dict[str, dict[int, list[Path]]]:
        """``{model name: {version: [its published files]}}`` (normally one file each)."""
        return versions.scan(self.root)

    def _entry(self, name: str, create: bool = False) -> _Entry | None:
        with self._entries_lock:
            entry = self._entries.get(name)
            if entry is None and create:
                entry = self._entries[name] = _Entry(name)
            return entry

    def _policy(self, entry: _Entry | None) -> VersionPolicy:
        return entry.policy if entry is not None and entry.policy is not None else self.policy

    def _stamp(self, name: str, paths: list[Path]) -> tuple:
        """What polling compares: the version's files and the model's key file."""
        return tuple(_file_stamp(p) for p in paths), self.keys.stamp(name)

    # -- loading ----------------------------------------------------------------------------------
    def load_all(self) -> None:
        """Load every model of the directory (failures are recorded in the index, not raised)."""
        for name in self.scan():
            try:
                self.load(name)
            except (ModelLoadError, ModelNotFound) as exc:
                log.error("model %s: %s", name, exc)

    def load(self, name: str, version: str | None = None, *, policy: VersionPolicy | None = None) -> ServedModel:
        """(Re)load model ``name`` (every version its policy selects; ``version``: that one only) from
        its files; ``policy``: the model's policy from now on. Returns the version loaded (without
        ``version``: the latest serving). Raises ModelNotFound when no file has that name or version,
        BadRequest for a version the policy does not select, ModelLoadError when a file fails (the
        version serving before keeps serving); see the module docstring."""
        files = self.scan().get(name)
        if not files:
            entry = self._entries.get(name)
            if entry is not None:
                entry.reason = "no model file"
                for slot in entry.slots.values():
                    if slot.model is None:
                        slot.reason = "no model file"
            raise ModelNotFound(
                f"no model file named {name!r} in {self.root} (files: <name>{'|'.join(model_suffixes())} "
                "or <name>/<version>/model.<ext>)"
            )
        entry = self._entry(name, create=True)
        assert entry is not None
        with entry.lock:  # one load per model at a time; inference never takes this lock
            if policy is not None:
                entry.policy = policy
            entry.unloaded = entry.removed = False
            if version is None:
                for slot in entry.slots.values():
                    slot.unloaded = False
                numbers = self._policy(entry).select(files)
            else:
                numbers = frozenset([self._selected_version(entry, files, version)])
            if not numbers:  # nothing to load: what serves keeps serving
                entry.reason = f"no version selected by the version policy {self._policy(entry)}"
                raise ModelLoadError(f"model {name!r}: {entry.reason} (versions: {', '.join(map(str, sorted(files)))})")
            entry.reason = ""
            closing, error = self._reconcile(entry, files, numbers)
            view = entry.view
        _close(closing)
        if error is not None:
            raise error
        model = view.by_key.get(str(min(numbers))) if version is not None else view.latest
        assert model is not None  # loaded without error
        return model

    def _selected_version(self, entry: _Entry, files: dict[int, list[Path]], version: str) -> int:
        number = self._number(entry, version)
        if number not in files:
            raise ModelNotFound(f"model {entry.name!r} has no version {version} in {self.root}")
        policy = self._policy(entry)
        if number not in policy.select(files):
            raise BadRequest(f"version {number} of model {entry.name!r} is not selected by the version policy {policy}")
        return number

    def _reconcile(
        self, entry: _Entry, files: dict[int, list[Path]], numbers, *, poll: bool = False
    ) -> tuple[list[ServedModel], ModelLoadError | None]:
        """Load the versions ``numbers`` (polling: those changed, not unloaded on request), drop the
        versions whose files are gone, retire those the policy no longer selects; the models to
        close and the first load error."""
        closing: list[ServedModel] = []
        error = None
        for number in sorted(numbers):
            slot = entry.slots.get(number)
            if poll and slot is not None:
                if slot.unloaded and not slot.removed:
                    continue
                if slot.stamp == self._stamp(entry.name, files[number]):
                    continue
            try:
                closing += self._load_slot(entry, number, files[number])
            except ModelLoadError as exc:
                error = error or exc
        for number, slot in list(entry.slots.items()):
            if number not in files and not slot.removed:
                closing += _drop(slot, "model file removed")
                slot.removed = True
        closing += self._retire(entry, files)
        self._publish(entry)
        return closing, error

    def _load_slot(self, entry: _Entry, number: int, paths: list[Path]) -> list[ServedModel]:
        """Load version ``number`` beside the one serving and swap it in; the model to close."""
        slot = entry.slots.get(number)
        if slot is None:
            slot = entry.slots[number] = _Slot(number)
        slot.unloaded = slot.removed = False
        slot.flat = paths[0].parent == self.root
        slot.stamp = self._stamp(entry.name, paths)
        if len(paths) > 1:
            names = ", ".join(str(p.relative_to(self.root)) for p in paths)
            self._failed(
                entry, slot, ModelLoadError(f"model {entry.name!r} is ambiguous: {names}; keep one file per version")
            )
        used = None
        old = slot.model
        if old is None:
            slot.state = "LOADING"
        try:
            used = self.keys.for_model(entry.name)
            version = None if slot.flat else str(number)
            new = ServedModel(entry.name, paths[0], key=used.key, version=version, **self._options)
        except ModelLoadError as exc:
            self._failed(entry, slot, exc, used)
        if old is not None and old.digest == new.digest and old.path == new.path:
            new.close()  # same content: keep the serving one
            slot.state, slot.reason = "READY", ""
            return []
        slot.model = new  # the swap (published to requests below): one reference assignment
        slot.state, slot.reason = "READY", ""
        self._publish(entry)
        log.info("model %s: serving version %s (%s, %s)", entry.name, new.version, paths[0].name, new.runtime)
        return [old] if old is not None else []

    def _failed(self, entry: _Entry, slot: _Slot, exc: ModelLoadError, used: ModelKey | None = None) -> NoReturn:
        reason = self.keys.explain(entry.name, str(exc), used)
        slot.state = "READY" if slot.model is not None else "UNAVAILABLE"
        slot.reason = reason
        if slot.model is not None:
            slot.reason = f"load failed, still serving version {slot.model.version}: {reason}"
        log.error("model %s version %s: %s", entry.name, slot.number, slot.reason)
        raise ModelLoadError(reason)

    def _retire(self, entry: _Entry, files: dict[int, list[Path]]) -> list[ServedModel]:
        """Drop the versions on disk that the policy does not select, once every selected version
        (not unloaded on request) serves; until then those still serving keep serving."""
        policy = self._policy(entry)
        selected = policy.select(files)
        pending = []
        for number in sorted(selected):
            slot = entry.slots.get(number)
            if slot is None or (slot.model is None and not slot.unloaded):
                pending.append(str(number))
        closing = []
        for number, slot in list(entry.slots.items()):
            if number in selected or number not in files:
                continue
            if pending and slot.model is not None:
                slot.reason = f"kept serving until version {', '.join(pending)} loads (not selected by {policy})"
                continue
            del entry.slots[number]
            closing += [slot.model] if slot.model is not None else []
        return closing

    def _publish(self, entry: _Entry) -> None:
        """Replace the view requests read (one assignment) and the ready gauges."""
        serving = sorted((n, s.model) for n, s in list(entry.slots.items()) if s.model is not None)
        by_key: dict[str, ServedModel] = {}
        for number, model in serving:
            by_key[str(number)] = by_key[model.version] = model
        keys = [model.version for _, model in serving]
        for _, model in serving:
            model.served_versions = keys
        entry.view = _View(serving[-1][1] if serving else None, by_key, tuple(keys))
        numbers = set(entry.slots)
        for number in numbers | entry.gauged:
            slot = entry.slots.get(number)
            metrics.set_version_ready(entry.name, str(number), slot is not None and slot.model is not None)
        entry.gauged = numbers

    def unload(self, name: str, version: str | None = None) -> None:
        """Stop serving ``name`` (``version``: that version only); ModelNotFound if the repository
        has no such model or version."""
        entry = self._entries.get(name)
        if entry is None:
            if name not in self.scan():
                raise ModelNotFound(f"unknown model {name!r}")
            entry = self._entry(name, create=True)
            assert entry is not None
        closing: list[ServedModel] = []
        with entry.lock:
            if version is None:
                entry.unloaded = True
                slots = list(entry.slots.values())
            else:
                number = self._number(entry, version)
                if number not in entry.slots and number not in self.scan().get(name, {}):
                    raise ModelNotFound(f"model {name!r} has no version {version!r}")
                slots = [entry.slots.setdefault(number, _Slot(number))]
            for slot in slots:
                closing += _drop(slot, "unloaded")
                slot.unloaded = True
            self._publish(entry)
        _close(closing)
        for model in closing:
            log.info("model %s: unloaded version %s", name, model.version)

    def _number(self, entry: _Entry, version: str) -> int:
        """The version number ``version`` names: a number, or a serving flat file's digest."""
        if versions.is_version(version):
            return int(version)
        model = entry.view.by_key.get(version)
        if model is not None:
            return next(n for n, s in list(entry.slots.items()) if s.model is model)
        raise ModelNotFound(f"model {entry.name!r} has no version {version!r}")

    # -- queries ----------------------------------------------------------------------------------
    def get(self, name: str, version: str | None = None) -> ServedModel:
        """The serving model ``name``: its latest version, or ``version`` (a number, or the
        ``model_version`` it answers with). ModelNotFound / ModelNotReady otherwise."""
        entry = self._entries.get(name)
        if entry is None:
            raise ModelNotFound(f"unknown model {name!r}")
        view = entry.view
        model = view.by_key.get(version) if version else view.latest
        if model is None:
            self._not_serving(entry, view, version)
        return model

    def _not_serving(self, entry: _Entry, view: _View, version: str | None) -> NoReturn:
        name = entry.name
        slots = sorted(list(entry.slots.items()), reverse=True)
        if view.latest is None:
            reason = next((s.reason or s.state.lower() for _, s in slots), entry.reason or "unavailable")
            raise ModelNotReady(f"model {name!r} is not ready: {reason}")
        slot = entry.slots.get(int(version)) if version and versions.is_version(version) else None
        if slot is not None:
            raise ModelNotReady(f"model {name!r} version {version} is not ready: {slot.reason or slot.state.lower()}")
        raise ModelNotFound(f"model {name!r} has no version {version!r} (serving {', '.join(view.versions)})")

    def served(self, name: str) -> list[ServedModel]:
        """The serving versions of ``name``, oldest first (ModelNotFound for an unknown name)."""
        entry = self._entries.get(name)
        if entry is None:
            raise ModelNotFound(f"unknown model {name!r}")
        return list(dict.fromkeys(entry.view.by_key[v] for v in entry.view.versions))

    def index(self) -> list[dict]:
        """The V2 repository index: ``[{"name", "version", "state", "reason"}]``, one row per
        version of every model on disk or loaded, sorted by name and version (module docstring)."""
        files = self.scan()
        out = []
        for name in sorted(set(files) | set(self._entries)):
            out += self._rows(name, self._entries.get(name), files.get(name, {}))
        return out

    def _rows(self, name: str, entry: _Entry | None, on_disk: dict[int, list[Path]]) -> list[dict]:
        slots = dict(entry.slots) if entry is not None else {}
        numbers = sorted(set(on_disk) | set(slots))
        if not numbers:
            reason = entry.reason if entry is not None and entry.reason else "not loaded"
            return [{"name": name, "version": "", "state": "UNAVAILABLE", "reason": reason}]
        policy = self._policy(entry)
        selected = policy.select(on_disk)
        rows = []
        for number in numbers:
            slot = slots.get(number)
            if slot is not None:
                rows.append(slot.row(name))
                continue
            if number not in selected:
                reason = f"not selected by the version policy {policy}"
            elif entry is not None and entry.unloaded:
                reason = "unloaded"
            else:
                reason = (entry.reason if entry is not None else "") or "not loaded"
            version = "" if on_disk[number][0].parent == self.root else str(number)
            rows.append({"name": name, "version": version, "state": "UNAVAILABLE", "reason": reason})
        return rows

    def models(self) -> list[ServedModel]:
        """Every serving model version."""
        return [s.model for e in list(self._entries.values()) for s in list(e.slots.values()) if s.model is not None]

    def ready(self) -> bool:
        """Server readiness: not shutting down, and every model that is not unloaded has a version serving."""
        if self._closed:
            return False
        for entry in list(self._entries.values()):
            if entry.unloaded or entry.view.latest is not None:
                continue
            slots = list(entry.slots.values())
            if not (slots and all(s.unloaded or s.removed for s in slots)):
                return False
        return True

    # -- polling ----------------------------------------------------------------------------------
    def poll_once(self) -> None:
        """Load new and changed files, unload models and versions whose files are gone (not those
        unloaded on request)."""
        files = self.scan()
        for name, on_disk in files.items():
            entry = self._entries.get(name)
            if entry is not None and entry.unloaded and not entry.removed:
                continue  # unloaded on request: stays unloaded until a load request
            if entry is None or self._changed(entry, on_disk):
                try:
                    self._poll_load(name, on_disk)
                except ModelLoadError as exc:
                    log.error("poll: model %s: %s", name, exc)
        for name in list(self._entries):
            entry = self._entries[name]
            if name not in files and entry.view.latest is not None:
                self.unload(name)
                entry.removed = True
                for slot in list(entry.slots.values()):
                    slot.reason, slot.removed = "model file removed", True

    def _changed(self, entry: _Entry, on_disk: dict[int, list[Path]]) -> bool:
        slots = dict(entry.slots)
        for number in self._policy(entry).select(on_disk):
            slot = slots.get(number)
            if slot is None or slot.removed:
                return True
            if not slot.unloaded and slot.stamp != self._stamp(entry.name, on_disk[number]):
                return True
        return any(number not in on_disk and slot.model is not None for number, slot in slots.items())

    def _poll_load(self, name: str, on_disk: dict[int, list[Path]]) -> None:
        entry = self._entry(name, create=True)
        assert entry is not None
        with entry.lock:
            if entry.removed:  # its files are back
                entry.unloaded = entry.removed = False
            closing, error = self._reconcile(entry, on_disk, self._policy(entry).select(on_disk), poll=True)
        _close(closing)
        if error is not None:
            raise error

    def start_polling(self, seconds: float) -> None:
        """Run :meth:`poll_once` every ``seconds`` in a daemon thread until :meth:`close`."""
        if seconds <= 0:
            raise ConfigError(f"--poll must be > 0 seconds, got {seconds}")

        def loop() -> None:
            while not self._stop.wait(seconds):
                try:
                    self.poll_once()
                except Exception:
                    log.exception("poll failed")

        self._poller = threading.Thread(target=loop, name="repository-poll", daemon=True)
        self._poller.start()

    def close(self) -> None:
        """Not ready any more; stop polling; drain and stop every model's batcher."""
        self._closed = True
        self._stop.set()
        if self._poller is not None:
            self._poller.join(5)
        for model in self.models():
            model.close()
        metrics.process_exit()


def _drop(slot: _Slot, reason: str) -> list[ServedModel]:
    """Stop serving ``slot`` (the caller publishes); the model to close."""
    old, slot.model = slot.model, None
    slot.state, slot.reason = "UNAVAILABLE", reason
    return [old] if old is not None else []


def _close(models: list[ServedModel]) -> None:
    for model in models:
        model.close()  # drains its batcher; requests holding it finish on it


__all__ = ["ModelRepository", "VersionPolicy", "is_candidate"]
