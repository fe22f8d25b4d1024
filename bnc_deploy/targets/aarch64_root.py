"""The emulated aarch64 machine of ``bnc_deploy.targets.aarch64``: an arm64 Debian root, built once and cached.

What it is
----------
A Debian 12 (bookworm) arm64 root made by ``debootstrap --arch=arm64 --variant=minbase`` with
:data:`DEBIAN_INCLUDE` (python3 3.11, venv, gcc for C exports), and a virtual environment
``/venv`` in it where ``pip`` (run inside the root) installs the aarch64 wheels from PyPI of
:data:`PIP_PACKAGES`, pinned to the versions installed on the host where the host has them. Its
programs run on the x86_64 host through ``qemu-user-static`` registered with the kernel's
``binfmt_misc`` (flag ``F``: the kernel opens the emulator at registration, so ``chroot`` needs
no copy of it inside the root). User-mode emulation is not a machine model: instruction results
are the aarch64 ones, timings are not an aarch64 CPU's.

Cache and idempotence
---------------------
The root lives in ``<cache>/root``, ``<cache>`` = ``$BNC_DEPLOY_TARGET_CACHE/aarch64`` else
``~/.cache/bnc-deploy/aarch64``. It is built in ``<cache>/.building-*`` and renamed into place only
when complete, with a stamp (:data:`STAMP`: the recipe, its SHA-256, versions, timings) written
last: an interrupted setup never leaves a root that looks finished, and the next setup removes
the leftovers (after unmounting anything mounted inside them). When debootstrap finished but a
later step failed (no PyPI access, say), the debootstrapped tree is kept as ``<cache>/base``
(marked with its own hash, never stamped, so never taken for a root) and the next setup starts
from it. :func:`setup` reuses a root whose
stamp carries the current recipe hash (the recipe: suite, packages, pins, Python), rebuilds
otherwise (or with ``force``). One setup at a time per cache (an ``flock`` on ``<cache>/.lock``).

Requirements (each missing one is a one-line :class:`TargetSetupError` saying what to install):
root (``debootstrap``, ``chroot`` and ``mount`` need it), the Debian packages
:data:`DEBIAN_PACKAGES`, ``binfmt_misc`` mounted (mounted here when it is not) with an enabled
``qemu-aarch64`` entry (enabled here with ``update-binfmts`` of ``binfmt-support`` or from
qemu-user-static's ``/usr/lib/binfmt.d`` file, as systemd-binfmt would, when a container has no
systemd), and network access to a Debian mirror and PyPI (setup only).

The mirror (:func:`debian_mirror`): ``--mirror URL`` (``setup(mirror=)``), else
``$BNC_DEPLOY_DEBIAN_MIRROR``, else the first ``deb`` entry of the Debian archive in the host's
apt sources (``/etc/apt/sources.list``, then ``sources.list.d/*.list`` and deb822 ``*.sources``,
in apt's order; :mod:`bnc_deploy.targets.apt_sources`), else a TargetSetupError saying so. No
mirror is built in. It is not part of the recipe (nor of the cache key): a root built from one
mirror is reused whatever the next one is.

Running inside (:func:`run_in_root`): ``chroot ROOT /venv/bin/python ...`` with a clean
environment (:mod:`bnc_deploy.targets.aarch64_env`). ``/proc`` is mounted for the call and
unmounted after; ``/sys`` is never mounted (cpuinfo, inside onnxruntime, crashes under qemu when
it reads the host's /sys).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from importlib import metadata as importlib_metadata
from pathlib import Path

from bnc_deploy.errors import BncDeployError
from bnc_deploy.targets import apt_sources
from bnc_deploy.targets.aarch64_env import chroot_argv, pip_network_env

#: Debian packages the host needs (bookworm names).
DEBIAN_PACKAGES = ("debootstrap", "qemu-user-static", "binfmt-support")
INSTALL_HINT = "apt-get install --no-install-recommends " + " ".join(DEBIAN_PACKAGES)
SUITE = "bookworm"
#: Packages added to the minbase root: Python 3.11 with venv/ensurepip, CA certificates for pip,
#: and gcc + libc headers so C exports compile inside (the native runtime).
DEBIAN_INCLUDE = ("python3", "python3-venv", "ca-certificates", "gcc", "libc6-dev")
#: Distribution name -> import name; pinned to the host's version when installed there.
PIP_PACKAGES = {"numpy": "numpy", "onnx": "onnx", "onnxruntime": "onnxruntime", "ai-edge-litert": "ai_edge_litert"}
#: The Python of the root's venv (Debian 12's python3 is 3.11, the project's Python).
VENV_PYTHON = "/venv/bin/python"
#: The stamp written last into a complete root.
STAMP = "bnc-deploy-root.json"
#: Recipe revision: bump when the steps change in a way the fields below do not show.
RECIPE_REVISION = 1
DEBOOTSTRAP_TIMEOUT_S, PIP_TIMEOUT_S, RUN_TIMEOUT_S = 3600, 3600, 1800
BINFMT_DIR = Path("/proc/sys/fs/binfmt_misc")
BINFMT_NAME = "qemu-aarch64"


class TargetSetupError(BncDeployError):
    """The aarch64 root cannot be built or entered (the message says what to install or do)."""


# ================================================================================================
# Where, and what
# ================================================================================================
def cache_dir(cache: str | os.PathLike | None = None) -> Path:
    """``cache``, else ``$BNC_DEPLOY_TARGET_CACHE/aarch64``, else ``~/.cache/bnc-deploy/aarch64``."""
    if cache is not None:
        return Path(cache)
    base = os.environ.get("BNC_DEPLOY_TARGET_CACHE")
    return Path(base) / "aarch64" if base else Path.home() / ".cache" / "bnc-deploy" / "aarch64"


def root_dir(cache=None) -> Path:
    return cache_dir(cache) / "root"


def pip_pins() -> dict[str, str]:
    """``name -> "name==host version"`` (``"name"``, unpinned, when the host lacks it)."""
    pins = {}
    for name in PIP_PACKAGES:
        try:
            pins[name] = f"{name}=={importlib_metadata.version(name)}"
        except importlib_metadata.PackageNotFoundError:
            pins[name] = name
    return pins


def recipe() -> dict:
    """Everything that decides the root's contents; its hash is the cache key."""
    return {
        "revision": RECIPE_REVISION,
        "arch": "arm64",
        "suite": SUITE,
        "variant": "minbase",
        "include": list(DEBIAN_INCLUDE),
        "pip": sorted(pip_pins().values()),
        "python": "3.11",
    }


def recipe_hash(r: dict | None = None) -> str:
    return hashlib.sha256(json.dumps(r or recipe(), sort_keys=True).encode()).hexdigest()


def read_stamp(root: Path) -> dict | None:
    try:
        return json.loads((root / STAMP).read_text())
    except (OSError, ValueError):
        return None


def root_status(cache=None) -> str | None:
    """None when a complete root with the current recipe is cached, else why not (for skips)."""
    root = root_dir(cache)
    stamp = read_stamp(root)
    if stamp is None:
        return f"no aarch64 root in {root} (run: bnc-target setup --target aarch64)"
    if stamp.get("recipe_sha256") != recipe_hash():
        return f"the aarch64 root in {root} was built from another recipe (run: bnc-target setup --target aarch64)"
    return None


# ================================================================================================
# Host checks
# ================================================================================================
def check_host() -> dict:
    """Root, the tools, and binfmt_misc with qemu-aarch64 enabled; TargetSetupError if not."""
    if os.geteuid() != 0:
        raise TargetSetupError("the aarch64 target needs root (debootstrap, chroot and mount do); run it as root")
    tools = {}
    for tool, package in (
        ("debootstrap", "debootstrap"),
        ("qemu-aarch64-static", "qemu-user-static"),
        ("chroot", "coreutils"),
        ("mount", "mount"),
    ):
        found = shutil.which(tool)
        if found is None:
            raise TargetSetupError(
                f"{tool} not found on PATH (Debian package {package}); on Debian/Ubuntu: {INSTALL_HINT}"
            )
        tools[tool] = found
    ensure_binfmt()
    tools["qemu"] = _first_line([tools["qemu-aarch64-static"], "--version"])
    return tools


def _binfmt_entry() -> str | None:
    try:
        return (BINFMT_DIR / BINFMT_NAME).read_text()
    except OSError:
        return None


def ensure_binfmt() -> None:
    """Mount binfmt_misc if needed and make sure the qemu-aarch64 entry is enabled with flag F.

    Debian's qemu-user-static registers it through systemd-binfmt or binfmt-support when
    installed; a container without systemd (or one started before the install) may have neither
    the file system mounted nor the entry, so both are done here when missing.
    """
    if not (BINFMT_DIR / "register").exists():
        done = _quiet(["mount", "-t", "binfmt_misc", "binfmt_misc", str(BINFMT_DIR)])
        if done is not None or not (BINFMT_DIR / "register").exists():
            raise TargetSetupError(
                f"binfmt_misc is not mounted at {BINFMT_DIR} and mounting it failed ({done}); "
                "a container must allow it (e.g. --privileged), or mount it on the host"
            )
    entry = _binfmt_entry()
    if entry is None or not entry.startswith("enabled"):
        if shutil.which("update-binfmts") and Path("/usr/share/binfmts", BINFMT_NAME).exists():
            _quiet(["update-binfmts", "--enable", BINFMT_NAME])  # binfmt-support's registry
        entry = _binfmt_entry()
    if entry is None:
        conf = Path("/usr/lib/binfmt.d", f"{BINFMT_NAME}.conf")  # what systemd-binfmt would write
        if conf.exists():
            line = next((ln for ln in conf.read_text().splitlines() if ln.startswith(":")), "")
            try:
                (BINFMT_DIR / "register").write_text(line)
            except OSError as exc:
                raise TargetSetupError(f"cannot register {conf} with binfmt_misc: {exc}") from None
        entry = _binfmt_entry()
    if entry is None:
        raise TargetSetupError(
            f"no {BINFMT_NAME} entry in {BINFMT_DIR} (qemu-user-static registers it); on Debian/Ubuntu: {INSTALL_HINT}"
        )
    if not entry.startswith("enabled"):
        raise TargetSetupError(
            f"the {BINFMT_NAME} binfmt entry is disabled; run: update-binfmts --enable {BINFMT_NAME}"
        )
    flags = next((ln.split()[1] for ln in entry.splitlines() if ln.startswith("flags:") and len(ln.split()) > 1), "")
    if "F" not in flags:
        raise TargetSetupError(
            f"the {BINFMT_NAME} binfmt entry lacks flag F (fix binary), so chroot cannot find "
            "the emulator; reinstall qemu-user-static (its entries have it)"
        )


def _quiet(cmd: list[str]) -> str | None:
    """Run ``cmd``; None on success, else its last error line."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None if done.returncode == 0 else (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]


def _first_line(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return (out.strip().splitlines() or [""])[0]


# ================================================================================================
# The Debian mirror: --mirror, else $BNC_DEPLOY_DEBIAN_MIRROR, else the host's apt sources
# (bnc_deploy.targets.apt_sources)
# ================================================================================================
MIRROR_ENV = "BNC_DEPLOY_DEBIAN_MIRROR"


def debian_mirror(mirror: str | None = None, etc_apt: Path | None = None) -> tuple[str, str]:
    """``(mirror URL, where it came from)`` for debootstrap: ``mirror`` (``--mirror``), else
    ``$BNC_DEPLOY_DEBIAN_MIRROR``, else the host's apt sources; TargetSetupError naming the ways to
    give one when none does. No built-in default: a host that reaches Debian has it in its apt sources."""
    if mirror:
        return mirror, "--mirror"
    if os.environ.get(MIRROR_ENV):
        return os.environ[MIRROR_ENV], f"${MIRROR_ENV}"
    found = apt_sources.host_debian_mirror(etc_apt)
    if found is not None:
        return found[0], f"the host's apt sources, {found[1]}"
    etc_apt = apt_sources.ETC_APT if etc_apt is None else etc_apt
    raise TargetSetupError(
        f"no Debian mirror for debootstrap: the host's apt sources ({etc_apt / 'sources.list'}, "
        f"{etc_apt / 'sources.list.d'}/*.list and *.sources) have no 'deb' entry of the Debian archive (a suite "
        f"such as {SUITE}, component main); pass --mirror URL (or set ${MIRROR_ENV}), or add a Debian source "
        "to the host's apt sources"
    )


# ================================================================================================
# Mounts: never delete through one
# ================================================================================================
def mounts_under(path: Path) -> list[str]:
    """Mount points at or below ``path`` (from /proc/self/mountinfo), deepest first."""
    base = os.path.realpath(path)
    found = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].encode().decode("unicode_escape")
            if point == base or point.startswith(base + "/"):
                found.append(point)
    return sorted(found, key=len, reverse=True)


def unmount_all(path: Path) -> None:
    for point in mounts_under(path):
        _quiet(["umount", point]) and _quiet(["umount", "-l", point])


def remove_tree(path: Path) -> None:
    """Delete a (partial) root, after unmounting everything inside it; refuse while anything stays
    mounted (deleting through a bind mount of /dev or /proc would reach the host's files)."""
    if not path.exists():
        return
    unmount_all(path)
    left = mounts_under(path)
    if left:
        raise TargetSetupError(f"{left[0]} is still mounted; unmount it before {path} can be removed")
    shutil.rmtree(path)


@contextlib.contextmanager
def proc_mounted(root: Path):
    """``/proc`` mounted in the root for the duration (not /sys: see the module docstring)."""
    target = root / "proc"
    target.mkdir(exist_ok=True)
    mine = os.path.realpath(target) not in mounts_under(target)  # else someone else's mount: leave it
    if mine:
        err = _quiet(["mount", "-t", "proc", "proc", str(target)])
        if err is not None:
            raise TargetSetupError(f"cannot mount /proc in {root}: {err}")
    try:
        yield
    finally:
        if mine:
            _quiet(["umount", str(target)]) and _quiet(["umount", "-l", str(target)])


# ================================================================================================
# Setup
# ================================================================================================
def _say(progress, text: str) -> None:
    if progress is not None:
        progress(text)


#: debootstrap's per-package lines (hundreds): kept in the log, not shown as progress.
_PER_PACKAGE = re.compile(r"^I: (?:(?:Retrieving|Validating) \S+ \S+|(?:Extracting|Unpacking|Configuring) \S+\.\.\.)$")


def _stream(cmd: list[str], log: Path, progress, prefix: str, timeout: float, what: str) -> None:
    """Run ``cmd``, its output to ``log`` and (lines starting with ``prefix``, all when "", less
    debootstrap's per-package lines) as progress; TargetSetupError naming the log's last lines
    when it fails."""
    with open(log, "ab") as out:
        out.write(("$ " + " ".join(cmd) + "\n").encode())
        out.flush()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        start = time.monotonic()
        try:
            for raw in proc.stdout:
                out.write(raw)
                line = raw.decode(errors="replace").rstrip()
                if line and line.startswith(prefix) and not _PER_PACKAGE.match(line):
                    _say(progress, f"    {line}")
                if time.monotonic() - start > timeout:
                    proc.kill()
                    raise TargetSetupError(f"{what} took more than {timeout:.0f} s; see {log}")
            rc = proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if rc != 0:
        tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()][-3:]
        raise TargetSetupError(f"{what} failed (exit {rc}): {' | '.join(tail)}; full log: {log}")


def setup(cache=None, *, mirror: str | None = None, force: bool = False, progress=print) -> dict:
    """Build (or reuse) the cached aarch64 root; return its stamp plus ``cached`` and ``seconds``.

    ``progress``: a function taking one line (None: silent). Raises TargetSetupError.
    """
    t0 = time.monotonic()
    tools = check_host()
    cache = cache_dir(cache)
    cache.mkdir(parents=True, exist_ok=True)
    root = cache / "root"
    want = recipe()
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for stale in cache.glob(".building-*"):  # an interrupted setup's leftovers (we hold the lock)
            _say(progress, f"removing the unfinished root {stale}")
            remove_tree(stale)
        stamp = read_stamp(root)
        if stamp is not None and stamp.get("recipe_sha256") == recipe_hash(want) and not force:
            smoke = _smoke(root)
            _say(progress, f"aarch64 root cached in {root} ({smoke}); checked in {time.monotonic() - t0:.1f} s")
            return {**stamp, "root": str(root), "cached": True, "seconds": round(time.monotonic() - t0, 1)}
        base = cache / "base"
        reuse_base = not force and _base_marker(base) == base_hash(want)  # a debootstrap kept from a failed setup
        # Only debootstrap downloads from the mirror: a cached root or a kept base needs none, and the
        # mirror is not in the recipe (any mirror gives the same packages), so changing it rebuilds nothing.
        source = None if reuse_base else debian_mirror(mirror)
        build = Path(tempfile.mkdtemp(prefix=".building-", dir=cache))
        if reuse_base:
            _say(progress, f"reusing the debootstrapped base {base} (kept from a setup that failed later)")
            build.rmdir()
            os.replace(base, build)
            shutil.rmtree(build / "venv", ignore_errors=True)
        else:
            remove_tree(base)
        log = cache / "setup.log"
        log.write_text("")
        timings = {}
        try:
            _build(build, want, source, log, progress, timings)
            smoke = _smoke(build)
            stamp = {
                "recipe": want,
                "recipe_sha256": recipe_hash(want),
                "machine": smoke,
                "versions": _versions(build),
                "qemu": tools["qemu"],
                "timings_s": timings,
                "built_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            (build / STAMP).write_text(json.dumps(stamp, indent=2) + "\n")  # last: the root is complete
            old = None
            if root.exists():
                old = Path(tempfile.mkdtemp(prefix=".building-old-", dir=cache))
                os.replace(root, old / "root")
            os.replace(build, root)
            if old is not None:
                remove_tree(old)
        except BaseException:
            unmount_all(build)
            if _base_marker(build) == base_hash(want) and not mounts_under(build):
                os.replace(build, base)  # debootstrap finished: keep it for the next try (no stamp: not a root)
            else:
                remove_tree(build)
            raise
    seconds = round(time.monotonic() - t0, 1)
    _say(progress, f"aarch64 root ready in {root} ({seconds:.0f} s)")
    return {**stamp, "root": str(root), "cached": False, "seconds": seconds}


#: Marker of a finished debootstrap stage inside a build (the base hash).
BASE_MARKER = ".bnc-deploy-debootstrap-done"


def base_hash(r: dict) -> str:
    """Hash of the debootstrap part of the recipe (what ``<cache>/base`` holds)."""
    return recipe_hash({k: r[k] for k in ("revision", "arch", "suite", "variant", "include")})


def _base_marker(folder: Path) -> str | None:
    try:
        return (folder / BASE_MARKER).read_text().strip()
    except OSError:
        return None


def _build(build: Path, want: dict, source: tuple[str, str] | None, log: Path, progress, timings: dict) -> None:
    """``source``: :func:`debian_mirror`'s ``(URL, origin)``; None when ``build`` is a kept base."""
    step = time.monotonic()
    if _base_marker(build) == base_hash(want):
        _say(progress, "[1/3] debootstrap: done before (kept base)")
        timings["debootstrap"] = 0.0
        return _build_venv(build, want, log, progress, timings)
    mirror, origin = source
    _say(
        progress,
        f"[1/3] debootstrap {SUITE} arm64 ({want['variant']}, + {', '.join(want['include'])}) "
        f"from {mirror} ({origin}) into {build}",
    )
    _stream(
        [
            "debootstrap",
            "--arch=arm64",
            f"--variant={want['variant']}",
            "--include=" + ",".join(want["include"]),
            SUITE,
            str(build),
            mirror,
        ],
        log,
        progress,
        "I: ",
        DEBOOTSTRAP_TIMEOUT_S,
        "debootstrap",
    )
    unmount_all(build)  # debootstrap unmounts what it mounted; be sure before anything else
    (build / BASE_MARKER).write_text(base_hash(want) + "\n")
    timings["debootstrap"] = round(time.monotonic() - step, 1)
    _build_venv(build, want, log, progress, timings)


def _build_venv(build: Path, want: dict, log: Path, progress, timings: dict) -> None:
    step = time.monotonic()
    _say(progress, "[2/3] python3 -m venv /venv inside the root (emulated)")
    shutil.copyfile("/etc/resolv.conf", build / "etc" / "resolv.conf")  # pip inside needs DNS
    pip_env = pip_network_env(build)
    with proc_mounted(build):
        _stream(
            chroot_argv(build, ["/usr/bin/python3", "-m", "venv", "/venv"]),
            log,
            progress,
            "",
            600,
            "python3 -m venv inside the root",
        )
        timings["venv"] = round(time.monotonic() - step, 1)
        step = time.monotonic()
        pins = want["pip"]
        _say(progress, f"[3/3] pip install {' '.join(pins)} inside the root (aarch64 wheels from PyPI, emulated)")
        _stream(
            chroot_argv(
                build,
                [
                    VENV_PYTHON,
                    "-m",
                    "pip",
                    "install",
                    "--no-cache-dir",
                    "--only-binary=:all:",
                    "--disable-pip-version-check",
                    "--progress-bar",
                    "off",
                    *pins,
                ],
                pip_env,
            ),
            log,
            progress,
            "Successfully",
            PIP_TIMEOUT_S,
            "pip install inside the root (needs PyPI access; "
            "a package without an aarch64 wheel for Python 3.11 fails here)",
        )
    timings["pip"] = round(time.monotonic() - step, 1)


def run_in_root(
    root: Path, argv: list[str], *, env: dict | None = None, timeout: float = RUN_TIMEOUT_S
) -> subprocess.CompletedProcess:
    """Run ``argv`` inside the root (emulated aarch64), /proc mounted; return the finished process."""
    with proc_mounted(root):
        try:
            return subprocess.run(
                chroot_argv(root, argv, env), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
            )
        except subprocess.TimeoutExpired:
            raise TargetSetupError(
                f"{' '.join(argv[:3])} inside the aarch64 root took more than {timeout:.0f} s"
            ) from None


def _smoke(root: Path) -> str:
    """The root's ``platform.machine()`` (must be aarch64: the emulator really runs it)."""
    done = run_in_root(root, [VENV_PYTHON, "-c", "import platform; print(platform.machine())"], timeout=300)
    machine = done.stdout.strip()
    if done.returncode != 0 or machine != "aarch64":
        raise TargetSetupError(
            f"the aarch64 root in {root} does not run ({machine or 'no output'}; "
            f"{(done.stderr.strip().splitlines() or [''])[-1]}); is qemu-aarch64 registered "
            "with binfmt_misc? (update-binfmts --display qemu-aarch64)"
        )
    return machine


def _versions(root: Path) -> dict:
    code = (
        "import json, sys, platform\nfrom importlib import metadata as m\n"
        f"names = {list(PIP_PACKAGES)!r}\n"
        "print(json.dumps({'python': platform.python_version(), 'machine': platform.machine(), "
        "**{n: m.version(n) for n in names}}))"
    )
    done = run_in_root(root, [VENV_PYTHON, "-c", code], timeout=300)
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise TargetSetupError(
            f"cannot read the package versions in {root}: {(done.stderr.strip().splitlines() or [''])[-1]}"
        ) from None


if __name__ == "__main__":  # pragma: no cover - the CLI is bnc-target / python -m bnc_deploy.targets.aarch64
    sys.exit("use: bnc-target setup --target aarch64")
