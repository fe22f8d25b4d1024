"""Dataset loaders, split protocols and ``load_dataset`` on small files written by the tests.

Tests marked ``shared_data`` read the real files from ``../shared/datasets`` and skip when absent.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.io

from bnc_deploy.datasets import (
    DATA_DIR_ENV,
    DatasetError,
    DiscreteDataset,
    dataset_names,
    find_data_dir,
    load_dataset,
    loaders,
    splits,
)
from bnc_deploy.datasets.discretize import FayyadIraniDiscretizer
from bnc_deploy.datasets.resize import imresize


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _nb_parameters(ds: DiscreteDataset) -> int:
    """Naive Bayes parameter count C * (1 + sum_i |X_i|)."""
    return ds.n_classes * (1 + int(ds.cardinalities.sum()))


# -- letter -----------------------------------------------------------------------------------
def _letter_text(n: int = 30, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        label = "ABC"[i % 3]
        values = np.clip(rng.integers(0, 6, 16) + 4 * (i % 3), 0, 15)
        rows.append(",".join([label, *map(str, values)]))
    return "\n".join(rows) + "\n"


def test_letter_reader(tmp_path):
    text = "B,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,0\n\nZ," + ",".join(["3"] * 16) + "\n"  # blank line skipped
    path = _write(tmp_path / "letter.data", text)
    raw = loaders.read_letter(path)
    assert raw.x.shape == (2, 16) and raw.x.dtype == np.float64
    assert raw.y.tolist() == [1, 25]
    assert raw.x[0].tolist() == [*range(1, 16), 0]
    assert raw.class_names == [chr(65 + i) for i in range(26)]
    assert raw.feature_names[0] == "x-box" and len(raw.feature_names) == 16


@pytest.mark.parametrize(
    "line, message",
    [
        ("A,1,2,3", r"line 2: expected 17 columns, got 4"),
        ("A," + ",".join(["1"] * 15) + ",x7", r"line 2, column 17: non-numeric value 'x7'"),
        ("1," + ",".join(["1"] * 16), r"line 2: unknown label '1'"),
    ],
)
def test_letter_reader_rejects_malformed_lines(tmp_path, line, message):
    path = _write(tmp_path / "bad_letter.data", "A," + ",".join(["1"] * 16) + "\n" + line + "\n")
    with pytest.raises(DatasetError, match=message) as info:
        loaders.read_letter(path)
    assert "bad_letter.data" in str(info.value)


# -- satimage ---------------------------------------------------------------------------------
def _sat_line(label: int, base: int) -> str:
    return " ".join(str(base + j) for j in range(36)) + f" {label}"


def test_satimage_reader_pools_and_maps_labels(tmp_path):
    trn = _write(tmp_path / "sat.trn", _sat_line(1, 0) + "\n" + _sat_line(7, 10) + "\n")
    tst = _write(tmp_path / "sat.tst", _sat_line(5, 20) + "\n")
    raw = loaders.read_satimage(trn, tst)
    assert raw.x.shape == (3, 36)
    assert raw.y.tolist() == [0, 5, 4]
    assert raw.x[:, 0].tolist() == [0, 10, 20]
    assert raw.class_names[5] == "very damp grey soil" and raw.class_names[0] == "red soil"
    assert raw.feature_names[:5] == ["pixel1_band1", "pixel1_band2", "pixel1_band3", "pixel1_band4", "pixel2_band1"]


@pytest.mark.parametrize(
    "line, message",
    [
        (_sat_line(6, 0), r"line 2: unknown class '6'"),
        ("1 2 3 4", r"line 2: expected 37 columns, got 4"),
        (_sat_line(1, 0).replace(" 5 ", " five ", 1), r"line 2, column 6: non-numeric value 'five'"),
    ],
)
def test_satimage_reader_rejects_malformed_lines(tmp_path, line, message):
    path = _write(tmp_path / "sat.trn", _sat_line(2, 0) + "\n" + line + "\n")
    with pytest.raises(DatasetError, match=message) as info:
        loaders.read_satimage_file(path)
    assert "sat.trn" in str(info.value)


# -- usps (MATLAB) ----------------------------------------------------------------------------
def _fake_usps(path: Path, n: int = 3) -> np.ndarray:
    """data[:, i, k] is image i of block k stored column-major; returns the upright images."""
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(10, n, 16, 16), dtype=np.uint8)
    data = np.empty((256, n, 10), dtype=np.uint8)
    for k in range(10):
        for i in range(n):
            data[:, i, k] = images[k, i].ravel(order="F")
    scipy.io.savemat(path, {"data": data})
    return images


def test_usps_labels_are_block_indices_and_pixels_stay_column_major(tmp_path):
    images = _fake_usps(tmp_path / "usps_all.mat")
    raw = loaders.read_usps_mat(tmp_path / "usps_all.mat")
    assert raw.x.shape == (30, 256)
    assert raw.y.tolist() == [k for k in range(10) for _ in range(3)]
    assert raw.class_names == ["1", "2", "3", "4", "5", "6", "7", "8", "9", "0"]
    row = 3 * 4 + 2  # block 4 (digit 5), image 2
    j = 37  # column-major: image row j % 16, column j // 16
    assert raw.x[row, j] == images[4, 2, j % 16, j // 16]
    np.testing.assert_array_equal(raw.x[row].reshape(16, 16).T, images[4, 2])  # README: reshape(16,16).T is upright
    assert raw.feature_names[j] == "pixel_r5_c2"


def test_usps_reader_rejects_wrong_layout(tmp_path):
    scipy.io.savemat(tmp_path / "wrong.mat", {"data": np.zeros((256, 2, 9), dtype=np.uint8)})
    with pytest.raises(DatasetError, match=r"wrong\.mat.*shape \(256, n, 10\), got \(256, 2, 9\)"):
        loaders.read_usps_mat(tmp_path / "wrong.mat")
    scipy.io.savemat(tmp_path / "other.mat", {"images": np.zeros((2, 2))})
    with pytest.raises(DatasetError, match=r"other\.mat: no variable 'data' \(found \['images'\]\)"):
        loaders.read_usps_mat(tmp_path / "other.mat")
    _write(tmp_path / "garbage.mat", "not a mat file")
    with pytest.raises(DatasetError, match=r"garbage\.mat: cannot read"):
        loaders.read_usps_mat(tmp_path / "garbage.mat")


# -- MNIST ------------------------------------------------------------------------------------
def _fake_mnist(path: Path, n_train: int = 6, n_test: int = 3, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    arrays = {
        "x_train": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "y_train": (np.arange(n_train) % 10).astype(np.uint8),
        "x_test": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "y_test": ((np.arange(n_test) + 5) % 10).astype(np.uint8),
    }
    np.savez(path, **arrays)
    return arrays


def test_mnist_downscales_by_averaging_2x2_blocks(tmp_path):
    arrays = _fake_mnist(tmp_path / "mnist.npz")
    raw = loaders.read_mnist_npz(tmp_path / "mnist.npz")
    assert raw.x.shape == (9, 196)
    assert raw.y.tolist() == [0, 1, 2, 3, 4, 5, 5, 6, 7]  # train then test
    img = arrays["x_test"][1].astype(float)
    r, c = 5, 9  # row-major: j = 14 r + c
    expected = (img[2 * r, 2 * c] + img[2 * r, 2 * c + 1] + img[2 * r + 1, 2 * c] + img[2 * r + 1, 2 * c + 1]) / 4
    assert raw.x[7, 14 * r + c] == expected
    assert raw.feature_names[14 * r + c] == "pixel_r5_c9"
    assert "14x14" in raw.info["downscale"] and raw.info["pixel_order"] == "row-major"
    assert raw.n_train is None  # pooled: the split is re-drawn


def test_mnist_bicubic_keeps_the_standard_split_and_flattens_column_major(tmp_path):
    arrays = _fake_mnist(tmp_path / "mnist.npz")
    raw = loaders.read_mnist_bicubic(tmp_path / "mnist.npz")
    assert raw.x.shape == (9, 196) and raw.n_train == 6
    assert raw.y.tolist() == [0, 1, 2, 3, 4, 5, 5, 6, 7]  # train then test, file order
    small = imresize(arrays["x_test"][1], 0.5)  # tested in test_mnist_paper.py
    r, c = 5, 9  # column-major: j = 14 c + r
    assert raw.x[7, 14 * c + r] == small[r, c] and raw.x[7, 14 * r + c] == small[c, r]
    assert small[r, c] != small[c, r]  # else the order would not show
    assert raw.feature_names[14 * c + r] == "pixel_r5_c9"
    np.testing.assert_array_equal(raw.x[7].reshape(14, 14, order="F"), small)
    assert "bicubic" in raw.info["downscale"] and raw.info["pixel_order"] == "column-major"


def test_downscale_by_two_arithmetic():
    images = np.arange(16, dtype=np.uint8).reshape(1, 4, 4)
    np.testing.assert_array_equal(loaders.downscale_by_two(images)[0], [[2.5, 4.5], [10.5, 12.5]])


@pytest.mark.parametrize("read", [loaders.read_mnist_npz, loaders.read_mnist_bicubic])
def test_mnist_reader_rejects_bad_files(tmp_path, read):
    np.savez(tmp_path / "keys.npz", x_train=np.zeros((1, 28, 28)), y_train=np.zeros(1))
    with pytest.raises(DatasetError, match=r"keys\.npz: missing keys \['x_test', 'y_test'\]"):
        read(tmp_path / "keys.npz")
    np.savez(
        tmp_path / "shape.npz",
        x_train=np.zeros((2, 28, 27)),
        y_train=np.zeros(2),
        x_test=np.zeros((1, 28, 28)),
        y_test=np.zeros(1),
    )
    with pytest.raises(DatasetError, match=r"shape\.npz: x_train must have shape \(n, 28, 28\), got \(2, 28, 27\)"):
        read(tmp_path / "shape.npz")
    np.savez(
        tmp_path / "label.npz",
        x_train=np.zeros((2, 28, 28)),
        y_train=np.array([3, 12]),
        x_test=np.zeros((1, 28, 28)),
        y_test=np.zeros(1),
    )
    with pytest.raises(DatasetError, match=r"label\.npz: y_train row 1 has label 12"):
        read(tmp_path / "label.npz")


# -- CSV --------------------------------------------------------------------------------------
def test_csv_with_header_and_string_labels(tmp_path):
    path = _write(
        tmp_path / "plants.csv", "height,width,species\n1.5,2,setosa\n3,4.25,virginica\n0,1,setosa\n2,2,virginica\n"
    )
    raw = loaders.read_csv(path)
    assert raw.feature_names == ["height", "width"]
    assert raw.class_names == ["setosa", "virginica"]
    assert raw.y.tolist() == [0, 1, 0, 1]
    np.testing.assert_array_equal(raw.x, [[1.5, 2], [3, 4.25], [0, 1], [2, 2]])


def test_csv_label_column_by_name_index_and_uci_style(tmp_path):
    path = _write(tmp_path / "t.csv", "label,a,b\n10,1,2\n2,3,4\n10,5,6\n2,7,8\n")
    by_name = loaders.read_csv(path, label_column="label")
    assert by_name.class_names == ["2", "10"] and by_name.y.tolist() == [1, 0, 1, 0]  # integers sort numerically
    assert by_name.feature_names == ["a", "b"]
    by_index = loaders.read_csv(path, label_column=0)
    np.testing.assert_array_equal(by_index.x, by_name.x)
    by_default = loaders.read_csv(path)  # the column named "label", not the last one
    np.testing.assert_array_equal(by_default.x, by_name.x)
    assert by_default.info["label_column"] == "label"
    no_header = loaders.read_csv(_write(tmp_path / "n.csv", "1,2,7\n3,4,8\n5,6,7\n7,8,8\n"))
    assert no_header.feature_names == ["x0", "x1"] and no_header.class_names == ["7", "8"]
    uci = loaders.read_csv(_write(tmp_path / "u.data", "Q,1,2\nR,3,4\nQ,5,6\nR,7,8\n"))  # label first
    assert uci.class_names == ["Q", "R"] and uci.x.tolist() == [[1, 2], [3, 4], [5, 6], [7, 8]]
    whole = loaders.read_csv(_write(tmp_path / "w.csv", "a,Class\n1,2.0\n2,10.0\n3,2.0\n4,10.0\n"))
    assert whole.class_names == ["2", "10"] and whole.info["label_column"] == "Class"  # any case


@pytest.mark.parametrize(
    "text, message",
    [
        ("a,b,y\n1,2,p\n1,2\n", r"line 3: expected 3 columns, got 2"),
        ("a,b,y\n1,2,p\n1,?,q\n", r"line 3, column b: non-numeric value '\?'"),
        ("a,b,y\n1,nan,p\n", r"line 2, column b: non-finite value 'nan'"),
        ("a,b,y\n", r"no data rows"),
    ],
)
def test_csv_rejects_malformed_files(tmp_path, text, message):
    path = _write(tmp_path / "broken.csv", text)
    with pytest.raises(DatasetError, match=message) as info:
        loaders.read_csv(path)
    assert "broken.csv" in str(info.value)


def test_csv_label_column_errors(tmp_path):
    path = _write(tmp_path / "c.csv", "1,2,3\n4,5,6\n")
    with pytest.raises(DatasetError, match=r"c\.csv: no column named 'y' \(columns: \['1', '2', '3'\]\)"):
        loaders.read_csv(path, label_column="y")
    with pytest.raises(DatasetError, match="label column 5 out of range for 3 columns"):
        loaders.read_csv(path, label_column=5)
    two = _write(tmp_path / "two.csv", "a,label,class\n1,1,q\n2,2,q\n1,1,p\n2,2,p\n")
    with pytest.raises(
        DatasetError,
        match=r"columns 'label', 'class' could each be the label; choose one with "
        r"--label-column",
    ):
        loaders.read_csv(two)
    assert loaders.read_csv(two, label_column="class").feature_names == ["a", "label"]


def _activity_without_label(tmp_path) -> Path:
    """samples/activity.csv without its label column: the last column is a continuous sensor value."""
    sample = Path(__file__).resolve().parent.parent / "samples" / "activity.csv"
    lines = sample.read_text().splitlines()
    return _write(tmp_path / "nolabel.csv", "\n".join(line.rsplit(",", 1)[0] for line in lines) + "\n")


def test_csv_without_a_label_column_is_refused(tmp_path):
    """Issue 11: the last numeric feature (skin_temp, 171 distinct values in 240 rows) is not a label."""
    path = _activity_without_label(tmp_path)
    with pytest.raises(DatasetError) as info:
        loaders.read_csv(path)
    message = str(info.value)
    assert (
        "nolabel.csv: label column 'skin_temp' (the last column, as no column is named label/class/target)" in message
    )
    assert "looks continuous" in message and "--label-column NAME|INDEX" in message
    # whole numbers, but nearly one value per row: refused by the distinct-value rule
    ids = _write(tmp_path / "ids.csv", "a,id\n" + "".join(f"{i % 3},{i}\n" for i in range(10)))
    with pytest.raises(
        DatasetError,
        match=r"label column 'id' .* has 10 distinct values in 10 rows \(more than 50% "
        r"of the rows\): it looks continuous or like an ID",
    ):
        loaders.read_csv(ids)
    assert len(loaders.read_csv(ids, max_class_fraction=1.0).class_names) == 10  # the library's knob
    # exactly half the rows distinct is still accepted (two rows per class on average)
    half = _write(tmp_path / "half.csv", "a,y\n" + "".join(f"{i},{i % 5}\n" for i in range(10)))
    assert len(loaders.read_csv(half).class_names) == 5


def test_csv_label_column_mixing_numbers_and_text_is_refused(tmp_path):
    """Issue 11: a stray 'x' among numeric labels became a class of its own."""
    rows = "".join(f"{i},{i % 3}\n" for i in range(12))
    path = _write(tmp_path / "stray.csv", "a,y\n" + rows + "12,x\n")
    with pytest.raises(
        DatasetError,
        match=r"stray\.csv: label column 'y' \(.*\) mixes numbers and text: text label "
        r"'x' on line 14 among numeric labels such as '0' \(line 2\); fix that row, "
        r"or choose the label column with --label-column NAME\|INDEX",
    ):
        loaders.read_csv(path)
    text = _write(tmp_path / "text.csv", "a,y\n1,p\n2,q\n3,p\n4,7\n5,q\n")
    with pytest.raises(DatasetError, match=r"numeric label '7' on line 5 among text labels such as 'p'"):
        loaders.read_csv(text)


# -- the paper's npz --------------------------------------------------------------------------
def _fake_paper_npz(path: Path, **overrides) -> dict:
    arrays = {
        "x_tr_fold1": np.array([[1, 1], [2, 3], [1, 2]], dtype=np.uint8),
        "t_tr_fold1": np.array([0, 1, 2], np.uint8),
        "x_te_fold1": np.array([[2, 3]], dtype=np.uint8),
        "t_te_fold1": np.array([1], np.uint8),
        "x_tr_fold2": np.array([[1, 1], [4, 1]], dtype=np.uint8),
        "t_tr_fold2": np.array([0, 1], np.uint8),
        "x_te_fold2": np.array([[3, 1]], dtype=np.uint8),
        "t_te_fold2": np.array([0], np.uint8),
        "n_folds": np.array(2),
    }
    arrays.update(overrides)
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return arrays


def test_paper_npz_is_shifted_to_zero_based_with_training_cardinalities(tmp_path):
    _fake_paper_npz(tmp_path / "toy.npz")
    ds = loaders.load_paper_npz(tmp_path / "toy.npz", fold=1)
    assert ds.x_train.tolist() == [[0, 0], [1, 2], [0, 1]] and ds.x_test.tolist() == [[1, 2]]
    assert ds.cardinalities.tolist() == [2, 3]
    assert ds.n_classes == 3 and ds.n_folds == 2 and ds.discretizer is None
    fold2 = loaders.load_paper_npz(tmp_path / "toy.npz", fold=2)
    assert fold2.cardinalities.tolist() == [4, 1] and fold2.n_classes == 3  # classes counted over all folds
    assert _nb_parameters(fold2) == 3 * (1 + 5)


def test_paper_npz_errors(tmp_path):
    _fake_paper_npz(tmp_path / "over.npz", x_te_fold1=np.array([[2, 4]], dtype=np.uint8))
    with pytest.raises(
        DatasetError, match=r"over\.npz: fold 1 test row 0, feature 1: value 4 outside the 1-based range 1\.\.3"
    ):
        loaders.load_paper_npz(tmp_path / "over.npz")
    _fake_paper_npz(tmp_path / "zero.npz", x_tr_fold1=np.array([[0, 1], [2, 3], [1, 2]], dtype=np.uint8))
    with pytest.raises(DatasetError, match=r"zero\.npz: fold 1 train row 0, feature 0: value 0"):
        loaders.load_paper_npz(tmp_path / "zero.npz")
    _fake_paper_npz(tmp_path / "nokey.npz", t_te_fold2=None)
    with pytest.raises(DatasetError, match=r"nokey\.npz: missing keys \['t_te_fold2'\]"):
        loaders.load_paper_npz(tmp_path / "nokey.npz", fold=2)
    _fake_paper_npz(tmp_path / "rows.npz", t_tr_fold1=np.array([0, 1], np.uint8))
    with pytest.raises(DatasetError, match=r"rows\.npz: x_tr_fold1 must be 2-D and t_tr_fold1 1-D with as many rows"):
        loaders.load_paper_npz(tmp_path / "rows.npz")
    with pytest.raises(DatasetError, match=r"fold 3 out of range, valid folds are 1\.\.2"):
        loaders.load_paper_npz(tmp_path / "over.npz", fold=3)


# -- splits -----------------------------------------------------------------------------------
@pytest.mark.parametrize("n, n_train", [(10, 7), (11, 7), (12, 8), (20000, 13333), (70000, 46667)])
def test_holdout_sizes_partition_and_determinism(n, n_train):
    train, test = splits.holdout_indices(n, seed=3)
    assert len(train) == n_train == round(2 * n / 3)
    assert sorted(np.concatenate([train, test]).tolist()) == list(range(n))
    again, _ = splits.holdout_indices(n, seed=3)
    np.testing.assert_array_equal(train, again)
    assert not np.array_equal(train, splits.holdout_indices(n, seed=4)[0])


def test_five_fold_cv_partitions_the_rows():
    n = 23
    tests = [splits.kfold_indices(n, 5, k, seed=1) for k in range(1, 6)]
    all_test = np.concatenate([t for _, t in tests])
    assert sorted(all_test.tolist()) == list(range(n))  # disjoint and covering
    assert sorted(len(t) for _, t in tests) == [4, 4, 5, 5, 5]
    for train, test in tests:
        assert not set(train) & set(test) and len(train) + len(test) == n
    with pytest.raises(DatasetError, match=r"valid folds are 1\.\.5"):
        splits.kfold_indices(n, 5, 6)


def test_standard_train_test_split_is_the_file_order_and_needs_n_train():
    train, test = splits.split_indices(7, splits.TRAIN_TEST_PROTOCOL, fold=1, seed=9, n_train=5)
    assert train.tolist() == [0, 1, 2, 3, 4] and test.tolist() == [5, 6]
    with pytest.raises(DatasetError, match=r"needs data with a fixed training part"):
        splits.split_indices(7, splits.TRAIN_TEST_PROTOCOL, fold=1, seed=0)
    with pytest.raises(DatasetError, match=r"7 rows with 7 training rows leaves a part empty"):
        splits.split_indices(7, splits.TRAIN_TEST_PROTOCOL, fold=1, seed=0, n_train=7)
    with pytest.raises(DatasetError, match=r"fold 2 out of range, valid folds are 1\.\.1"):
        splits.split_indices(7, splits.TRAIN_TEST_PROTOCOL, fold=2, seed=0, n_train=5)


def test_discretizer_is_fitted_on_the_training_part_only(tmp_path):
    raw = loaders.read_letter(_write(tmp_path / "l.data", _letter_text(60)))
    ds = splits.discretize_split("l", raw, splits.HOLDOUT_PROTOCOL, seed=5)
    train, test = splits.holdout_indices(60, seed=5)
    expected = FayyadIraniDiscretizer().fit(raw.x[train], raw.y[train])
    for got, want in zip(ds.discretizer.cut_points_, expected.cut_points_):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(ds.cardinalities, expected.n_values_)
    np.testing.assert_array_equal(ds.x_test, expected.transform(raw.x[test]))
    np.testing.assert_array_equal(ds.y_train, raw.y[train])
    assert ds.info["protocol"] == "2/3-1/3" and ds.info["split_seed"] == 5


# -- load_dataset -----------------------------------------------------------------------------
@pytest.fixture
def fake_data_dir(tmp_path):
    """A data folder laid out like ../shared/datasets, with tiny files."""
    root = tmp_path / "shared" / "datasets"
    (root / "discretized").mkdir(parents=True)
    rng = np.random.default_rng(0)
    letter = {f"x_{p}_fold1": rng.integers(1, 4, (n, 16), dtype=np.uint8) for p, n in (("tr", 8), ("te", 4))}
    letter["x_tr_fold1"][0] = 3  # every test value is within training's range
    np.savez(
        root / "discretized" / "letter.npz",
        **letter,
        t_tr_fold1=np.arange(8, dtype=np.uint8),
        t_te_fold1=np.arange(4, dtype=np.uint8),
        n_folds=np.array(1),
    )
    _write(root / "raw" / "letter" / "letter-recognition.data", _letter_text(45))
    trn = "".join(_sat_line(loaders.SATIMAGE_LABELS[i % 6], i) + "\n" for i in range(20))
    _write(root / "raw" / "satimage" / "sat.trn", trn)
    _write(root / "raw" / "satimage" / "sat.tst", "".join(_sat_line(7, i) + "\n" for i in range(6)))
    (root / "raw" / "usps").mkdir(parents=True)
    _fake_usps(root / "raw" / "usps" / "usps_all.mat")
    (root / "raw" / "mnist").mkdir(parents=True)
    _fake_mnist(root / "raw" / "mnist" / "mnist.npz", n_train=20, n_test=10)
    return root


def test_named_datasets_from_a_data_dir(fake_data_dir):
    letter = load_dataset("letter", data_dir=fake_data_dir)
    assert letter.x_train.shape == (8, 16) and letter.class_names[:3] == ["A", "B", "C"]
    assert letter.feature_names[0] == "x-box" and letter.cardinalities.tolist() == [3] * 16
    raw = load_dataset("letter-raw", data_dir=fake_data_dir, seed=2)
    assert (raw.x_train.shape[0], raw.x_test.shape[0]) == (30, 15) and raw.discretizer is not None
    sat = load_dataset("satimage-raw", fold=5, data_dir=fake_data_dir)
    assert (sat.x_train.shape[0], sat.x_test.shape[0], sat.n_folds, sat.fold) == (21, 5, 5, 5)
    assert sat.info["protocol"] == "5-fold CV"
    usps = load_dataset("usps-raw", data_dir=fake_data_dir)
    assert usps.x_train.shape == (20, 256) and usps.class_names[-1] == "0"
    mnist = load_dataset("mnist", data_dir=fake_data_dir, seed=3)
    assert mnist.x_train.shape == (20, 196) and mnist.x_test.shape == (10, 196)
    # The file's own split in file order (the seed plays no part), not a re-drawn 2/3-1/3 one.
    assert mnist.y_train.tolist() == [i % 10 for i in range(20)]
    assert mnist.y_test.tolist() == [(i + 5) % 10 for i in range(10)]
    np.testing.assert_array_equal(mnist.cardinalities, mnist.discretizer.n_values_)
    described = mnist.describe()
    assert described["protocol"] == "standard train/test" and "split_seed" not in described
    assert described["pixel_order"] == "column-major" and "bicubic" in described["downscale"]
    raw = loaders.read_mnist_bicubic(fake_data_dir / "raw" / "mnist" / "mnist.npz")
    np.testing.assert_array_equal(mnist.x_train, mnist.discretizer.transform(raw.x[:20]))
    # Fayyad-Irani sees only the 20 training images: refitting on them gives the same cuts.
    np.testing.assert_array_equal(mnist.cardinalities, FayyadIraniDiscretizer().fit(raw.x[:20], raw.y[:20]).n_values_)
    old = load_dataset("mnist-mean2x2", data_dir=fake_data_dir, seed=3)
    assert old.x_train.shape == (20, 196) and old.x_test.shape == (10, 196)
    pooled = np.concatenate([[i % 10 for i in range(20)], [(i + 5) % 10 for i in range(10)]])
    train, test = splits.holdout_indices(30, seed=3)
    assert old.y_train.tolist() == pooled[train].tolist() and old.y_test.tolist() == pooled[test].tolist()
    assert old.describe()["protocol"] == "2/3-1/3" and old.info["pixel_order"] == "row-major"
    assert "mean of 2x2" in old.info["downscale"]


def test_fold_and_name_errors(fake_data_dir):
    with pytest.raises(DatasetError, match=r"valid folds are 1\.\.1"):
        load_dataset("letter", fold=2, data_dir=fake_data_dir)
    with pytest.raises(DatasetError, match=r"valid folds are 1\.\.1"):
        load_dataset("letter-raw", fold=2, data_dir=fake_data_dir)
    with pytest.raises(DatasetError, match=r"valid folds are 1\.\.5"):
        load_dataset("satimage-raw", fold=0, data_dir=fake_data_dir)
    with pytest.raises(DatasetError, match=r"fold 2 out of range, valid folds are 1\.\.1 \(standard train/test"):
        load_dataset("mnist", fold=2, data_dir=fake_data_dir)
    with pytest.raises(DatasetError, match=r"valid folds are 1\.\.1"):
        load_dataset("mnist-mean2x2", fold=2, data_dir=fake_data_dir)
    with pytest.raises(DatasetError, match=r"unknown dataset 'letters'.*letter-raw.*mnist"):
        load_dataset("letters")
    with pytest.raises(DatasetError, match=r"satimage\.npz: file not found"):
        load_dataset("satimage", data_dir=fake_data_dir)
    assert set(dataset_names()) == {
        "digits",
        "letter",
        "satimage",
        "usps",
        "letter-raw",
        "satimage-raw",
        "usps-raw",
        "mnist",
        "mnist-mean2x2",
    }


def test_paths_dispatch_on_suffix_and_keys(fake_data_dir, tmp_path):
    _fake_paper_npz(tmp_path / "toy.npz")
    paper = load_dataset(tmp_path / "toy.npz", fold=2)
    assert paper.fold == 2 and paper.name == "toy" and paper.discretizer is None
    mnist = load_dataset(str(fake_data_dir / "raw" / "mnist" / "mnist.npz"))
    assert mnist.n_features == 196 and mnist.discretizer is not None and "downscale" in mnist.info
    named = load_dataset("mnist", data_dir=fake_data_dir)  # a path reads MNIST as the name does
    assert mnist.name == named.name == "mnist" and mnist.info == named.info
    np.testing.assert_array_equal(mnist.x_train, named.x_train)
    np.testing.assert_array_equal(mnist.x_test, named.x_test)
    usps = load_dataset(fake_data_dir / "raw" / "usps" / "usps_all.mat")
    assert usps.n_features == 256
    rows = "".join(f"{i},{i % 3},{'pq'[i % 2]}\n" for i in range(12))
    csv = load_dataset(_write(tmp_path / "my.csv", "a,b,y\n" + rows))
    assert (csv.name, csv.x_train.shape, csv.class_names) == ("my", (8, 2), ["p", "q"])
    with pytest.raises(DatasetError, match=r"unsupported file type '\.txt'"):
        load_dataset(_write(tmp_path / "x.txt", "1"))
    with pytest.raises(DatasetError, match=r"missing\.csv: file not found"):
        load_dataset(tmp_path / "missing.csv")


def test_validation_fraction(fake_data_dir):
    ds = load_dataset("letter-raw", data_dir=fake_data_dir, validation_fraction=0.2)
    assert (ds.x_train.shape[0], ds.x_val.shape[0], ds.x_test.shape[0]) == (24, 6, 15)
    assert ds.info["validation_fraction"] == 0.2


def test_find_data_dir_order_and_errors(fake_data_dir, tmp_path, monkeypatch):
    assert find_data_dir(fake_data_dir) == fake_data_dir.resolve()
    monkeypatch.setenv(DATA_DIR_ENV, str(fake_data_dir))
    assert find_data_dir() == fake_data_dir.resolve()
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(DatasetError, match=rf"nowhere.*{DATA_DIR_ENV}"):
        find_data_dir()
    monkeypatch.delenv(DATA_DIR_ENV)
    work = tmp_path / "repo"
    work.mkdir()
    monkeypatch.chdir(work)  # ../shared/datasets from here is the fake
    assert find_data_dir() == fake_data_dir.resolve()
    with pytest.raises(DatasetError, match=r"searched the data_dir argument: .*absent"):
        find_data_dir(tmp_path / "absent")


def test_digits_is_discrete_with_declared_range():
    ds = load_dataset("digits", seed=1)
    assert (ds.x_train.shape, ds.x_test.shape) == ((1198, 64), (599, 64))
    assert ds.cardinalities.tolist() == [17] * 64 and ds.discretizer is None
    assert ds.x_train.max() <= 16 and ds.source == "sklearn:digits"


# -- the real data (../shared/datasets) -------------------------------------------------------
def _shared_dir() -> Path:
    try:
        root = find_data_dir()
    except DatasetError as exc:
        pytest.skip(f"shared datasets not available: {exc}")
    if not (root / "discretized").is_dir():
        pytest.skip(f"shared datasets not available: {root / 'discretized'} is missing")
    return root


@pytest.mark.shared_data
def test_shared_discretized_letter_matches_the_paper():
    ds = load_dataset("letter", data_dir=_shared_dir())
    assert (ds.x_train.shape, ds.x_test.shape, ds.n_classes) == ((13342, 16), (6658, 16), 26)
    assert _nb_parameters(ds) == 3822


@pytest.mark.shared_data
def test_shared_discretized_usps_and_satimage_parameter_counts():
    root = _shared_dir()
    usps = load_dataset("usps", data_dir=root)
    assert (usps.x_train.shape, usps.x_test.shape) == ((7340, 256), (3660, 256))
    assert _nb_parameters(usps) == 8650
    sat = load_dataset("satimage", fold=1, data_dir=root)
    assert sat.n_folds == 5 and _nb_parameters(sat) == 2508


@pytest.mark.shared_data
def test_shared_raw_letter_loads_all_rows():
    ds = load_dataset("letter-raw", data_dir=_shared_dir())
    assert ds.x_train.shape[0] + ds.x_test.shape[0] == 20000
    assert ds.n_classes == 26 and ds.n_features == 16


# -- issue 11: a uint64 above 2^63 - 1 is reported as itself, not as its int64 wrap-around ------------
BIG = 2**63


def test_check_codes_reports_a_huge_uint64_as_itself():
    from bnc_deploy.validation import InputError, check_codes

    x = np.array([[1, 0], [BIG, 1]], dtype=np.uint64)
    with pytest.raises(InputError) as info:
        check_codes(x, np.array([3, 2]), ["a", "b"], where="rows")
    assert str(info.value) == (
        "rows: feature 0 ('a') has value 9223372036854775808 in row 1, outside its range 0..2 (1 bad value(s) in all)"
    )
    assert "-9223372036854775808" not in str(info.value)
    ok = check_codes(np.array([[2, 1]], dtype=np.uint64), np.array([3, 2]))
    assert ok.dtype == np.int64 and ok.tolist() == [[2, 1]]


def test_datasets_report_a_huge_uint64_as_itself(tmp_path):
    x = np.zeros((2, 2), dtype=np.uint64)
    with pytest.raises(DatasetError, match=r"toy train: label 9223372036854775808 in row 1 is outside 0\.\.1"):
        DiscreteDataset(
            name="toy",
            x_train=x,
            y_train=np.array([0, BIG], dtype=np.uint64),
            x_test=x,
            y_test=np.array([0, 1], dtype=np.uint64),
            cardinalities=[1, 1],
            class_names=["p", "q"],
            feature_names=["a", "b"],
        )
    with pytest.raises(DatasetError, match=r"feature 1 \('b'\) has value 9223372036854775808 in row 0"):
        DiscreteDataset(
            name="toy",
            x_train=np.array([[0, BIG]], dtype=np.uint64),
            y_train=np.array([0]),
            x_test=x,
            y_test=np.array([0, 1]),
            cardinalities=[1, 1],
            class_names=["p", "q"],
            feature_names=["a", "b"],
        )
    _fake_paper_npz(tmp_path / "bigx.npz", x_te_fold1=np.array([[2, BIG]], dtype=np.uint64))
    with pytest.raises(DatasetError, match=r"bigx\.npz: x_te_fold1 holds 9223372036854775808 at index \(0, 1\)"):
        loaders.load_paper_npz(tmp_path / "bigx.npz")
    _fake_paper_npz(tmp_path / "bigt.npz", t_te_fold2=np.array([BIG], dtype=np.uint64))
    with pytest.raises(
        DatasetError,
        match=r"bigt\.npz: t_te_fold2 row 0 has label 9223372036854775808; labels must "
        r"be class indices",
    ):
        loaders.load_paper_npz(tmp_path / "bigt.npz")


def test_validation_fraction_must_be_a_fraction(fake_data_dir):
    from bnc_deploy.errors import ConfigError

    for bad in (-0.1, 1.0, 2.0, float("nan")):
        with pytest.raises(ConfigError, match=r"validation fraction must be in \(0, 1\)"):
            load_dataset("digits", validation_fraction=bad)
    assert load_dataset("digits", validation_fraction=0).x_val is None


def test_directories_and_label_columns_of_non_csv_data(tmp_path, fake_data_dir):
    (tmp_path / "d.csv").mkdir()
    with pytest.raises(DatasetError, match=r"d\.csv: is a directory; give a dataset file"):
        load_dataset(tmp_path / "d.csv")
    with pytest.raises(DatasetError, match=r"is a directory, not a CSV file"):
        loaders.read_csv(tmp_path / "d.csv")
    with pytest.raises(
        DatasetError,
        match=r"applies only to CSV files \(\.csv, \.data\), not to the named dataset "
        r"'digits'",
    ):
        load_dataset("digits", label_column="y")
    _fake_paper_npz(tmp_path / "toy.npz")
    with pytest.raises(DatasetError, match=r"toy\.npz: a label column \('y'\) applies only to CSV files"):
        load_dataset(tmp_path / "toy.npz", label_column="y")
