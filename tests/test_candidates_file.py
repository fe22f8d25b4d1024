"""``--candidates-file``: explicit feature orderings and candidate parent sets for structure learning
(``bnc-train --structure learn`` and ``bnc-structure-sweep``), the authors' PGM-2020 settings file,
strict validation, and the training/structure-learning flags of ``bnc-structure-sweep`` with the
check that ``--resume`` never reuses a model file trained with other settings."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from support import REPO_ROOT, SHARED_DATASETS

torch = pytest.importorskip("torch")

from bnc_deploy.errors import ConfigError
from bnc_deploy.models.structure_learning import NO_PARENT, UNUSED_SLOT
from bnc_deploy.train.candidate_sets import read_candidates_file
from bnc_deploy.train.structure_learning import StructureLearningConfig, structure_candidates

SETTINGS = REPO_ROOT.parent / "shared" / "paper" / "structures" / "pgm2020_tan_subset_settings.json"
DIGITS_FEATURES = 64


@pytest.fixture(autouse=True)
def one_thread():
    """Small tensors, and the CI machine is shared: one torch thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def settings_file():
    if not SETTINGS.is_file():
        pytest.skip(f"the authors' settings file is not at {SETTINGS} (CI provides ../shared beside the clone)")
    return SETTINGS


def digits_sets(k: int = 3) -> dict:
    """A reversed ordering of digits' 64 features; each feature's candidates are up to ``k`` of its
    predecessors (the nearest ones), with -1 (class only) on every other feature, as allowed."""
    ordering = list(range(DIGITS_FEATURES))[::-1]
    candidates = []
    for f in range(DIGITS_FEATURES):
        before = ordering[: ordering.index(f)]
        chosen = before[-k:]
        candidates.append(chosen + ([-1] if f % 2 else []))
    return {"ordering": ordering, "candidates": candidates}


def write_json(path, data) -> str:
    path.write_text(json.dumps(data))
    return str(path)


def run_cli(main, argv, capsys) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


# -- reading and checking ----------------------------------------------------------------------------
def test_plain_file_gives_our_layout(tmp_path):
    sets = digits_sets()
    cf = read_candidates_file(write_json(tmp_path / "c.json", sets), "digits", DIGITS_FEATURES)
    array = cf.array()
    assert array.shape == (DIGITS_FEATURES, 4)
    assert np.all(array[:, 0] == NO_PARENT)
    for f, given in enumerate(sets["candidates"]):
        feature_slots = array[f, 1:][array[f, 1:] != UNUSED_SLOT].tolist()
        assert feature_slots == sorted(v for v in given if v >= 0)  # ascending, -1 dropped
        assert np.all(array[f, 1 + len(feature_slots) :] == UNUSED_SLOT)  # padded
    assert array[63, 1:].tolist() == [UNUSED_SLOT] * 3  # first of the ordering
    assert cf.entry is None and len(cf.sha256) == 64 and list(cf.ordering) == sets["ordering"]


def test_settings_file_picks_the_dataset_entry_by_name_or_suffix(tmp_path):
    """The authors' form, without ../shared: a settings list whose entries are picked by dataset name
    (a ``-raw`` suffix stripped) or by ``FILE#NAME``."""
    digits = digits_sets(k=2)
    tiny = {"ordering": [1, 0, 2], "candidates_original": [[1, -1], [-1], [0, 1, -1]]}
    path = write_json(
        tmp_path / "settings.json",
        {
            "settings": [
                {"dataset": "digits", "ordering": digits["ordering"], "candidates_original": digits["candidates"]},
                {"dataset": "tiny", **tiny},
            ]
        },
    )
    assert read_candidates_file(path, "digits", DIGITS_FEATURES).entry == "digits"
    assert read_candidates_file(path, "digits-raw", DIGITS_FEATURES).entry == "digits"
    picked = read_candidates_file(path + "#tiny", "digits", 3)
    assert picked.entry == "tiny" and picked.parents == ((1,), (), (0, 1))
    assert picked.array().tolist() == [[-1, 1, -2], [-1, -2, -2], [-1, 0, 1]]


def _bad_digits(change) -> dict:
    sets = digits_sets()
    change(sets)
    return sets


def _set(sets, key, index, value):
    sets[key][index] = value


BAD_FILES = {
    "not a permutation": (
        lambda s: _set(s, "ordering", 5, s["ordering"][4]),
        r"ordering is not a permutation of 0\.\.63: feature 59 is at positions 4 and 5",
    ),
    "ordering too short": (lambda s: s["ordering"].pop(), r"ordering has 63 entries, but digits has 64 features"),
    "ordering out of range": (lambda s: _set(s, "ordering", 0, 64), r"ordering position 0 is feature 64, outside"),
    "candidate after child": (
        lambda s: _set(s, "candidates", 10, [11, 3]),
        r"feature 10: candidate 3 comes after it in the ordering \(position 60 > 53\)",
    ),
    "out of range": (lambda s: _set(s, "candidates", 10, [11, 64]), r"feature 10: candidate 64 is outside -1\.\.63"),
    "negative": (lambda s: _set(s, "candidates", 10, [-2]), r"feature 10: candidate -2 is outside -1\.\.63"),
    "self parent": (lambda s: _set(s, "candidates", 10, [10]), r"feature 10: candidate 10 is the feature itself"),
    "duplicate": (lambda s: _set(s, "candidates", 10, [11, 12, 11]), r"feature 10: candidate 11 is listed twice"),
    "not an index": (lambda s: _set(s, "candidates", 10, [True]), r"feature 10: candidate True is not a feature"),
    "one list short": (lambda s: s["candidates"].pop(), r"candidates has 63 lists, but digits has 64 features"),
}


@pytest.mark.parametrize("problem", list(BAD_FILES))
def test_bnc_train_refuses_a_bad_file_with_exit_2_naming_file_feature_value(problem, tmp_path, capsys):
    from bnc_deploy.cli.train import main

    change, message = BAD_FILES[problem]
    path = write_json(tmp_path / "bad.json", _bad_digits(change))
    code, _, err = run_cli(
        main,
        [
            "--data",
            "digits",
            "--model",
            "tan",
            "--structure",
            "learn",
            "--candidates-file",
            path,
            "--epochs",
            "2",
            "-o",
            str(tmp_path / "m.bnc"),
        ],
        capsys,
    )
    assert code == 2
    assert err.startswith(f"bnc-train: error: candidates file {path}: ") and err.count("\n") == 1
    assert re.search(message, err), err
    assert not (tmp_path / "m.bnc").exists()


def test_other_refusals(tmp_path, capsys):
    from bnc_deploy.cli.train import main

    good = write_json(tmp_path / "good.json", digits_sets())
    settings = write_json(
        tmp_path / "settings.json",
        {"settings": [{"dataset": "letter", "ordering": [0], "candidates_original": [[-1]]}]},
    )
    base = ["--data", "digits", "--model", "tan", "--structure", "learn", "--epochs", "2", "-o", str(tmp_path / "m")]
    cases = [
        (
            ["--candidates-file", good, "--candidates", "3"],
            f"--candidates-file {good} gives every feature's candidate parents; --candidates 3 cannot also be given",
        ),
        (
            ["--candidates-file", settings],
            (
                f"candidates file {settings} has no settings for the loaded dataset 'digits' (entry 'digits'); it has "
                f"letter; name an entry with {settings}#NAME"
            ),
        ),
        (
            ["--candidates-file", settings + "#usps"],
            f"candidates file {settings} has no settings for dataset 'usps' (named by #usps); it has letter",
        ),
        (["--candidates-file", good + "#digits"], f"candidates file {good}: '#digits' picks a dataset of a settings"),
        (
            ["--candidates-file", str(tmp_path / "missing.json")],
            f"candidates file {tmp_path / 'missing.json'} does not exist",
        ),
        (
            ["--candidates-file", write_json(tmp_path / "list.json", [[0]])],
            f"candidates file {tmp_path / 'list.json'}: expected a JSON object with 'ordering' and 'candidates'",
        ),
    ]
    for extra, message in cases:
        code, _, err = run_cli(main, base + extra, capsys)
        assert code == 2 and message in err, (extra, err)
    # Learn-only flags, new ones included, need --structure learn (and a BN model).
    for flag, value in (
        ("--candidates-file", good),
        ("--structure-lr", "0.1"),
        ("--tau-start", "5"),
        ("--tau-end", "0.5"),
    ):
        code, _, err = run_cli(main, ["--data", "digits", "--model", "tan", flag, value, "-o", "x.bnc"], capsys)
        assert code == 2 and f"{flag} applies only to --structure learn" in err
        code, _, err = run_cli(main, ["--data", "digits", "--model", "fc", flag, value, "-o", "x.bnc"], capsys)
        assert code == 2 and f"{flag} applies only to --model nb or tan" in err
    code, _, err = run_cli(main, base + ["--tau-end", "0"], capsys)
    assert code == 2 and "--tau-end must be a finite number > 0, got 0.0" in err


def test_config_refuses_candidates_or_order_with_a_file(tmp_path):
    path = write_json(tmp_path / "c.json", digits_sets())
    StructureLearningConfig(candidates_file=path).validate()
    with pytest.raises(ConfigError, match=r"--candidates all cannot be given with it"):
        StructureLearningConfig(candidates_file=path, candidates=None).validate()
    with pytest.raises(ConfigError, match=r"--order random cannot be given with it"):
        StructureLearningConfig(candidates_file=path, order="random").validate()
    with pytest.raises(ConfigError, match=r"candidates file .*nope\.json does not exist"):
        StructureLearningConfig(candidates_file=str(tmp_path / "nope.json")).validate()


# -- training --------------------------------------------------------------------------------------
def test_bnc_train_learns_among_the_given_candidates_with_the_given_settings(tmp_path, capsys, monkeypatch):
    """The learned parents are always among the file's candidates; --lr, --hybrid-*, --structure-lr
    and the temperatures reach structure learning."""
    from bnc_deploy.artifacts import load_artifact
    from bnc_deploy.cli.train import main
    from bnc_deploy.train import losses

    made = []
    real_make_loss = losses.make_loss
    monkeypatch.setattr(losses, "make_loss", lambda *a, **kw: made.append(kw) or real_make_loss(*a, **kw))
    sets = digits_sets()
    path = write_json(tmp_path / "c.json", sets)
    model = tmp_path / "m.bnc"
    code, out, _ = run_cli(
        main,
        [
            "--data",
            "digits",
            "--model",
            "tan",
            "--structure",
            "learn",
            "--candidates-file",
            path,
            "--epochs",
            "2",
            "--size-penalty",
            "0",
            "--lr",
            "0.02",
            "--hybrid-lambda",
            "50",
            "--hybrid-gamma",
            "2",
            "--hybrid-eta",
            "5",
            "--structure-lr",
            "0.05",
            "--tau-start",
            "4",
            "--tau-end",
            "0.4",
            "-o",
            str(model),
            "--json",
        ],
        capsys,
    )
    assert code == 0
    parents = json.loads(out)["parents"]
    allowed = [set(c) | {-1} for c in sets["candidates"]]
    assert all(p in allowed[f] for f, p in enumerate(parents)), parents
    assert any(p >= 0 for p in parents)  # no penalty: the chosen sets are really used
    learned = load_artifact(model).metadata["structure_learning"]
    assert learned["settings"]["candidates_file"] == path
    assert learned["settings"]["structure_lr"] == 0.05
    assert learned["candidates_file"]["entry"] is None and learned["candidates_file"]["ordering"] == sets["ordering"]
    assert learned["history"]["lr"][0] == pytest.approx(0.02)
    assert learned["history"]["tau"] == pytest.approx([4.0, 0.4])
    assert made and all((kw["hybrid_lambda"], kw["hybrid_gamma"], kw["hybrid_eta"]) == (50.0, 2.0, 5.0) for kw in made)


def test_authors_letter_sets_are_candidates_original(settings_file):
    """On the real letter data the authors' file gives, per feature, exactly ``candidates_original``
    (less -1); constant feature 1 is kept as given (a candidate parent of other features)."""
    if not (SHARED_DATASETS / "discretized").is_dir():
        pytest.skip(f"real datasets not found at {SHARED_DATASETS} (CI provides ../shared beside the clone)")
    from bnc_deploy.datasets import load_dataset
    from bnc_deploy.train.bnc import TrainConfig

    entry = next(s for s in json.loads(settings_file.read_text())["settings"] if s["dataset"] == "letter")
    dataset = load_dataset("letter")
    candidates, sets = structure_candidates(
        dataset, TrainConfig(model="tan"), StructureLearningConfig(candidates_file=str(settings_file))
    )
    assert sets.entry == "letter" and list(sets.ordering) == entry["ordering"]
    assert candidates.shape == (16, 9)  # K = 9 slots, "class only" included
    for f, given in enumerate(entry["candidates_original"]):
        assert set(candidates[f][candidates[f] >= 0].tolist()) == set(given) - {-1}, f
    assert dataset.cardinalities[1] == 1 and np.isin(1, candidates[:, 1:])  # the authors keep the constant one


def test_every_authors_entry_passes_the_checks(settings_file):
    """The authors' orderings and sets of all four datasets are valid (acyclic, in range, ...) and read
    back as given, without the data (the dataset's feature count is the entry's)."""
    for entry in json.loads(settings_file.read_text())["settings"]:
        sets = read_candidates_file(f"{settings_file}#{entry['dataset']}", entry["dataset"], entry["n_features"])
        assert [set(p) for p in sets.parents] == [set(c) - {-1} for c in entry["candidates_original"]]
        assert max(len(p) for p in sets.parents) <= entry["max_augmenting_features"] - 1


def test_icpr2020_structure_preset_records_use_the_authors_sets(settings_file):
    from bnc_deploy.sweep.grid import expand
    from bnc_deploy.sweep.paper import preset
    from bnc_deploy.sweep.records import LEARN_DEFAULTS, complete

    record = complete(expand(preset("icpr2020-structure", settings_file.parent, data="letter"))[0])
    assert record["candidates_file"] == str(settings_file.resolve()) and record["candidates"] == 8  # the default
    sl = StructureLearningConfig(**{k: record[k] for k in LEARN_DEFAULTS})
    sl.validate()
    assert read_candidates_file(sl.candidates_file, "letter", 16).entry == "letter"


# -- bnc-structure-sweep ----------------------------------------------------------------------------
def _chain_csv(tmp_path, n=240, d=5, seed=0):
    """x_0 follows the class, x_i copies x_{i-1} (90 %): a 5-feature problem that trains in a blink."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    x = np.zeros((n, d), dtype=np.int64)
    x[:, 0] = np.where(rng.random(n) < 0.8, y, rng.integers(0, 3, n))
    for i in range(1, d):
        x[:, i] = np.where(rng.random(n) < 0.9, x[:, i - 1], rng.integers(0, 3, n))
    path = tmp_path / "chain.csv"
    np.savetxt(
        path,
        np.column_stack([x, y]),
        fmt="%d",
        delimiter=",",
        header=",".join([f"f{i}" for i in range(d)] + ["label"]),
        comments="",
    )
    return str(path)


def test_sweep_records_new_flags_and_resume_refuses_other_settings(tmp_path, capsys):
    from bnc_deploy.cli.sweep import main

    data = _chain_csv(tmp_path)
    cands = write_json(tmp_path / "c.json", {"ordering": [4, 3, 2, 1, 0], "candidates": [[1, 2], [2, 3], [3], [4], []]})
    out = tmp_path / "sweep"
    flags = [
        "--data",
        data,
        "--lambdas",
        "0,10",
        "--epochs",
        "2",
        "--batch-size",
        "40",
        "--candidates-file",
        cands,
        "--lr",
        "0.02",
        "--lr-decay",
        "0.1",
        "--loss",
        "hybrid",
        "--hybrid-lambda",
        "5",
        "--hybrid-gamma",
        "2",
        "--hybrid-eta",
        "3",
        "--structure-lr",
        "0.01",
        "--tau-start",
        "3",
        "--tau-end",
        "0.3",
        "-o",
        str(out),
        "--quiet",
    ]
    code, _, err = run_cli(main, flags, capsys)
    assert code == 0, err
    meta = json.loads((out / "trajectory.json").read_text())
    assert {
        k: meta["train_config"][k] for k in ("lr", "lr_decay", "loss", "hybrid_lambda", "hybrid_gamma", "hybrid_eta")
    } == {"lr": 0.02, "lr_decay": 0.1, "loss": "hybrid", "hybrid_lambda": 5.0, "hybrid_gamma": 2.0, "hybrid_eta": 3.0}
    assert {k: meta["structure_learning"][k] for k in ("structure_lr", "tau_start", "tau_end", "candidates_file")} == {
        "structure_lr": 0.01,
        "tau_start": 3.0,
        "tau_end": 0.3,
        "candidates_file": cands,
    }
    assert meta["candidates_file"]["ordering"] == [4, 3, 2, 1, 0]
    for row in meta["rows"]:
        parents = [int(p) for p in row["structure"].split()]
        assert all(p in ({1, 2}, {2, 3}, {3}, {4}, set())[f] | {-1} for f, p in enumerate(parents))
    models = sorted(out.glob("lambda_*.bnc"))
    stamps = [m.stat().st_mtime_ns for m in models]

    # Same settings: reused, not retrained.
    code, _, err = run_cli(main, flags + ["--resume"], capsys)
    assert code == 0, err
    assert [m.stat().st_mtime_ns for m in models] == stamps

    # Other settings: refused before any training, naming the file and each differing setting.
    other = [v if v != "5" else "6" for v in flags] + ["--resume"]  # --hybrid-lambda 6
    code, _, err = run_cli(main, other, capsys)
    assert code == 2 and "--resume: " in err and "lambda_0.bnc was trained with other settings" in err
    assert "hybrid_lambda: 5.0 in the file, 6.0 now" in err
    swapped = [v if v != "3" else "4" for v in flags] + ["--resume"]  # --tau-start 4, --hybrid-eta 4
    code, _, err = run_cli(main, swapped, capsys)
    assert code == 2 and "tau_start: 3.0 in the file, 4.0 now" in err and "hybrid_eta: 3.0 in the file, 4.0 now" in err
    # The same path with other content is other settings too.
    write_json(tmp_path / "c.json", {"ordering": [4, 3, 2, 1, 0], "candidates": [[1], [2, 3], [3], [4], []]})
    code, _, err = run_cli(main, flags + ["--resume"], capsys)
    assert code == 2 and "candidates_file: 'sha256:" in err
    assert [m.stat().st_mtime_ns for m in models] == stamps  # nothing was retrained

    # Without --resume every lambda is retrained with the new settings.
    code, _, err = run_cli(main, flags, capsys)
    assert code == 0, err


def test_sweep_refuses_candidates_or_order_with_a_file(tmp_path, capsys):
    from bnc_deploy.cli.sweep import main

    cands = write_json(tmp_path / "c.json", digits_sets())
    for extra, shown in (
        (["--candidates", "3"], "--candidates 3"),
        (["--order", "random"], "--order random"),
        (["--candidates", "all", "--order", "identity"], "--candidates all and --order identity"),
    ):
        code, _, err = run_cli(
            main,
            [
                "--data",
                "digits",
                "--lambdas",
                "0",
                "--candidates-file",
                cands,
                *extra,
                "-o",
                str(tmp_path / "out"),
                "--quiet",
            ],
            capsys,
        )
        assert code == 2 and f"gives the ordering and candidate sets; {shown} cannot also be given" in err, err
    # A bad file is refused before any lambda trains.
    bad = write_json(tmp_path / "bad.json", _bad_digits(lambda s: _set(s, "candidates", 10, [10])))
    code, _, err = run_cli(
        main,
        ["--data", "digits", "--lambdas", "0", "--candidates-file", bad, "-o", str(tmp_path / "out2"), "--quiet"],
        capsys,
    )
    assert code == 2 and "feature 10: candidate 10 is the feature itself" in err
    assert not list((tmp_path).glob("out2/lambda_*.bnc"))
