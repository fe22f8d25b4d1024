"""Read-only and full destinations (issue 11 item 6): ``-o`` into a folder that cannot be written fails
before any training or exporting, with exit status 2 and one line; a disk that fills up during the
write fails with exit status 2 and one line, leaves no temporary file and an existing output as it was.

Each case runs twice where the machine allows: for real (``chattr +i`` folder, a full 64 KiB tmpfs;
skipped without the rights) and with the failure mocked in-process (always).
"""

from __future__ import annotations

import errno
import os
import zipfile
from pathlib import Path

import pytest
from rel_support import cli, fill


def _one_error_line(stderr: str, prog: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), stderr
    return lines[0]


def _temporaries(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if ".tmp" in p.name]


# -- read-only folder, for real -------------------------------------------------------------------
def test_train_into_read_only_folder_fails_first(immutable_folder):
    done = cli("train", "--data", "digits", "--model", "nb", "--epochs", "50", "-o", immutable_folder / "m.bnc")
    assert done.returncode == 2
    line = _one_error_line(done.stderr, "bnc-train")
    assert "not writable" in line and str(immutable_folder) in line
    assert done.stdout == ""  # nothing trained, nothing reported


def test_export_into_read_only_folder_fails_first(immutable_folder, digits_model):
    done = cli("export", digits_model, "--format", "onnx", "-o", immutable_folder / "m.onnx")
    assert done.returncode == 2
    assert "not writable" in _one_error_line(done.stderr, "bnc-export")
    assert done.stdout == ""


# -- read-only folder, mocked (root ignores permission bits) -----------------------------------------
def _refuse_writes(monkeypatch, folder: Path):
    real = os.access

    def access(path, mode, *args, **kwargs):
        if Path(path) == folder and mode & os.W_OK:
            return False
        return real(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "access", access)


def test_train_read_only_mocked(tmp_path, monkeypatch, capsys):
    import bnc_deploy.datasets
    from bnc_deploy.cli.train import main

    _refuse_writes(monkeypatch, tmp_path)
    monkeypatch.setattr(bnc_deploy.datasets, "load_dataset", lambda *a, **k: pytest.fail("data loaded before -o check"))
    with pytest.raises(SystemExit) as exit_:
        main(["--data", "digits", "--model", "nb", "-o", str(tmp_path / "m.bnc")])
    assert exit_.value.code == 2
    assert "not writable" in _one_error_line(capsys.readouterr().err, "bnc-train")


def test_export_read_only_mocked(tmp_path, monkeypatch, capsys, digits_model):
    import bnc_deploy.verify
    from bnc_deploy.cli.export import main

    _refuse_writes(monkeypatch, tmp_path)
    monkeypatch.setattr(bnc_deploy.verify, "export_file", lambda *a, **k: pytest.fail("exported before -o check"))
    assert main([str(digits_model), "--format", "onnx", "-o", str(tmp_path / "m.onnx")]) == 2
    assert "not writable" in _one_error_line(capsys.readouterr().err, "bnc-export")


# -- full disk, for real ---------------------------------------------------------------------------
def test_train_on_full_disk(full_disk, digits_model):
    old = full_disk / "m.bnc"
    old.write_bytes(b"the previous model file")
    fill(full_disk)
    done = cli("train", "--data", "digits", "--model", "nb", "--init", "ml", "--epochs", "0", "-o", old, "--quiet")
    assert done.returncode == 2
    assert "No space left on device" in _one_error_line(done.stderr, "bnc-train")
    assert old.read_bytes() == b"the previous model file"
    assert _temporaries(full_disk) == []


def test_export_on_full_disk(full_disk, digits_model):
    old = full_disk / "m.onnx"
    old.write_bytes(b"the previous export")
    fill(full_disk)
    done = cli("export", digits_model, "--format", "onnx", "-o", old)
    assert done.returncode == 2
    assert "No space left on device" in _one_error_line(done.stderr, "bnc-export")
    assert old.read_bytes() == b"the previous export"
    assert _temporaries(full_disk) == []


# -- full disk, mocked -----------------------------------------------------------------------------
def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("where", ["write", "fsync"])
def test_train_enospc_mocked(tmp_path, monkeypatch, capsys, where):
    from bnc_deploy.cli.train import main

    old = tmp_path / "m.bnc"
    old.write_bytes(b"previous")
    if where == "write":
        monkeypatch.setattr(zipfile.ZipFile, "writestr", _enospc)
    else:  # delayed allocation: the data is accepted, the flush to disk fails
        monkeypatch.setattr(os, "fsync", _enospc)
    with pytest.raises(SystemExit) as exit_:
        main(["--data", "digits", "--model", "nb", "--init", "ml", "--epochs", "0", "-o", str(old), "--quiet"])
    assert exit_.value.code == 2
    assert "No space left on device" in _one_error_line(capsys.readouterr().err, "bnc-train")
    assert old.read_bytes() == b"previous"
    assert _temporaries(tmp_path) == []


@pytest.mark.parametrize("where", ["write", "fsync"])
def test_export_enospc_mocked(tmp_path, monkeypatch, capsys, digits_model, where):
    from bnc_deploy.cli.export import main

    old = tmp_path / "m.onnx"
    old.write_bytes(b"previous")
    if where == "write":
        real = Path.write_bytes
        monkeypatch.setattr(
            Path, "write_bytes", lambda self, data: _enospc() if ".tmp" in self.name else real(self, data)
        )
    else:
        monkeypatch.setattr(os, "fsync", _enospc)
    assert main([str(digits_model), "--format", "onnx", "-o", str(old)]) == 2
    assert "No space left on device" in _one_error_line(capsys.readouterr().err, "bnc-export")
    assert old.read_bytes() == b"previous"
    assert _temporaries(tmp_path) == []


# -- permissions of published files ----------------------------------------------------------------
def test_published_file_has_ordinary_permissions(tmp_path):
    """Not mkstemp's private 0o600: 0o666 minus the umask for a new file, the old mode when replacing."""
    from bnc_deploy.fileio import atomic_write_bytes, stray_temporaries

    old_mask = os.umask(0o022)
    try:
        target = tmp_path / "m.bin"
        atomic_write_bytes(target, b"one")
        assert target.stat().st_mode & 0o777 == 0o644
        target.chmod(0o640)
        atomic_write_bytes(target, b"two")
        assert target.stat().st_mode & 0o777 == 0o640 and target.read_bytes() == b"two"
        assert stray_temporaries(target) == []
    finally:
        os.umask(old_mask)
