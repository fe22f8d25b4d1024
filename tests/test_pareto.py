"""Pareto selection over (size bits, ops, test error) and the three plots."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bnc_deploy.profiling.pareto import dominates, family, load_records, mark_pareto, pareto_front, plot_all


def rec(size, ops, error, **extra):
    return {"size_bits": size, "n_ops": ops, "test_error": error, **extra}


def test_front_by_hand():
    records = [
        rec(100, 10, 0.30),  # 0: smallest: on the front
        rec(200, 10, 0.20),  # 1: bigger but better: on the front
        rec(300, 10, 0.25),  # 2: dominated by 1
        rec(200, 5, 0.20),  # 3: dominates 1 (fewer ops)
        rec(200, 5, 0.20),  # 4: equal to 3: ties do not dominate each other
        rec(50, 100, 0.50),
    ]  # 5: smallest size: on the front
    assert pareto_front(records) == [0, 3, 4, 5]
    assert dominates(records[3], records[1]) and not dominates(records[3], records[4])


def test_missing_values_are_left_out():
    records = [rec(100, 10, None), rec(200, 10, 0.2), rec(None, 1, 0.1)]
    assert pareto_front(records) == [1]
    mark_pareto(records)
    assert [r["pareto"] for r in records] == [None, True, None]


def test_marked_within_each_dataset_and_shared_by_runtime_rows():
    rows = [
        rec(100, 10, 0.3, dataset="a", file="m1.onnx", runtime="onnxruntime", threads=1),
        rec(100, 10, 0.3, dataset="a", file="m1.onnx", runtime="onnxruntime", threads=None),
        rec(200, 10, 0.4, dataset="a", file="m2.onnx"),
        rec(900, 99, 0.9, dataset="b", file="m3.onnx"),
    ]  # alone in its dataset: on its front
    mark_pareto(rows, by="dataset")
    assert [r["pareto"] for r in rows] == [True, True, False, True]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 9), st.integers(1, 9), st.integers(0, 9)), min_size=1, max_size=12))
def test_front_properties(points):
    records = [rec(*p) for p in points]
    front = set(pareto_front(records))
    assert front  # a finite set always has a non-dominated member
    for i, r in enumerate(records):
        dominated = any(dominates(o, r) for o in records)
        assert (i in front) == (not dominated)


def test_load_records_formats(tmp_path):
    (tmp_path / "list.json").write_text(json.dumps([rec(1, 2, 0.1)]))
    (tmp_path / "one.json").write_text(json.dumps(rec(3, 4, 0.2)))
    (tmp_path / "wrapped.json").write_text(json.dumps({"records": [rec(5, 6, 0.3), rec(7, 8, 0.4)]}))
    records = load_records([tmp_path / n for n in ("list.json", "one.json", "wrapped.json")])
    assert [r["size_bits"] for r in records] == [1, 3, 5, 7]
    assert records[0]["file"].endswith("list.json")
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(ValueError, match="bad.json: not a JSON result file"):
        load_records([tmp_path / "bad.json"])
    (tmp_path / "num.json").write_text("3")
    with pytest.raises(ValueError, match="num.json: expected a JSON object"):
        load_records([tmp_path / "num.json"])
    with pytest.raises(FileNotFoundError, match="missing.json"):
        load_records([tmp_path / "missing.json"])


def test_family_names():
    assert family({"dataset": "letter", "structure": "nb"}) == "letter NB"
    assert family({"group": "mine", "dataset": "letter"}) == "mine"
    assert family({}) == "models"


def test_three_plots_as_png_and_svg(tmp_path):
    records = []
    for structure, base in (("nb", 0.30), ("tan", 0.20)):
        for bits in (1, 2, 3, 8, None):
            size = (bits or 32) * (1000 if structure == "nb" else 9000)
            records.append(
                rec(
                    size,
                    416,
                    base + 0.1 / (bits or 16),
                    bits=bits or 32,
                    quantized=bits is not None,
                    dataset="letter",
                    structure=structure,
                )
            )
    mark_pareto(records)
    written = plot_all(records, tmp_path, prefix="t_")
    names = sorted(p.rsplit("/", 1)[-1] for p in written)
    assert names == sorted(
        f"t_{n}.{ext}" for n in ("error_vs_size", "error_vs_ops", "error_vs_bits") for ext in ("png", "svg")
    )
    for p in written:
        data = open(p, "rb").read()
        assert len(data) > 5000
        assert data.startswith(b"\x89PNG") if p.endswith(".png") else b"<svg" in data[:2000]
