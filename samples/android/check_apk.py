"""Run the code inside a built APK on the desktop JVM: its ``classes.dex``, turned back into JVM bytecode.

    .venv/bin/python samples/android/check_apk.py APP.apk [--jar FROMDEX.jar]

Takes ``classes.dex`` and the assets (``model.bnc``, ``check.txt``) out of the APK, converts the dex to a jar
with enjarify (Debian package ``enjarify``), and runs the app's own check (``CheckSet``: the model's check
rows against the Python reference's labels and score hash) from that jar. Prints its line; exit status 0
when it passed, 1 when it failed, 2 when a step could not run. ``--jar`` keeps the jar (its ``bncdeploy.Main``
is the predictor's command line, e.g. ``java -cp FROMDEX.jar bncdeploy.Main --check-set --scores hex M.bnc``).

enjarify 1.0.3 (Debian 12) translates ``const-wide/32`` without sign extension: a negative 32-bit literal
loaded into a long (``Integer.MIN_VALUE`` in a comparison, for one) becomes positive in the jar, though
the dex is right (the Dalvik format sign-extends it). The conversion here runs enjarify with that one
instruction decoded as the format defines; everything else is enjarify's own translation.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

CHECK_MAIN = "io.github.bncdeploy.javasample.CheckSet"
#: enjarify's command line, with const-wide/32 (opcode 0x17) sign-extended to 64 bits as the dex format says.
ENJARIFY = """
import sys
import enjarify.dalvikformats as formats
from enjarify.main import main

_decode = formats.decode


def decode(shorts, pos, opcode):
    newpos, args = _decode(shorts, pos, opcode)
    if opcode == 0x17:
        args[-1] = formats.sign(args[-1] % (1 << 32), 32)
    return newpos, args


formats.decode = decode
sys.argv[0] = "enjarify"
main()
"""


class CheckError(Exception):
    """A step that could not run: the message is the one line printed."""


def enjarify_python() -> str:
    """A Python that imports enjarify: Debian's (the package installs it for /usr/bin/python3), or this one."""
    for python in ("/usr/bin/python3", sys.executable, shutil.which("python3")):
        if python and Path(python).is_file():
            done = subprocess.run([python, "-c", "import enjarify.main"], capture_output=True, check=False)
            if done.returncode == 0:
                return python
    raise CheckError("enjarify is not installed (Debian 12: apt-get install enjarify)")


def dex_to_jar(dex: Path, jar: Path) -> Path:
    """``classes.dex`` -> a jar of JVM classes (enjarify, with the fix above); fails unless every class converts."""
    done = subprocess.run(
        [enjarify_python(), "-O", "-c", ENJARIFY, "--force", "-o", str(jar), str(dex)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0 or " 0 classes had errors" not in done.stdout:
        raise CheckError(f"enjarify failed on {dex}: {(done.stdout + done.stderr).strip()}")
    return jar


def extract(apk: Path, folder: Path) -> dict[str, Path]:
    """``classes.dex``, ``assets/model.bnc`` and ``assets/check.txt`` of the APK, written into ``folder``."""
    if not apk.is_file():
        raise CheckError(f"{apk}: no such APK")
    out = {}
    try:
        with zipfile.ZipFile(apk) as zf:
            for name in ("classes.dex", "assets/model.bnc", "assets/check.txt"):
                out[Path(name).name] = folder / Path(name).name
                out[Path(name).name].write_bytes(zf.read(name))
    except (zipfile.BadZipFile, KeyError) as exc:
        raise CheckError(f"{apk}: not an APK of the Java sample ({exc})") from exc
    return out


def run_check_set(jar: Path, model: Path, check: Path) -> subprocess.CompletedProcess:
    """The app's CheckSet from the jar on the JVM: exit 0 passed, 1 failed, 2 unreadable input."""
    java = shutil.which("java")
    if java is None:
        raise CheckError("java is not installed (Debian 12: apt-get install default-jdk-headless)")
    cmd = [java, "-cp", str(jar), CHECK_MAIN, str(model), str(check)]
    return subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=300)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="check_apk", description=__doc__.split("\n\n")[0])
    parser.add_argument("apk", type=Path)
    parser.add_argument("--jar", type=Path, help="keep the jar converted from classes.dex here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            files = extract(args.apk, Path(tmp))
            jar = dex_to_jar(files["classes.dex"], args.jar or Path(tmp) / "fromdex.jar")
            done = run_check_set(jar, files["model.bnc"], files["check.txt"])
        except CheckError as exc:
            print(f"check_apk: error: {exc}", file=sys.stderr)
            return 2
    print((done.stdout + done.stderr).strip())
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
