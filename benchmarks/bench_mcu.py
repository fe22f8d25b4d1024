"""Side by side on emulated Cortex-M: bnc-deploy's C export against emlearn's models (issue 29, item 7).

Same boards, compiler, flags and QEMU options as ``bnc_deploy.targets.cortex_m`` (``arm-none-eabi-gcc
-mthumb -Os``, newlib-nano, soft-float, bare metal on QEMU ``mps2-an385`` (M3), ``mps2-an386`` (M4),
``mps2-an500`` (M7) and ``microbit`` (M0, whose 256 KiB of flash takes the rows in several programs) with
semihosting, ``-icount shift=0``), and the same start-up code, linker scripts and timers. Models, all on the
same train/test split of the dataset's RAW features:

ours     NB and TAN (Chow-Liu), 3 bits (``bnc-train --bits 3 --int-bits 3 --epochs 20 --init ml`` on
         ``letter-raw``-style data, whose Fayyad-Irani discretizer the model keeps), exported with
         ``bnc-export --format c`` twice: on codes (``bnc_predict(const uint8_t *)``, the host bins)
         and with ``--raw-inputs`` (``bnc_predict_raw(const float *)``, the header bins float32 itself)
emlearn  scikit-learn models fitted on the raw float features, converted with ``emlearn.convert``
         (Gaussian NB, decision tree, random forest with soft or majority voting, MLP; not k-NN,
         which stores the training rows: 853 KB on letter) and compiled with emlearn's own C
         headers (``emlearn.includedir``)

Every test row (or the first ``--rows N``) runs on each board through one C driver,
``benchmarks/mcu_driver.c``, beside two generated files holding data (``bench_model.h``: the
model's header and its predict call; ``bench_rows.h``: the rows and the labels). The board's label
of every row is compared with the host's label of the same model (ours: the NumPy reference;
emlearn: emlearn's own C compiled for the host by its converter; ``vs sklearn`` counts where that
differs from the scikit-learn estimator) and with the truth (test error).

Columns: FLASH = ``.text + .rodata + .data`` and RAM = ``.data + .bss`` + worst-case stack
(``-fstack-usage``/``-fcallgraph-info=su`` of the model's own functions; library routines listed,
not counted) of ``int bnc_target_predict(const T *x)`` linked alone (``-Wl,--gc-sections``, entry
that function), so the soft-float and libm routines a model calls are counted in its FLASH;
instructions per prediction: the predict loop minus an empty call's loop, over all rows (QEMU is
not cycle-accurate: executed instructions, not cycles or latency).

    python benchmarks/bench_mcu.py [--datasets letter[,satimage]] [--boards mps2-an386[,...]]
        [--rows N] [--ours nb,tan] [--emlearn gnb,dt,rf,rf-vote,mlp] [--epochs 20] [--work DIR] [--json FILE]

Needs the Cortex-M toolchain (``gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm``),
the ``train`` extra and the ``bench`` extra (emlearn, scikit-learn).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bnc_deploy.targets.cortex_m import instruction_counts
from bnc_deploy.targets.cortex_m_build import (
    BOARD_FAMILY,
    BOARDS,
    CFLAGS,
    FAMILY_DEFINES,
    LDFLAGS,
    BuildError,
    Tools,
    _c_rows,
    _compile,
    _float_literal,
    _output,
    _stack_from_callgraph,
    find_tools,
    parse_size_a,
    row_bytes_per_image,
    run_image,
)
from bnc_deploy.targets.cortex_m_sources import BOARD_TIMER_H, STARTUP_C, link_ld

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "mcu_driver.c"
#: Dataset name -> (bnc-train --data spec, raw reader's files, split protocol name).
DATASETS = {
    "digits": ("digits", [], "holdout"),
    "letter": ("letter-raw", ["raw/letter/letter-recognition.data"], "holdout"),
    "satimage": ("satimage-raw", ["raw/satimage/sat.trn", "raw/satimage/sat.tst"], "cv"),
}
OURS = ("nb", "tan")
EMLEARN = ("gnb", "dt", "rf", "rf-vote", "mlp")
RUN_TIMEOUT_S = 600


# ================================================================================================
# Data: the raw features and the split of the project's loader
# ================================================================================================
@dataclass
class Split:
    name: str
    spec: str  # bnc-train --data
    x_train: np.ndarray  # raw, float32
    y_train: np.ndarray
    x_test: np.ndarray  # raw, float32
    y_test: np.ndarray
    codes_test: np.ndarray  # the loader's codes of x_test
    has_discretizer: bool


def load_split(name: str) -> Split:
    """The raw rows of ``name`` split as ``load_dataset(spec)`` splits them (checked: same labels and codes)."""
    from bnc_deploy.datasets import find_data_dir, load_dataset, loaders, splits

    spec, files, protocol = DATASETS[name]
    ds = load_dataset(spec)
    if name == "digits":
        raw = loaders.read_digits()
    else:
        data_dir = find_data_dir()
        reader = {"letter": loaders.read_letter, "satimage": loaders.read_satimage}[name]
        raw = reader(*(data_dir / f for f in files))
    protocol = splits.HOLDOUT_PROTOCOL if protocol == "holdout" else splits.CV_PROTOCOL
    train, test = splits.split_indices(raw.x.shape[0], protocol, 1, 0, raw.n_train)
    x_tr, x_te = raw.x[train].astype(np.float32), raw.x[test].astype(np.float32)
    codes = ds.discretizer.transform(x_te.astype(np.float64)) if ds.discretizer is not None else x_te.astype(np.int64)
    if not (np.array_equal(raw.y[test], ds.y_test) and np.array_equal(codes, ds.x_test)):
        raise SystemExit(f"{name}: the raw split does not match load_dataset({spec!r})")
    return Split(name, spec, x_tr, raw.y[train], x_te, raw.y[test], ds.x_test, ds.discretizer is not None)


# ================================================================================================
# The models: C header, predict call, host labels
# ================================================================================================
@dataclass
class Candidate:
    label: str  # e.g. "ours NB 3-bit"
    family: str  # "ours" or "emlearn"
    input: str  # "codes" or "raw float32"
    header: str  # the model's C
    glue: str  # bench_model.h
    rows: np.ndarray  # the test rows as the C function takes them
    host_labels: np.ndarray
    notes: dict


def _glue(input_type: str, n_features: int, call: str, includes: str = '#include "model.h"') -> str:
    return (
        "/* Generated by benchmarks/bench_mcu.py: the model under test (see mcu_driver.c). */\n"
        f"#include <stdint.h>\n{includes}\n#define BENCH_INPUT_T {input_type}\n"
        f"#define BENCH_N_FEATURES {n_features}\n#define BENCH_PREDICT(x) {call}\n"
    )


def train_ours(split: Split, structure: str, epochs: int, work: Path) -> Path:
    """``bnc-train`` a 3-bit NB/TAN on ``split.spec`` (reused when ``work`` already holds it)."""
    path = work / f"{split.name}-{structure}-3bit-e{epochs}.bnc"
    if path.is_file():
        return path
    cmd = [sys.executable, "-m", "bnc_deploy.cli.train", "--data", split.spec, "--model", structure]
    cmd += ["--structure", "chow-liu"] if structure == "tan" else []
    cmd += ["--bits", "3", "--int-bits", "3", "--epochs", str(epochs), "--init", "ml", "--quiet", "-o", str(path)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"bnc-train failed: {done.stderr.strip()}")
    return path


def ours_candidates(split: Split, structure: str, epochs: int, work: Path) -> list[Candidate]:
    """The model exported on codes and, when it keeps a discretizer, with ``--raw-inputs``."""
    from bnc_deploy.artifacts import load_artifact
    from bnc_deploy.reference import reference_predictor
    from bnc_deploy.verify import export_file

    path = train_ours(split, structure, epochs, work)
    artifact = load_artifact(path)
    ref = reference_predictor(artifact)
    d = artifact.n_features
    title = f"ours {structure.upper()} 3-bit"
    notes = {"model_file": path.name, "n_parameters": artifact.n_parameters, "size_bits": artifact.size_bits}
    out = []
    header = work / f"{path.stem}.h"
    export_file(artifact, header, "c")
    out.append(
        Candidate(
            title, "ours", "codes", header.read_text(), _glue("uint8_t", d, "bnc_predict(x)"),
            split.codes_test.astype(np.uint8), ref.predict(split.codes_test), notes,
        )
    )  # fmt: skip
    if split.has_discretizer:
        header_raw = work / f"{path.stem}-raw.h"
        export_file(artifact, header_raw, "c", raw_inputs=True)
        codes = ref.discretize(split.x_test.astype(np.float64))
        out.append(
            Candidate(
                title, "ours", "raw float32", header_raw.read_text(), _glue("float", d, "bnc_predict_raw(x)"),
                split.x_test, ref.predict(codes), notes,
            )
        )  # fmt: skip
    return out


def _estimator(kind: str):
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.naive_bayes import GaussianNB
    from sklearn.neural_network import MLPClassifier
    from sklearn.tree import DecisionTreeClassifier

    return {
        "gnb": ("emlearn Gaussian NB", GaussianNB(), {}),
        "dt": (
            "emlearn tree (depth 10)",
            DecisionTreeClassifier(max_depth=10, random_state=0),
            {"method": "inline", "dtype": "float"},
        ),
        # leaf_bits=8: soft voting on 8-bit class proportions, as scikit-learn averages them
        # (emlearn's default, leaf_bits=0, is a hard majority vote: rf-vote)
        "rf": (
            "emlearn forest (10 x depth 10)",
            RandomForestClassifier(n_estimators=10, max_depth=10, random_state=0),
            {"method": "inline", "dtype": "float", "leaf_bits": 8},
        ),
        "rf-vote": (
            "emlearn forest (10 x depth 10, majority vote)",
            RandomForestClassifier(n_estimators=10, max_depth=10, random_state=0),
            {"method": "inline", "dtype": "float"},
        ),
        "mlp": (
            "emlearn MLP (32 ReLU)",
            MLPClassifier(hidden_layer_sizes=(32,), max_iter=300, random_state=0),
            {"method": "loadable"},
        ),
    }[kind]


def emlearn_candidate(split: Split, kind: str, work: Path) -> Candidate:
    """A scikit-learn model on the raw features, converted by ``emlearn.convert`` (C for the board
    and, by emlearn's converter, for the host: the host labels). emlearn builds its host programs in
    ``./tmp``: run in ``work``."""
    import contextlib
    import warnings

    emlearn = import_emlearn()
    from emlearn.common import CompiledClassifier

    title, est, options = _estimator(kind)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the MLP's ConvergenceWarning
        est.fit(split.x_train, split.y_train)
    name = f"eml_{kind.replace('-', '_')}"
    n_classes = int(np.max(split.y_train)) + 1
    with contextlib.chdir(work):
        converted = emlearn.convert(est, **options)
        code = converted.save(name=name)
        if kind == "gnb" and n_classes > 10:
            # eml_bayes.h sizes its per-class array by EML_MAX_CLASSES (default 10): more classes
            # overflow it (the host program crashes on letter). Defined for the board and the host.
            code = f"#define EML_MAX_CLASSES {n_classes}\n" + code
            call = f"eml_bayes_predict(&{name}_model, values, length)"
            converted = CompiledClassifier(code, name=name, call=call, temp_dir="tmp")
        host = np.asarray(converted.predict(split.x_test), dtype=np.int64)
    sk = est.predict(split.x_test)
    notes = {
        "estimator": repr(est),
        "convert_options": options,
        "host_vs_sklearn_disagreements": int((host != sk).sum()),
        "sklearn_test_error": float((sk != split.y_test).mean()),
    }
    if kind == "gnb" and n_classes > 10:
        notes["defines"] = f"EML_MAX_CLASSES={n_classes}"
    d = split.x_test.shape[1]
    glue = _glue("float", d, f"{name}_predict(x, {d})")
    return Candidate(title, "emlearn", "raw float32", code, glue, split.x_test, host, notes)


# ================================================================================================
# Build, size and run on a board
# ================================================================================================
def _rows_header(x: np.ndarray, host_labels: np.ndarray, truth: np.ndarray) -> str:
    ctype, fmt = ("float", _float_literal) if x.dtype == np.float32 else ("uint8_t", lambda v: str(int(v)))
    return (
        "\n".join(
            [
                "/* Generated by benchmarks/bench_mcu.py: the test rows and their labels. */",
                f"#define N_ROWS {x.shape[0]}u",
                _c_rows(ctype, "bench_x", x, fmt=fmt),
                _c_rows("int16_t", "bench_expected", host_labels),
                _c_rows("int16_t", "bench_truth", truth),
            ]
        )
        + "\n"
    )


def import_emlearn():
    """``emlearn``, imported without its side effect: ``emlearn.bayes`` turns every NumPy
    floating-point warning into an error (``numpy.seterr(all='raise')``) at import; undone here."""
    saved = np.geterr()
    import emlearn

    np.seterr(**saved)
    return emlearn


def _includes() -> list[str]:
    try:
        return [f"-I{import_emlearn().includedir}"]
    except ImportError:
        return []


def footprint(folder: Path, cpu: str, tools: Tools) -> dict:
    """FLASH/RAM of ``bnc_target_predict`` linked alone (module docstring, Columns)."""
    base = [tools.gcc, f"-mcpu={cpu}", *CFLAGS, *_includes(), "-DBENCH_FOOTPRINT=1"]
    _compile([*base, "-fstack-usage", "-fcallgraph-info=su", "-c", "mcu_driver.c", "-o", "fp.o"], folder, "footprint")
    link = ["-nostartfiles", "--specs=nano.specs", "-Wl,--gc-sections", "-Wl,-e,bnc_target_predict", "-T", "link.ld"]
    _compile([tools.gcc, f"-mcpu={cpu}", *link, "fp.o", "-lm", "-o", "fp.elf"], folder, "footprint link")
    s = parse_size_a(_output([tools.size, "-A", str(folder / "fp.elf")]))
    obj = parse_size_a(_output([tools.size, "-A", str(folder / "fp.o")]))
    ci = folder / "fp.ci"
    stack, external, bounded = _stack_from_callgraph(ci.read_text(errors="replace"), "bnc_target_predict")
    static = s.get(".data", 0) + s.get(".bss", 0)
    return {
        "flash_bytes": s.get(".text", 0) + s.get(".rodata", 0) + s.get(".ARM.exidx", 0) + s.get(".data", 0),
        "ram_bytes": None if stack is None else static + stack,
        "data_bss_bytes": static,
        "stack_bytes": stack,
        "stack_bounded": bounded,
        "external_calls": external,
        "linked_sections": {k: v for k, v in s.items() if k in (".text", ".rodata", ".ARM.exidx", ".data", ".bss")},
        "object_code_bytes": sum(v for k, v in obj.items() if k.startswith(".text")),
        "object_table_bytes": sum(v for k, v in obj.items() if k.startswith((".rodata", ".data"))),
    }


def run_board(c: Candidate, truth: np.ndarray, board: str, tools: Tools, folder: Path) -> dict:
    """Build the programs of ``c`` for ``board`` (the rows split to fit its flash), size the model, run every
    row; the result row."""
    cpu, family = BOARDS[board][0], BOARD_FAMILY[board]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "startup.c").write_text(STARTUP_C, encoding="ascii")
    (folder / "link.ld").write_text(link_ld(family), encoding="ascii")
    (folder / "board_timer.h").write_text(BOARD_TIMER_H, encoding="ascii")
    shutil.copyfile(DRIVER, folder / "mcu_driver.c")
    (folder / "model.h").write_text(c.header)
    (folder / "bench_model.h").write_text(c.glue)
    n = int(c.rows.shape[0])
    out: dict = {"board": board, "cpu": cpu, "n_rows": n, "errors": [], "compiler_warnings": ""}
    try:
        out["footprint"] = footprint(folder, cpu, tools)
    except BuildError as exc:
        out["errors"].append(str(exc))
        return out
    per_program = max(1, row_bytes_per_image([board]) // (c.rows.itemsize * c.rows.shape[1] + 4))
    counts, calibration, ticks, failures = np.zeros(3, dtype=np.int64), None, np.zeros(3), []
    for start in range(0, n, per_program):
        stop = min(n, start + per_program)
        rows = _rows_header(c.rows[start:stop], c.host_labels[start:stop], truth[start:stop])
        (folder / "bench_rows.h").write_text(rows)
        cmd = [tools.gcc, f"-mcpu={cpu}", *CFLAGS, *FAMILY_DEFINES[family], *LDFLAGS, *_includes(), "-T", "link.ld"]
        try:
            out["compiler_warnings"] = _compile(
                [*cmd, "startup.c", "mcu_driver.c", "-lm", "-o", "image.elf"], folder, f"building for {cpu}"
            )[-2000:]
        except BuildError as exc:
            out["errors"].append(str(exc))
            return out
        res = run_image(folder / "image.elf", board, tools, RUN_TIMEOUT_S)
        bench = re.search(r"^BENCH (\d+) (\d+) (\d+)$", res.stdout, re.M)
        if res.timed_out or bench is None or res.timing is None:
            out["errors"].append("the program ended without a result: " + " | ".join(res.stdout.splitlines()[-3:]))
            return out
        counts += np.array([int(v) for v in bench.groups()])
        calibration = calibration or res.timing[:2]
        ticks += np.array(res.timing[2:], dtype=float)
        failures += [start + f[1] for f in res.failures]
        out["wall_s"] = round(out.get("wall_s", 0.0) + res.wall_s, 2)
    _, disagree, wrong = (int(v) for v in counts)
    out.update(disagreements=disagree, test_errors=wrong, test_error=wrong / n, n_programs=-(-n // per_program))
    out["disagreeing_rows"] = failures[:50]
    out["instructions"] = instruction_counts(calibration, ticks, n, board)
    return out


# ================================================================================================
# Report
# ================================================================================================
def _fmt(v, spec: str = ",") -> str:
    return "–" if v is None else format(v, spec)


def markdown(results: list[dict]) -> str:
    head = (
        "| dataset | model | input | board | test error | ≠ host | FLASH B | RAM B | instructions / prediction |\n"
        "|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in results:
        fp, ins = r.get("footprint", {}), r.get("instructions", {})
        err = "build/run failed" if r["errors"] else f"{100 * r['test_error']:.2f} %"
        lines.append(
            f"| {r['dataset']} | {r['model']} | {r['input']} | {r['board']} ({r['cpu'][7:].upper()}) | {err} | "
            f"{_fmt(r.get('disagreements'))} / {r['n_rows']:,} | {_fmt(fp.get('flash_bytes'))} | "
            f"{_fmt(fp.get('ram_bytes'))} | {_fmt(ins.get('predict_per_row'), ',.0f')} |"
        )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default="letter", help=f"comma-separated, of {', '.join(DATASETS)}")
    p.add_argument("--boards", default="mps2-an386", help=f"comma-separated, of {', '.join(BOARDS)} (or all)")
    p.add_argument("--rows", type=int, default=None, metavar="N", help="only the first N test rows")
    p.add_argument("--ours", default=",".join(OURS), help="our structures (nb,tan; empty: none)")
    p.add_argument("--emlearn", default=",".join(EMLEARN), help=f"emlearn models ({','.join(EMLEARN)}; empty: none)")
    p.add_argument("--epochs", type=int, default=20, help="bnc-train epochs (default 20)")
    p.add_argument("--work", metavar="DIR", help="keep models and builds here (trained models are reused)")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON")
    return p


def _split_list(text: str, allowed, what: str) -> list[str]:
    items = [t for t in text.split(",") if t]
    bad = [t for t in items if t not in allowed]
    if bad:
        raise SystemExit(f"unknown {what} {bad[0]!r}; choose from {', '.join(allowed)}")
    return items


def run(args: argparse.Namespace, work: Path) -> dict:
    try:
        version = import_emlearn().__version__
    except ImportError:
        if args.emlearn:
            raise SystemExit("emlearn is not installed: pip install 'bnc-deploy[bench]' (or --emlearn '')") from None
        version = None
    boards = list(BOARDS) if args.boards == "all" else _split_list(args.boards, BOARDS, "board")
    tools = find_tools(boards)
    results = []
    for name in _split_list(args.datasets, DATASETS, "dataset"):
        split = load_split(name)
        if args.rows is not None:
            split.x_test, split.y_test, split.codes_test = (
                a[: args.rows] for a in (split.x_test, split.y_test, split.codes_test)
            )
        candidates = []
        for s in _split_list(args.ours, OURS, "structure"):
            candidates += ours_candidates(split, s, args.epochs, work)
        candidates += [emlearn_candidate(split, k, work) for k in _split_list(args.emlearn, EMLEARN, "emlearn model")]
        for i, c in enumerate(candidates):
            host_error = float((c.host_labels != split.y_test).mean())
            for board in boards:
                start = time.perf_counter()
                r = run_board(c, split.y_test, board, tools, work / "build" / name / f"{i}-{board}")
                r.update(dataset=name, model=c.label, family=c.family, input=c.input, host_test_error=host_error)
                r["notes"], r["seconds"] = c.notes, round(time.perf_counter() - start, 1)
                results.append(r)
                print(f"{name} {c.label} ({c.input}) on {board}: {r.get('test_error')} {r['errors']}", file=sys.stderr)
    return {
        "method": "arm-none-eabi-gcc " + " ".join(CFLAGS) + "; QEMU -icount shift=0: executed instructions, no latency",
        "toolchain": {"gcc": tools.gcc_version, "qemu": tools.qemu_version},
        "emlearn_version": version,
        "command": "python benchmarks/bench_mcu.py " + " ".join(sys.argv[1:]),
        "results": results,
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.work:
        work = Path(args.work)
        work.mkdir(parents=True, exist_ok=True)
        report = run(args, work)
    else:
        with tempfile.TemporaryDirectory(prefix="bench-mcu-") as tmp:
            report = run(args, Path(tmp))
    print(markdown(report["results"]))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2, default=str) + "\n")
    return 0 if not any(r["errors"] for r in report["results"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
