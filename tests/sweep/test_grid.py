"""Sweep grids: key names and defaults agree with the trainers, ids name configurations (not their
spelling), flags and grid files parse with errors that name the flag/file, key and value, draws are
reproducible, and the paper presets have the paper's sizes."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest
from support import REPO_ROOT

from bnc_deploy.errors import ConfigError
from bnc_deploy.sweep import grid, paper, records
from bnc_deploy.sweep.grid import GridSpec, describe, expand, load_grid_file
from bnc_deploy.sweep.paper import find_structures_dir, preset
from bnc_deploy.sweep.records import (
    BN_DEFAULTS,
    DATA_DEFAULTS,
    DNN_DEFAULTS,
    KEYS,
    LABEL_KEYS,
    LEARN_DEFAULTS,
    complete,
    config_id,
    parse_values,
)

SHARED_STRUCTURES = REPO_ROOT.parent / "shared" / "paper" / "structures"


@pytest.fixture
def structures_dir():
    if not (SHARED_STRUCTURES / paper.DRAWS_FILE).is_file():
        pytest.skip(f"paper structures not found at {SHARED_STRUCTURES} (CI provides ../shared beside the clone)")
    return SHARED_STRUCTURES


# -- keys and defaults agree with the trainers ----------------------------------------------------
def _defaults(cls) -> dict:
    return {
        f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
        for f in dataclasses.fields(cls)
    }


def test_bn_keys_and_defaults_are_train_configs():
    pytest.importorskip("torch")
    from bnc_deploy.train.bnc import TrainConfig

    fields = _defaults(TrainConfig)
    del fields["progress"]  # display only, not configuration
    assert BN_DEFAULTS == fields
    assert list(BN_DEFAULTS) == list(fields)  # written out in the dataclass's order, for reading
    assert set(fields) <= set(KEYS)


def test_structure_learning_keys_and_defaults():
    pytest.importorskip("torch")
    from bnc_deploy.train.structure_learning import StructureLearningConfig

    assert LEARN_DEFAULTS == _defaults(StructureLearningConfig)


def test_dnn_keys_and_defaults_are_what_bnc_train_uses():
    pytest.importorskip("torch")
    from bnc_deploy.train.bnc import TrainConfig
    from bnc_deploy.train.dnn import DNNConfig
    from bnc_deploy.train.dnn_cli import DEFAULT_LR_DECAY

    fields = _defaults(DNNConfig)
    for name in ("architecture", "progress", "sizing"):  # architecture is the record's model
        del fields[name]
    assert set(DNN_DEFAULTS) == set(fields)
    # bnc-train builds the DNN config with the shared --epochs default, not the dataclass's.
    assert DNN_DEFAULTS["epochs"] == TrainConfig().epochs != fields["epochs"]
    assert {k: v for k, v in DNN_DEFAULTS.items() if k != "epochs"} == {
        k: v for k, v in fields.items() if k != "epochs"
    }
    assert DNN_DEFAULTS["lr_decay"] == DEFAULT_LR_DECAY
    assert set(KEYS["model"].choices) == {"nb", "tan", "fc", "cnn"}


def test_shared_defaults_equal_bnc_train_flags():
    pytest.importorskip("torch")
    from bnc_deploy.cli.train import build_parser

    args = build_parser().parse_args(["-o", "x.bnc"])
    for name in (
        "fold",
        "validation",
        "epochs",
        "batch_size",
        "lr",
        "adam_eps",
        "seed",
        "hybrid_lambda",
        "hybrid_gamma",
        "hybrid_eta",
        "smoothing",
        "loss",
        "structure",
    ):
        expected = DATA_DEFAULTS[name] if name in DATA_DEFAULTS else BN_DEFAULTS[name]
        assert getattr(args, name) == expected, name
    assert args.model == BN_DEFAULTS["model"]
    # The one exception (issue 26): bnc-train starts from maximum likelihood, a sweep (and the
    # paper's protocol) from the uniform start.
    assert args.init == "ml" and BN_DEFAULTS["init"] == "uniform"


def test_default_int_bits_is_the_trainers():
    pytest.importorskip("torch")
    from bnc_deploy.train.bnc import default_int_bits

    assert [records.default_int_bits(b) for b in range(1, 9)] == [default_int_bits(b) for b in range(1, 9)]


def test_every_key_has_a_kind_matching_its_defaults():
    for table in (BN_DEFAULTS, LEARN_DEFAULTS, DNN_DEFAULTS, DATA_DEFAULTS):
        for name, value in table.items():
            assert records.normalize_value(name, value) == value, name


def test_grid_and_table_import_no_torch():
    code = (
        "import sys, bnc_deploy.sweep.grid, bnc_deploy.sweep.table; "
        "bad = [m for m in sys.modules if m.split('.')[0] == 'torch' or m.startswith('bnc_deploy.train')]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO_ROOT)


# -- ids ------------------------------------------------------------------------------------------
def test_id_ignores_key_order_number_spelling_and_explicit_defaults():
    a = {"model": "nb", "bits": 4, "lr": 3e-3, "hybrid_lambda": 10}
    same = [
        {"hybrid_lambda": 10.0, "lr": 0.003, "bits": 4, "model": "nb"},  # order, int vs float
        {"bits": 4, "lr": "3e-3", "hybrid_lambda": "1e1"},  # flag text, model omitted
        {**a, "epochs": 500, "seed": 0, "fold": 1, "structure": "chow-liu"},  # explicit defaults
        {**a, "int_bits": 3},  # what bits=4 implies
        {**a, "draw": 17},  # a label, not configuration
    ]
    assert all(config_id(r) == config_id(a) for r in same)
    different = [
        {**a, "lr": 3e-2},
        {**a, "int_bits": 2},
        {**a, "bits": None},
        {**a, "data": "letter"},
        {**a, "model": "tan"},
        {**a, "seed": 1},
    ]
    ids = {config_id(r) for r in different} | {config_id(a)}
    assert len(ids) == len(different) + 1
    assert len(config_id(a)) == 16 and int(config_id(a), 16) >= 0


def test_id_normalizes_negative_zero_and_none_spellings():
    assert config_id({"smoothing": -0.0}) == config_id({"smoothing": 0})
    assert config_id({"bits": "float"}) == config_id({"bits": None}) == config_id({})
    learn = {"model": "tan", "structure": "learn"}
    assert (
        config_id({**learn, "candidates": 0})
        == config_id({**learn, "candidates": "all"})
        == config_id({**learn, "candidates": None})
        != config_id(learn)
    )  # default 8
    assert config_id({"model": "fc", "hidden": [16, 8]}) == config_id({"model": "fc", "hidden": "16, 8"})


def test_id_is_pinned():
    # Ids name results in existing sweep directories: a change of the canonical form must be deliberate.
    assert config_id({}) == "70a18bc3002881d6"
    assert records.canonical_json({"bits": 2}).startswith('{"adam_eps":1e-07,"batch_size":100,"bits":2,')


def test_split_seed_defaults_to_the_seed_and_keeps_the_ids_of_records_without_it():
    # None or the seed itself is the default (the split bnc-train makes): the same id as no key.
    assert (
        config_id({"seed": 3}) == config_id({"seed": 3, "split_seed": 3}) == config_id({"seed": 3, "split_seed": None})
    )
    assert config_id({"model": "fc", "seed": 0}) == config_id({"model": "fc", "split_seed": 0})
    assert config_id({"seed": 3, "split_seed": 0}) != config_id({"seed": 3})
    assert "split_seed" not in complete({"seed": 3, "split_seed": "3"})
    assert records.split_seed(complete({"seed": 3})) == 3
    assert records.split_seed(complete({"seed": 3, "split_seed": "0"})) == 0
    with pytest.raises(ConfigError, match=r"split_seed = 0.5: expected an integer"):
        complete({"split_seed": 0.5})


def test_paper_dnn_and_structure_grids_share_one_split_across_seeds():
    for sweep in paper.fc_sweeps("digits", "paper") + paper.cnn_sweeps("usps", "paper"):
        assert sweep.spec.fixed["split_seed"] == paper.PAPER_SPLIT_SEED and len(sweep.spec.axes["seed"]) == 5
    for sweep in paper.fc_sweeps("digits", "quick"):
        assert "split_seed" not in sweep.spec.fixed and sweep.spec.fixed["seed"] == 0


def test_complete_fills_the_models_defaults_and_refuses_foreign_keys():
    assert complete({"model": "fc"})["lr_decay"] == 1e-4
    assert complete({})["lr_decay"] == 1e-3
    learned = complete({"model": "tan", "structure": "learn"})
    assert learned["size_penalty"] == 1e-3 and learned["candidates"] == 8
    assert "size_penalty" not in complete({"model": "tan"})
    assert "data" not in complete({}) and complete({"data": "letter"})["data"] == "letter"
    with pytest.raises(ConfigError, match=r"'bits' applies only to model nb/tan, not to model 'fc'"):
        complete({"model": "fc", "bits": 2})
    with pytest.raises(ConfigError, match=r"'layers' applies only to model fc/cnn, not to model 'nb' \(no model"):
        complete({"layers": 3})
    with pytest.raises(ConfigError, match=r"'size_penalty' applies only to structure = \"learn\""):
        complete({"model": "tan", "size_penalty": 1e-3})
    with pytest.raises(ConfigError, match=r"unknown key 'hybrid_lamda' \(did you mean 'hybrid_lambda'\?\)"):
        config_id({"hybrid_lamda": 1.0})
    with pytest.raises(ConfigError, match=r"lr = nan: expected a finite number"):
        config_id({"lr": float("nan")})
    with pytest.raises(ConfigError, match=r"model = 'nbb': expected one of nb, tan, fc, cnn \(did you mean 'nb'"):
        config_id({"model": "nbb"})


# -- flag values ----------------------------------------------------------------------------------
def test_parse_values():
    assert parse_values("3e-2,3e-3", "lr") == [0.03, 0.003]
    assert parse_values("1..8", "bits") == list(range(1, 9))
    assert parse_values("none, 2..3, 8", "bits") == [None, 2, 3, 8]
    assert parse_values("float", "bits") == [None]
    assert parse_values("1", "lr") == [1.0] and isinstance(parse_values("1", "lr")[0], float)
    values = parse_values("logspace(-7,1,41)", "size_penalty")
    assert len(values) == 41 and values == [float(v) for v in np.logspace(-7, 1, 41)]
    assert values[0] == pytest.approx(1e-7) and values[-1] == pytest.approx(10.0)
    assert parse_values("0, logspace(-2, 0, 3)", "size_penalty") == pytest.approx([0, 0.01, 0.1, 1.0])
    assert parse_values("linspace(0,1,3)", "float") == [0.0, 0.5, 1.0]
    assert parse_values("true,false", "batch_norm") == [True, False]
    assert parse_values("nb,tan", "model") == ["nb", "tan"]
    assert parse_values("all,4", "candidates") == [None, 4]


@pytest.mark.parametrize(
    "text, kind, message",
    [
        ("3e-2,,3e-3", "lr", r"--lr '3e-2,,3e-3': empty value"),
        ("3e-2,abc", "lr", r"--lr '3e-2,abc': bad value 'abc': not a number"),
        ("1..x", "bits", r"--bits '1..x': bad value '1..x': not an integer \(or none/float\)"),
        ("8..1", "bits", r"--bits '8..1': the range '8..1' is empty"),
        ("1..3", "lr", r"--lr '1..3': the range '1..3' is for integer keys"),
        ("logspace(0,1,3)", "epochs", r"--epochs 'logspace\(0,1,3\)': 'logspace\(0,1,3\)' gives fractional values"),
        ("logspace(0,1)", "lr", r"--lr 'logspace\(0,1\)': bad 'logspace\(0,1\)': write logspace\(start,stop,count\)"),
        ("1,2,1", "bits", r"--bits '1,2,1': '1' repeats the value 1"),
        ("nb,naive", "model", r"--model 'nb,naive': bad value 'naive'.*expected one of nb, tan, fc, cnn"),
        ("inf", "lr", r"--lr 'inf'.*expected a finite number"),
        ("2.5", "epochs", r"--epochs '2.5': bad value '2.5': not an integer"),
    ],
)
def test_parse_values_errors_name_the_flag_and_the_token(text, kind, message):
    with pytest.raises(ConfigError, match=message):
        parse_values(text, kind)


def test_parse_values_unknown_kind():
    with pytest.raises(ConfigError, match=r"unknown kind 'lrr' \(did you mean 'lr'\?\)"):
        parse_values("1", "lrr")


# -- specs and expansion --------------------------------------------------------------------------
def test_expand_order_fixed_and_draw_column():
    spec = GridSpec(
        axes={"bits": [2, 4], "lr": [3e-2, 3e-3]},
        draws={"hybrid_lambda": [10, 20, 30], "hybrid_gamma": [1, 2, 3]},
        fixed={"model": "nb", "epochs": 5},
    )
    records = expand(spec)
    assert len(records) == 2 * 2 * 3 == grid.count(spec)
    assert [(r["bits"], r["lr"], r["draw"]) for r in records[:7]] == [
        (2, 0.03, 0),
        (2, 0.03, 1),
        (2, 0.03, 2),
        (2, 0.003, 0),
        (2, 0.003, 1),
        (2, 0.003, 2),
        (4, 0.03, 0),
    ]
    assert records[4] == {
        "model": "nb",
        "epochs": 5,
        "bits": 2,
        "lr": 0.003,
        "hybrid_lambda": 20.0,
        "hybrid_gamma": 2.0,
        "draw": 1,
    }
    assert all("id" not in r for r in records)
    assert len({config_id(r) for r in records}) == len(records)
    assert describe(spec) == "12 configurations: bits 2 × lr 2 × 3 draws"
    assert describe(GridSpec(fixed={"lr": 1e-3})) == "1 configuration"
    assert expand(GridSpec()) == [{}]


def test_expand_refuses_the_same_configuration_twice():
    # int_bits omitted means 3 for bits=4: the two records are one configuration.
    spec = GridSpec(axes={"int_bits": [None, 3]}, fixed={"bits": 4})
    with pytest.raises(ConfigError, match=r"grid configurations #0 .* and #1 .* are the same configuration"):
        expand(spec)
    with pytest.raises(ConfigError, match=r"grid configuration #0 .*'bits' applies only to model nb/tan"):
        expand(GridSpec(axes={"bits": [2]}, fixed={"model": "fc"}))


@pytest.mark.parametrize(
    "spec, message",
    [
        (GridSpec(axes={"lr": []}), r"grid: axes.lr is empty"),
        (GridSpec(axes={"lr": 0.1}), r"grid: axes.lr = 0.1: an axis is a list of values or a string"),
        (GridSpec(axes={"lr": [0.1, 1e-1]}), r"grid: axes.lr: the value 0.1 appears twice"),
        (GridSpec(axes={"lr": [0.1]}, fixed={"lr": 0.2}), r"key 'lr' is in both \[axes\] and \[fixed\]"),
        (
            GridSpec(axes={"hybrid_lambda": [1.0]}, draws={"hybrid_lambda": [1, 2]}),
            r"key 'hybrid_lambda' is in both \[axes\] and \[draws\]",
        ),
        (GridSpec(fixed={"lr": [0.1, 0.2]}), r"fixed.lr = \[0.1, 0.2\]: a fixed value is one value"),
        (GridSpec(fixed={"draw": 1}), r"\[fixed\] 'draw' is set by the grid itself"),
        (GridSpec(fixed={"epoch": 1}), r"grid: \[fixed\]: unknown key 'epoch' \(did you mean 'epochs'\?\)"),
        (GridSpec(fixed={"epochs": "many"}), r"grid: fixed: epochs = 'many': not an integer"),
        (GridSpec(fixed={"batch_norm": 1}), r"batch_norm = 1: expected true or false"),
        (
            GridSpec(draws={"hybrid_lambda": [1, 2], "hybrid_gamma": [1]}),
            r"draws.hybrid_gamma has 1 values, but draws.hybrid_lambda \(2\) = 2",
        ),
        (GridSpec(draws={"n": 3, "hybrid_lambda": [1, 2]}), r"draws.hybrid_lambda has 2 values, but n = 3"),
        (GridSpec(draws={"n": 3, "hybrid_lambda": {"log10_uniform": [1, 3]}}), r"needs n \(how many draws\) and seed"),
        (GridSpec(draws={"n": 3, "seed": [1, 2], "lr": [1, 2, 3]}), r"draws.seed = \[1, 2\].*make seed an axis"),
        (GridSpec(draws={"n": 3, "seed": 0, "lr": {"normal": [0, 1]}}), r"draws.lr = .*a distribution is one of"),
        (
            GridSpec(draws={"n": 3, "seed": 0, "lr": {"uniform": [2, 1]}}),
            r"uniform needs \[low, high\] with low <= high",
        ),
        (GridSpec(draws={"n": 3, "seed": 0, "epochs": {"uniform": [1, 9]}}), r"uniform gives fractional values"),
        (GridSpec(draws={"n": 2, "seed": 0}), r"\[draws\] has no columns"),
    ],
)
def test_bad_specs_name_the_key_and_value(spec, message):
    with pytest.raises(ConfigError, match=message):
        expand(spec)


def test_random_draws_are_reproducible_row_by_row_in_sorted_key_order():
    draws = {
        "n": 5,
        "seed": 3,
        "hybrid_lambda": {"log10_uniform": [1, 3]},
        "hybrid_gamma": {"log10_uniform": [-1, 2]},
        "loss": {"choice": ["hybrid", "cll"]},
        "lr": {"uniform": [1e-3, 1e-2]},
    }
    rows = GridSpec(draws=draws).draw_rows()
    # The documented generation, written out: one default_rng(seed); per draw, columns in sorted order.
    rng = np.random.default_rng(3)
    expected = []
    for index in range(5):
        gamma = 10.0 ** rng.uniform(-1, 2)
        lam = 10.0 ** rng.uniform(1, 3)
        loss = ["hybrid", "cll"][int(rng.integers(2))]
        lr = rng.uniform(1e-3, 1e-2)
        expected.append({"hybrid_lambda": lam, "hybrid_gamma": gamma, "loss": loss, "lr": lr, "draw": index})
    assert rows == expected
    assert GridSpec(draws=draws).draw_rows() == rows  # reproducible
    assert GridSpec(draws={**draws, "n": 9}).draw_rows()[:5] == rows  # the first draws do not depend on n
    assert GridSpec(draws={**draws, "seed": 4}).draw_rows() != rows
    assert all(10 <= r["hybrid_lambda"] <= 1000 and 0.1 <= r["hybrid_gamma"] <= 100 for r in rows)
    # pinned: a numpy or code change that moves the stream would silently change every random grid
    assert GridSpec(draws={"n": 1, "seed": 0, "lr": {"uniform": [0, 1]}}).draw_rows()[0]["lr"] == 0.6369616873214543


def test_mixed_draws_keep_explicit_columns():
    rows = GridSpec(draws={"n": 2, "seed": 0, "hybrid_eta": [5, 10], "hybrid_lambda": {"uniform": [1, 2]}}).draw_rows()
    assert [r["hybrid_eta"] for r in rows] == [5.0, 10.0] and [r["draw"] for r in rows] == [0, 1]


def test_spec_json_round_trip():
    spec = GridSpec(
        axes={"lr": "3e-2,3e-3", "bits": [1, "float"]},
        fixed={"model": "nb", "epochs": 3},
        draws={"n": 4, "seed": 0, "hybrid_lambda": {"log10_uniform": [1, 3]}},
    )
    again = GridSpec.from_dict(json.loads(spec.to_json()))
    assert again == spec.normalized()
    assert list(again.axes) == ["lr", "bits"]
    assert expand(again) == expand(spec)
    with pytest.raises(ConfigError, match=r"grid: unknown section 'axis' \(did you mean 'axes'\?\)"):
        GridSpec.from_dict({"axis": {}})


# -- grid files -----------------------------------------------------------------------------------
TOML = """
[axes]
bits = "float,1..3"
int_bits = [1, 2]
lr = ["3e-2", 3e-3]

[draws]
n = 4
seed = 0
hybrid_lambda = { log10_uniform = [1, 3] }
hybrid_gamma = { log10_uniform = [-1, 2] }

[fixed]
model = "nb"
epochs = 2
"""


def test_load_toml_and_json_grid_files(tmp_path):
    toml = tmp_path / "grid.toml"
    toml.write_text(TOML)
    spec = load_grid_file(toml)
    assert spec.axes == {"bits": [None, 1, 2, 3], "int_bits": [1, 2], "lr": [0.03, 0.003]}
    as_json = tmp_path / "grid.json"
    as_json.write_text(spec.to_json())
    assert load_grid_file(as_json) == spec
    # bits=None with int_bits set is the trainer's error, not the grid's: ids are still computed.
    assert len(expand(spec)) == 4 * 2 * 2 * 4
    assert describe(spec) == "64 configurations: bits 4 × int_bits 2 × lr 2 × 4 draws"


@pytest.mark.parametrize(
    "text, suffix, message",
    [
        ("[axes]\nlearning_rate = [1]\n", ".toml", r"grid file .*g.toml: \[axes\]: unknown key 'learning_rate'"),
        ("[axes]\nhybrid_lamda = [1]\n", ".toml", r"unknown key 'hybrid_lamda' \(did you mean 'hybrid_lambda'\?\)"),
        ('[fixed]\nepochs = "ten"\n', ".toml", r"grid file .*g.toml: fixed: epochs = 'ten': not an integer"),
        (
            '[fixed]\nbatch_norm = "maybe"\n',
            ".toml",
            r"grid file .*: fixed: batch_norm = 'maybe': expected true or false",
        ),
        ("[axes]\nlr = 0.1\n", ".toml", r"grid file .*g.toml: axes.lr = 0.1: an axis is a list"),
        ('[axes]\nbits = "1..x"\n', ".toml", r"grid file .*g.toml: axes.bits '1..x': bad value '1..x'"),
        ("[fixd]\nlr = 1\n", ".toml", r"grid file .*: unknown section 'fixd' \(did you mean 'fixed'\?\)"),
        ("[axes\n", ".toml", r"grid file .*g.toml: not valid TOML"),
        ('{"axes": {"lr": [0.1,]}}', ".json", r"grid file .*g.json: not valid JSON"),
        ("[1, 2]", ".json", r"grid file .*g.json: a grid is a table"),
        ("x = 1", ".yaml", r"grid file .*g.yaml: unknown format .yaml"),
    ],
)
def test_grid_file_errors_name_the_file_key_and_value(tmp_path, text, suffix, message):
    path = tmp_path / f"g{suffix}"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_grid_file(path)


def test_missing_grid_file(tmp_path):
    with pytest.raises(ConfigError, match=r"grid file .*nope.toml does not exist"):
        load_grid_file(tmp_path / "nope.toml")


# -- presets --------------------------------------------------------------------------------------
def test_icpr2020_nb_preset(structures_dir):
    spec = preset("icpr2020-nb", structures_dir)
    records = expand(spec)
    assert len(records) == 8 * 6 * 100 * 2 == 9600
    assert describe(spec) == "9,600 configurations: bits 8 × int_bits 6 × lr 2 × 100 draws"
    assert all(r["model"] == "nb" and r["epochs"] == 500 and r["hybrid_eta"] == 10.0 for r in records)
    assert all("batch_size" not in r for r in records)  # per dataset: the runner's
    draw94 = next(r for r in records if r["draw"] == 94)
    assert draw94["hybrid_lambda"] == 18.700599879416533 and draw94["hybrid_gamma"] == 0.12769227815720113
    assert {(r["bits"], r["int_bits"], r["lr"]) for r in records} == {
        (b, i, lr) for b in range(1, 9) for i in range(1, 7) for lr in (3e-2, 3e-3)
    }
    assert len({config_id(r) for r in records}) == 9600
    assert preset("icpr2020-nb", structures_dir, data="letter").fixed["data"] == "letter"


def test_icpr2020_tan_preset(structures_dir):
    records = expand(preset("icpr2020-tan", structures_dir))
    assert len(records) == 9600
    assert all(r["model"] == "tan" and r["structure"] == "authors" for r in records)


def test_icpr2020_structure_preset(structures_dir):
    spec = preset("icpr2020-structure", structures_dir, data="letter")
    records = expand(spec)
    assert len(records) == 41 * 2 * 5 == 410
    assert describe(spec) == "410 configurations: size_penalty 41 × lr 2 × seed 5"
    first = records[0]
    assert (first["model"], first["structure"], first["bits"], first["data"]) == ("tan", "learn", None, "letter")
    assert (first["hybrid_lambda"], first["hybrid_gamma"], first["hybrid_eta"]) == (
        110.42138426284798,
        17.968254094768096,
        10.0,
    )  # = ICPR draw #15
    # The authors' ordering and candidate sets (read per dataset by the trainer), not K random ones.
    assert first["candidates_file"] == str(structures_dir.resolve() / paper.SETTINGS_FILE)
    assert "candidates" not in spec.fixed
    assert spec.axes["size_penalty"] == [float(v) for v in np.logspace(-7, 1, 41)]
    assert [r["seed"] for r in records[:6]] == [0, 1, 2, 3, 4, 0]  # the authors' 5 consecutive seeds
    assert preset("icpr2020-structure", structures_dir, data="satimage").fixed["hybrid_lambda"] == 10.226593600053572
    with pytest.raises(
        ConfigError,
        match=r"preset icpr2020-structure needs a dataset .*no data given; use one of "
        r"letter, satimage, usps, mnist",
    ):
        preset("icpr2020-structure", structures_dir)
    with pytest.raises(ConfigError, match=r"data 'digits' has no settings there"):
        preset("icpr2020-structure", structures_dir, data="digits")


def test_unknown_preset(structures_dir):
    with pytest.raises(ConfigError, match=r"unknown preset 'icpr2020-bn' \(did you mean 'icpr2020-nb'\?\)"):
        preset("icpr2020-bn", structures_dir)


def test_structures_dir_lookup(tmp_path, monkeypatch):
    monkeypatch.delenv(paper.STRUCTURES_DIR_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    here = tmp_path / "shared" / "paper" / "structures"
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    here.mkdir(parents=True)
    assert find_structures_dir() == here.resolve()  # ../shared/paper/structures from cwd
    monkeypatch.setenv(paper.STRUCTURES_DIR_ENV, str(tmp_path / "missing"))
    with pytest.raises(
        ConfigError,
        match=r"paper structures folder not found \(searched \$BNC_DEPLOY_STRUCTURES_DIR:"
        r" .*missing\); set BNC_DEPLOY_STRUCTURES_DIR",
    ):
        find_structures_dir()
    monkeypatch.setenv(paper.STRUCTURES_DIR_ENV, str(here))
    assert find_structures_dir() == here.resolve()
    with pytest.raises(ConfigError, match=r"preset data .*icpr2020_hybrid_draws.json does not exist"):
        preset("icpr2020-nb")  # the folder exists, the file does not
    with pytest.raises(ConfigError, match=r"searched the structures_dir argument: .*elsewhere"):
        preset("icpr2020-nb", tmp_path / "elsewhere")


def test_labels_are_not_keys_of_any_trainer():
    assert LABEL_KEYS.isdisjoint(BN_DEFAULTS) and LABEL_KEYS.isdisjoint(DNN_DEFAULTS)
