"""Build the Java sample (``samples/android/java``) into a signed APK with Debian's Android tools, no Gradle.

    .venv/bin/python samples/android/build_apk.py [MODEL.bnc] [-o OUT.apk]

Steps: ``javac`` (Java 8 level, against ``android.jar`` of API 23) compiles the app and the dependency-free
Java predictor (``clients/java/src/main/java``); ``dx`` turns the classes into ``classes.dex`` (minSdk 21);
``aapt`` packages the manifest, the resources and the assets (the model as ``model.bnc`` and ``check.txt``,
the Python reference's labels and score hash on the model's check rows); ``zipalign`` aligns; ``apksigner``
signs with a debug key (generated with ``keytool`` into the build folder on first use) and verifies; ``aapt
dump badging`` reads the result back. The APK is written to a temporary file and moved to OUT at the end.

``dx`` (Debian package ``dalvik-exchange``) and ``android.jar`` (``libandroid-23-java``) exist only in Debian
11 (bullseye): they are fetched once with ``apt-get download`` through a private sources list (the machine's
apt configuration is not used or changed) and cached in ``$BNC_DEPLOY_ANDROID_CACHE`` (default
``~/.cache/bnc-deploy/android``). The mirror is the host's Debian mirror, or ``$BNC_DEPLOY_DEBIAN_MIRROR``.
Without MODEL.bnc, an NB 3-bit model of the built-in ``digits`` data is trained into the build folder.

Exit status 0 on success; 1 with one ``build_apk: error: ...`` line on stderr otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
APP = HERE / "java"
REPO_ROOT = HERE.parent.parent
PREDICTOR_SOURCES = REPO_ROOT / "clients" / "java" / "src" / "main" / "java"
PACKAGE = "io.github.bncdeploy.javasample"
MIN_SDK = 21
#: Debian 11 packages and the files used from them (pinned: the build is reproducible).
DEBS = {"dalvik-exchange": "10.0.0+r36-1", "libandroid-23-java": "6.0.1+r72-6"}
DX_JAR = "usr/share/java/com.android.dx.jar"
ANDROID_JAR = "usr/share/java/com.android.android-23.jar"
DEBIAN_KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
DEFAULT_MIRROR = "http://deb.debian.org/debian"
#: Commands and the Debian 12 package that has each.
TOOLS = {
    "javac": "default-jdk-headless",
    "java": "default-jdk-headless",
    "keytool": "default-jdk-headless",
    "aapt": "aapt",
    "zipalign": "zipalign",
    "apksigner": "apksigner",
}
KEY_ALIAS, KEY_PASS = "androiddebugkey", "android"


class BuildError(Exception):
    """A failed step: the message is the one line printed."""


# -- tools -----------------------------------------------------------------------------------------------------


def check_tools(names=TOOLS) -> None:
    missing = [name for name in names if shutil.which(name) is None]
    if missing:
        packages = sorted({TOOLS.get(name, name) for name in missing})
        raise BuildError(f"missing tool(s) {', '.join(missing)} (Debian 12: apt-get install {' '.join(packages)})")


def run(cmd: list, cwd: Path | None = None) -> str:
    """Run a command; its output on success, else a BuildError naming it, with the last lines it printed."""
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-6:])
        raise BuildError(f"{_label(cmd)} failed (exit {done.returncode}): {tail}")
    return done.stdout


def _label(cmd: list) -> str:
    """``aapt package``, ``javac``, ``dx`` (for ``java -jar dx.jar``): the step, for error messages."""
    if cmd[:2] == ["java", "-jar"]:
        return Path(str(cmd[2])).stem
    words = [Path(str(cmd[0])).name, *(str(c) for c in cmd[1:2] if not str(c).startswith("-"))]
    return " ".join(words)


# -- dx and android.jar from Debian 11 ---------------------------------------------------------------------------


def debian_mirror() -> str:
    """``$BNC_DEPLOY_DEBIAN_MIRROR``, else the first ``.../debian`` URI of the host's apt sources."""
    if os.environ.get("BNC_DEPLOY_DEBIAN_MIRROR"):
        return os.environ["BNC_DEPLOY_DEBIAN_MIRROR"].rstrip("/")
    files = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*.list"))]
    files += sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
        for uri in re.findall(r"^\s*(?:URIs:|deb\s+(?:\[[^\]]*\]\s+)?)\s*(\S+)", text, flags=re.M):
            if uri.rstrip("/").endswith("/debian"):
                return uri.rstrip("/")
    return DEFAULT_MIRROR


def android_sdk(cache: Path) -> tuple[Path, Path]:
    """``(dx.jar, android.jar)`` from the cache, fetched and unpacked there first when absent."""
    dx, android = cache / "dx.jar", cache / "android-23.jar"
    if not (dx.is_file() and android.is_file()):
        check_tools(["apt-get", "dpkg-deb"])
        if not DEBIAN_KEYRING.is_file():
            raise BuildError(f"{DEBIAN_KEYRING} is missing (Debian package debian-archive-keyring)")
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache, prefix="fetch-") as tmp:
            fetch_debs(Path(tmp), cache)
    return dx, android


def fetch_debs(work: Path, cache: Path) -> None:
    mirror = debian_mirror()
    (work / "lists" / "partial").mkdir(parents=True)
    (work / "cache" / "archives" / "partial").mkdir(parents=True)
    (work / "sources.list").write_text(f"deb [signed-by={DEBIAN_KEYRING}] {mirror} bullseye main\n")
    options = [
        f"Dir::Etc::SourceList={work / 'sources.list'}",
        "Dir::Etc::SourceParts=/dev/null",
        f"Dir::State::Lists={work / 'lists'}",
        f"Dir::Cache={work / 'cache'}",
    ]
    if os.geteuid() == 0:  # apt would download as _apt, who cannot write here
        options.append("APT::Sandbox::User=root")
    apt = ["-q", *(arg for option in options for arg in ("-o", option))]
    run(["apt-get", "update", *apt])
    run(["apt-get", "download", *apt, *(f"{name}={version}" for name, version in DEBS.items())], cwd=work)
    record = [f"mirror {mirror} (bullseye main)"]
    for name, member, target in (
        ("dalvik-exchange", DX_JAR, "dx.jar"),
        ("libandroid-23-java", ANDROID_JAR, "android-23.jar"),
    ):
        deb = next(work.glob(f"{name}_*.deb"))
        record.append(f"{deb.name} sha256 {hashlib.sha256(deb.read_bytes()).hexdigest()}")
        run(["dpkg-deb", "-x", deb, work / name])
        os.replace((work / name / member).resolve(), cache / target)
    (cache / "SOURCES.txt").write_text("\n".join(record) + "\n", encoding="utf-8")


# -- the app's inputs ------------------------------------------------------------------------------------------


def default_model(build: Path) -> Path:
    """An NB 3-bit model of the built-in digits data (maximum-likelihood tables, quantized)."""
    from bnc_deploy.cli.train import main as train

    model = build / "digits-nb3.bnc"
    if not model.is_file():
        args = ["--data", "digits", "--model", "nb", "--bits", "3", "--int-bits", "2", "--init", "ml"]
        if train([*args, "--epochs", "0", "--quiet", "-o", str(model)]) != 0:
            raise BuildError("bnc-train on digits failed")
    return model


def write_assets(model: Path, assets: Path) -> None:
    """``model.bnc`` and ``check.txt`` (the Python reference's labels and score hash on its check rows)."""
    try:
        import numpy as np

        from bnc_deploy.artifacts import load_artifact
        from bnc_deploy.errors import ArtifactError
        from bnc_deploy.reference.bnc import ReferencePredictor
    except ImportError as exc:
        raise BuildError(f"{exc}: run this with the project's Python (.venv/bin/python)") from exc
    if not model.is_file():
        raise BuildError(f"{model}: no such model file")
    try:
        art = load_artifact(model)
    except ArtifactError as exc:
        raise BuildError(str(exc) if str(model) in str(exc) else f"{model}: {exc}") from exc
    if getattr(art, "structure", None) not in ("nb", "tan"):
        raise BuildError(f"{model}: the Java predictor reads Bayesian network classifiers (NB, TAN) only")
    if art.check_x is None or len(art.check_x) == 0:
        raise BuildError(f"{model}: the model file stores no check rows (bnc-train writes them)")
    rows = art.check_x.astype(np.int64)
    reference = ReferencePredictor(art)
    scores = np.ascontiguousarray(reference.log_joint(rows), dtype="<f8") + 0.0  # -0.0 hashed as +0.0
    assets.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(model, assets / "model.bnc")
    (assets / "check.txt").write_text(
        "# bnc-deploy's Python reference on the model's check rows: labels, and the SHA-256 of the scores\n"
        "# log p(c, x) as little-endian float64 (rows x classes, -0.0 as +0.0)\n"
        f"model_sha256 {art.content_sha256}\n"
        f"labels {','.join(str(int(v)) for v in reference.predict(rows))}\n"
        f"scores_sha256 {hashlib.sha256(scores.tobytes()).hexdigest()}\n",
        encoding="utf-8",
    )


# -- compile, package, sign ----------------------------------------------------------------------------------


def compile_dex(build: Path, android: Path, dx: Path) -> Path:
    """R.java, javac at the Java 8 level against android.jar (so only API 23 is used), dx for minSdk 21."""
    gen, classes, dex = build / "gen", build / "classes", build / "bin" / "classes.dex"
    for folder in (gen, classes, dex.parent):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    run(["aapt", "package", "-f", "-m", "-J", gen, "-M", APP / "AndroidManifest.xml", "-S", APP / "res", "-I", android])
    sources = sorted([*APP.joinpath("src").rglob("*.java"), *PREDICTOR_SOURCES.rglob("*.java"), *gen.rglob("*.java")])
    run(
        [
            "javac",
            "-source",
            "8",
            "-target",
            "8",
            "-bootclasspath",
            android,
            "-encoding",
            "UTF-8",
            "-Xlint:all,-options",
            "-Werror",
            "-d",
            classes,
            *sources,
        ]
    )
    run(["java", "-jar", dx, "--dex", f"--min-sdk-version={MIN_SDK}", f"--output={dex}", classes])
    return dex


def package(build: Path, android: Path, dex: Path) -> Path:
    """aapt package (manifest, resources, assets; the model stored uncompressed), add classes.dex, zipalign."""
    unaligned, aligned = build / "bin" / "app.unaligned.apk", build / "bin" / "app.aligned.apk"
    run(
        [
            "aapt",
            "package",
            "-f",
            "-M",
            APP / "AndroidManifest.xml",
            "-S",
            APP / "res",
            "-A",
            build / "assets",
            "-I",
            android,
            "-0",
            "bnc",
            "-F",
            unaligned,
        ]
    )
    run(["aapt", "add", unaligned.name, dex.name], cwd=dex.parent)
    run(["zipalign", "-f", "-p", "4", unaligned, aligned])
    run(["zipalign", "-c", "-p", "4", aligned])
    return aligned


def debug_keystore(build: Path) -> Path:
    """The build folder's debug key, made with keytool on first use (never committed: build/ is ignored)."""
    keystore = build / "debug.keystore"
    if not keystore.is_file():
        run(
            [
                "keytool",
                "-genkeypair",
                "-keystore",
                keystore,
                "-storepass",
                KEY_PASS,
                "-keypass",
                KEY_PASS,
                "-alias",
                KEY_ALIAS,
                "-keyalg",
                "RSA",
                "-keysize",
                "2048",
                "-validity",
                "10000",
                "-dname",
                "CN=Android Debug,O=Android,C=US",
            ]
        )
    return keystore


def sign_and_check(aligned: Path, keystore: Path, out: Path) -> tuple[str, str]:
    """Sign into a temporary file beside OUT, verify it and read its badging, then move it to OUT."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        run(
            [
                "apksigner",
                "sign",
                "--ks",
                keystore,
                "--ks-pass",
                f"pass:{KEY_PASS}",
                "--ks-key-alias",
                KEY_ALIAS,
                "--key-pass",
                f"pass:{KEY_PASS}",
                "--out",
                tmp,
                aligned,
            ]
        )
        verify = run(["apksigner", "verify", "--verbose", "--print-certs", tmp])
        badging = run(["aapt", "dump", "badging", tmp])
        if f"package: name='{PACKAGE}'" not in badging or "launchable-activity" not in badging:
            raise BuildError(f"aapt dump badging does not show {PACKAGE} with a launchable activity")
        tmp.chmod(0o644)  # mkstemp makes it private
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
        Path(f"{tmp}.idsig").unlink(missing_ok=True)  # apksigner's v4 signature file, when it writes one
    return verify, badging


def build_apk(model: Path | None, out: Path, build: Path, cache: Path) -> tuple[str, str]:
    if model is not None and not model.is_file():
        raise BuildError(f"{model}: no such model file")
    check_tools()
    build.mkdir(parents=True, exist_ok=True)
    write_assets(model or default_model(build), build / "assets")
    dx, android = android_sdk(cache)
    dex = compile_dex(build, android, dx)
    aligned = package(build, android, dex)
    return sign_and_check(aligned, debug_keystore(build), out)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="build_apk", description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", type=Path, help="a .bnc model (default: digits NB 3-bit, trained)")
    parser.add_argument("-o", "--output", type=Path, default=APP / "build" / "bnc-deploy-java.apk")
    parser.add_argument("--build-dir", type=Path, default=APP / "build", help="intermediate files and debug key")
    default_cache = os.environ.get("BNC_DEPLOY_ANDROID_CACHE") or Path.home() / ".cache" / "bnc-deploy" / "android"
    parser.add_argument("--cache", type=Path, default=Path(default_cache), help="dx.jar and android.jar")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        verify, badging = build_apk(args.model, args.output, args.build_dir, args.cache)
    except BuildError as exc:
        print(f"build_apk: error: {exc}", file=sys.stderr)
        return 1
    lines = [line for line in verify.splitlines() if line.startswith("Verifie")]
    print(f"wrote {args.output} ({args.output.stat().st_size:,} bytes)")
    print("\n".join(["apksigner verify:", *lines, badging.splitlines()[0]]))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO_ROOT))  # bnc_deploy from this checkout when it is not installed
    sys.exit(main())
