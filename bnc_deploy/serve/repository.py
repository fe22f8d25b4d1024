"""The model repository: a directory of model files, loaded, checked and swapped atomically.

Layout (flat): ``DIR/<name>.onnx``, ``.ort``, ``.tflite``, ``.h`` (C export) or ``.bnc``; the model name
is the file stem (two files with one stem are an error shown in the index for that name).
Hidden files (a leading ``.``) and names containing ``.tmp`` are ignored: they are files still
being written. Publish a file by writing it under such a name in ``DIR`` and renaming it
(``os.replace``) to its final name; ``bnc-export -o DIR/<name>.onnx`` does exactly that
(:mod:`bnc_deploy.fileio`).

``load(name)`` builds a :class:`~bnc_deploy.serve.model.ServedModel` of the current file *beside*
the serving one (it loads and reproduces the file's check set), then swaps the entry's model
reference in one assignment: requests that already hold the old model finish on it (its batcher
drains before it stops), new requests get the new one, none waits for a gap. A file that fails
to load or check leaves the old version serving; the error is the entry's ``reason`` in
:meth:`index` (and ``load`` raises it). Loading a file whose content (version) is already serving
does nothing. ``unload`` stops serving a model (its file stays). :meth:`start_polling` reloads
changed files, loads new ones and unloads removed ones every ``S`` seconds.

States in the index (Triton's): ``READY`` (a version serving), ``UNAVAILABLE`` (none serving:
failed, unloaded or not loaded yet), ``LOADING`` (first load under way).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

from bnc_deploy.errors import ConfigError
from bnc_deploy.runtimes.base import model_suffixes
from bnc_deploy.serve.errors import ModelNotFound, ModelNotReady
from bnc_deploy.serve.model import ModelLoadError, ServedModel

log = logging.getLogger("bnc_deploy.serve")


@dataclass
class _Entry:
    name: str
    model: ServedModel | None = None
    state: str = "UNAVAILABLE"
    reason: str = ""
    unloaded: bool = False
    removed: bool = False  # unloaded by polling because its file went away (reloaded when it returns)
    stamp: tuple | None = None  # (inode, size, mtime_ns) of the file last tried
    lock: threading.Lock = field(default_factory=threading.Lock)


def is_candidate(path: Path) -> bool:
    """Whether ``path`` is a published model file (not hidden, not a temporary name, known suffix)."""
    name = path.name
    # The files some runtime reads by default (runtimes.base: .onnx/.ort onnxruntime, .tflite litert,
    # .h native (compiled on load), .bnc numpy).
    return not name.startswith(".") and ".tmp" not in name and path.suffix.lower() in model_suffixes()


def _stamp(path: Path) -> tuple | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


class ModelRepository:
    """The models of one directory (see the module docstring).

    ``runtime``: run every file in this runtime (None: by extension); ``threads``: the runtimes'
    intra-op threads; ``max_batch``/``max_queue_delay_ms``: the dynamic batcher (0: off);
    ``key``: the HMAC key of signed files.
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
            "key": key,
        }
        self._entries: dict[str, _Entry] = {}
        self._entries_lock = threading.Lock()
        self._closed = False
        self._poller: threading.Thread | None = None
        self._stop = threading.Event()

    # -- files ------------------------------------------------------------------------------------
    def scan(self) -> dict[str, list[Path]]:
        """Model name -> the published files with that stem (normally one)."""
        found: dict[str, list[Path]] = {}
        try:
            paths = sorted(self.root.iterdir())
        except OSError as exc:
            log.error("cannot list %s: %s", self.root, exc)
            return found
        for p in paths:
            if is_candidate(p) and p.is_file():
                found.setdefault(p.stem, []).append(p)
        return found

    def _entry(self, name: str, create: bool = False) -> _Entry | None:
        with self._entries_lock:
            entry = self._entries.get(name)
            if entry is None and create:
                entry = self._entries[name] = _Entry(name)
            return entry

    # -- loading ----------------------------------------------------------------------------------
    def load_all(self) -> None:
        """Load every model file of the directory (failures are recorded in the index, not raised)."""
        for name in self.scan():
            try:
                self.load(name)
            except (ModelLoadError, ModelNotFound) as exc:
                log.error("model %s: %s", name, exc)

    def load(self, name: str) -> ServedModel:
        """(Re)load model ``name`` from its file; see the module docstring. Raises ModelNotFound when
        no file has that name, ModelLoadError when the file fails (the old version keeps serving)."""
        files = self.scan().get(name)
        if files is None:
            entry = self._entry(name)
            if entry is not None and entry.model is None:
                entry.reason = "no model file"
            raise ModelNotFound(
                f"no model file named {name!r} in {self.root} (files: <name>{'|'.join(model_suffixes())})"
            )
        entry = self._entry(name, create=True)
        with entry.lock:  # one load per model at a time; inference never takes this lock
            entry.unloaded = entry.removed = False
            if len(files) > 1:
                return self._failed(
                    entry,
                    ModelLoadError(
                        f"model {name!r} is ambiguous: {', '.join(p.name for p in files)}; keep one file per name"
                    ),
                )
            path = files[0]
            entry.stamp = _stamp(path)
            old = entry.model
            if old is None:
                entry.state = "LOADING"
            try:
                new = ServedModel(name, path, **self._options)
            except ModelLoadError as exc:
                return self._failed(entry, exc)
            if old is not None and old.version == new.version and old.path == new.path:
                new.close()  # same content: keep the serving one
                entry.reason, entry.state = "", "READY"
                return old
            entry.model = new  # the swap: one reference assignment
            entry.state, entry.reason = "READY", ""
            log.info("model %s: serving version %s (%s, %s)", name, new.version, path.name, new.runtime)
        if old is not None:
            old.close()  # drains its batcher; requests holding it finish on it
        return new

    def _failed(self, entry: _Entry, exc: ModelLoadError):
        entry.reason = str(exc)
        entry.state = "READY" if entry.model is not None else "UNAVAILABLE"
        if entry.model is not None:
            entry.reason = f"load failed, still serving version {entry.model.version}: {exc}"
        log.error("model %s: %s", entry.name, entry.reason)
        raise exc

    def unload(self, name: str) -> None:
        """Stop serving ``name`` (ModelNotFound if the repository has no such model)."""
        entry = self._entry(name)
        if entry is None:
            if name in self.scan():
                entry = self._entry(name, create=True)
            else:
                raise ModelNotFound(f"unknown model {name!r}")
        with entry.lock:
            old, entry.model = entry.model, None
            entry.state, entry.reason, entry.unloaded = "UNAVAILABLE", "unloaded", True
        if old is not None:
            old.close()
            log.info("model %s: unloaded version %s", name, old.version)

    # -- queries ----------------------------------------------------------------------------------
    def get(self, name: str, version: str | None = None) -> ServedModel:
        """The serving model ``name`` (of ``version``, when given)."""
        entry = self._entries.get(name)
        if entry is None:
            raise ModelNotFound(f"unknown model {name!r}")
        model = entry.model
        if model is None:
            raise ModelNotReady(f"model {name!r} is not ready: {entry.reason or entry.state.lower()}")
        if version and version != model.version:
            raise ModelNotFound(f"model {name!r} has no version {version!r} (serving {model.version})")
        return model

    def index(self) -> list[dict]:
        """The V2 repository index: ``[{"name", "version", "state", "reason"}]`` of every model file
        and every model loaded, sorted by name (``version`` is "" when none is serving)."""
        names = set(self.scan()) | set(self._entries)
        out = []
        for name in sorted(names):
            entry = self._entries.get(name)
            model = entry.model if entry else None
            out.append(
                {
                    "name": name,
                    "version": model.version if model else "",
                    "state": entry.state if entry else "UNAVAILABLE",
                    "reason": entry.reason if entry else "not loaded",
                }
            )
        return out

    def models(self) -> list[ServedModel]:
        return [e.model for e in list(self._entries.values()) if e.model is not None]

    def ready(self) -> bool:
        """Server readiness: not shutting down, and every model that is not unloaded has a version serving."""
        if self._closed:
            return False
        return all(e.model is not None for e in list(self._entries.values()) if not e.unloaded)

    # -- polling ----------------------------------------------------------------------------------
    def poll_once(self) -> None:
        """Load new and changed files, unload models whose file is gone (not explicitly unloaded ones)."""
        files = self.scan()
        for name, paths in files.items():
            entry = self._entries.get(name)
            if entry is not None and entry.unloaded and not entry.removed:
                continue  # unloaded on request: stays unloaded until a load request
            stamp = _stamp(paths[0]) if len(paths) == 1 else tuple(_stamp(p) for p in paths)
            if entry is None or entry.stamp != stamp:
                try:
                    self.load(name)
                except (ModelLoadError, ModelNotFound) as exc:
                    log.error("poll: model %s: %s", name, exc)
                    if entry is not None or self._entries.get(name):
                        self._entries[name].stamp = stamp  # do not retry an unchanged bad file
        for name in list(self._entries):
            entry = self._entries[name]
            if name not in files and entry.model is not None:
                self.unload(name)
                entry.reason, entry.removed = "model file removed", True

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


__all__ = ["ModelRepository", "is_candidate"]
