"""The C export of sign DNNs (``exporters/c_dnn.py``) through the verifier and the native runtime,
weights one per byte and packed to B bits (``--pack-bits``), the integer float32 rounding of its logits
swept over every reachable accumulator, and the header on an emulated Cortex-M4
(``bnc_deploy.targets.cortex_m_dnn``, skipped without the toolchain)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from bnc_deploy.artifacts.dnn import accumulator_bound
from bnc_deploy.errors import ExportError
from bnc_deploy.exporters import c_dnn
from bnc_deploy.exporters._c_bnc_layout import PACKED_GUARD_BYTES, unpack_codes
from bnc_deploy.exporters.base import exporters
from bnc_deploy.reference.dnn import DNNReferencePredictor
from bnc_deploy.runtimes.base import load_runtime
from bnc_deploy.targets import cortex_m_build
from bnc_deploy.testing import random_dnn_artifact
from bnc_deploy.verify import export_file

SHAPES = {
    "fc-std-2bit": dict(architecture="fc", bits=2),
    "fc-onehot-1bit": dict(architecture="fc", bits=1, encoding="onehot"),
    "fc-no-hidden-3bit": dict(architecture="fc", bits=3, hidden=()),
    "fc-one-hidden-8bit": dict(architecture="fc", bits=8, hidden=(5,)),
    "fc-no-batch-norm": dict(architecture="fc", bits=4, batch_norm=False),
    "cnn-onehot-3bit": dict(architecture="cnn", bits=3, encoding="onehot", max_cardinality=3),
    "cnn-std-colmajor-8bit": dict(architecture="cnn", bits=8, image_shape=(5, 6), pixel_order="column-major"),
    "cnn-one-conv-odd-7bit": dict(architecture="cnn", bits=7, hidden=(2,), image_shape=(7, 5)),
}


def _artifact(name: str):
    return random_dnn_artifact(sorted(SHAPES).index(name) + 40, **SHAPES[name])


def _export(artifact, tmp_path, **options):
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "model.h"
    report = export_file(artifact, path, "c", **options)
    return path, report


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_every_shape_is_exact_through_the_verifier(tmp_path, name):
    artifact = _artifact(name)
    path, report = _export(artifact, tmp_path)
    assert report.exact and report.exact_expected and report.scores_identical
    assert report.runtime == "native" and report.metadata["lowering"] == "integer-sign"
    rt = load_runtime(path)
    x = np.concatenate(
        [artifact.check_x, np.zeros((1, artifact.n_features), np.int64), artifact.cardinalities[None] - 1]
    )
    reference = DNNReferencePredictor(artifact)
    expected = reference.logits(x).astype(np.float32)
    keys = rt.integer_logits(x)
    assert keys.dtype == np.int32
    assert np.array_equal(keys, np.vectorize(c_dnn.logit_key)(expected))
    assert np.array_equal(c_dnn.logits_from_keys(keys), expected)
    assert np.array_equal(rt.predict(x), reference.predict(x))
    assert np.array_equal(rt.predict(x[0]), reference.predict(x[:1]))


def _width_artifact(bits: int, architecture: str, encoding: str):
    """Layers wide enough for several packed groups and a shorter last one at every B."""
    if architecture == "cnn":
        cnn = dict(hidden=(3, 2), image_shape=(6, 5), max_cardinality=3 if encoding == "onehot" else 5)
        return random_dnn_artifact(200 + bits, architecture="cnn", bits=bits, encoding=encoding, **cnn)
    fc = dict(hidden=(17 + bits, 9), n_features=21 + bits)
    return random_dnn_artifact(300 + bits, architecture="fc", bits=bits, encoding=encoding, **fc)


def _weight_bytes_macro(path) -> int:
    return int(re.search(r"#define \w+_WEIGHT_BYTES (\d+)UL", path.read_text()).group(1))


@pytest.mark.parametrize("architecture", ["fc", "cnn"])
@pytest.mark.parametrize("bits", range(1, 9))
def test_every_bit_width_is_exact_packed_and_not(tmp_path, bits, architecture):
    for encoding in ("standardized", "onehot"):
        artifact = _width_artifact(bits, architecture, encoding)
        keys = []
        for pack_bits in (False, True):
            path, report = _export(artifact, tmp_path / f"{encoding}-{pack_bits}", pack_bits=pack_bits)
            assert report.exact and report.exact_expected and report.scores_identical
            meta = report.metadata
            if pack_bits:
                per_layer = [-(-layer.codes.size * bits // 8) + PACKED_GUARD_BYTES for layer in artifact.layers]
                assert meta["weight_storage"] == f"packed{bits}" and meta["weight_bytes"] == sum(per_layer)
            else:
                assert meta["weight_storage"] == ("int16" if bits == 8 else "int8")
                assert meta["weight_bytes"] == artifact.n_parameters * (2 if bits == 8 else 1)
            assert _weight_bytes_macro(path) == meta["weight_bytes"]
            keys.append(load_runtime(path).integer_logits(artifact.check_x))
        assert np.array_equal(keys[0], keys[1])


def test_packed_weights_are_the_stored_weights_offset_and_halved():
    artifact = _artifact("cnn-std-colmajor-8bit")
    for k in range(len(artifact.layers) - 1):
        stored, _ = c_dnn._hidden_weights(artifact, k)
        stream = c_dnn.packed_weights(stored, 8)
        assert stream[-PACKED_GUARD_BYTES:].tolist() == [0] * PACKED_GUARD_BYTES
        codes = unpack_codes(stream, 8, stored.size).astype(np.int64)
        assert np.array_equal(2 * codes - 255, stored.reshape(-1))


def test_pack_bits_is_refused_for_relu_networks_as_declared():
    artifact = random_dnn_artifact(3, activation="relu")
    with pytest.raises(ExportError, match="--pack-bits packs the B-bit weight codes of sign networks"):
        c_dnn.build_c_dnn_bytes(artifact, pack_bits=True)
    spec = exporters()[("dnn", "c")]
    assert spec.refusals_for(artifact, {"pack_bits": True}) and not spec.refusals_for(artifact, {})
    assert not spec.refusals_for(_artifact("fc-std-2bit"), {"pack_bits": True})


def _rounding_artifact(bits: int, biases, *, hidden=()):
    art = random_dnn_artifact(7, architecture="fc", bits=bits, hidden=hidden, n_classes=len(biases), n_features=9)
    art.layers[-1].bias[:] = np.asarray(biases, dtype=np.float32)
    return art


def _sweep(artifact, tmp_path) -> int:
    """Every reachable output accumulator of every class: the header's integer logit against float32."""
    path, _ = _export(artifact, tmp_path)
    rt = load_runtime(path)
    last = len(artifact.layers) - 1
    scale = np.float32(artifact.weight_scale * artifact.layer_input_scales()[last])
    checked = 0
    for c, bias in enumerate(artifact.layers[last].bias):
        bound = int(accumulator_bound(artifact, last)[c])
        acc = np.arange(-bound, bound + 1)
        expected = acc.astype(np.float32) * scale + np.float32(bias)
        got = np.array([rt.logit_of(int(a), c) for a in acc], dtype=np.int64)
        assert np.array_equal(c_dnn.logits_from_keys(got), expected), f"class {c}, bias {bias!r}"
        assert np.array_equal(got, np.vectorize(c_dnn.logit_key)(expected))
        checked += acc.size
    return checked


def test_logit_rounding_matches_float32_on_every_accumulator(tmp_path):
    """Scale 1/(2^B - 1) * 2^-e (rounded products), biases from tiny to huge, both signs, zero, -0."""
    biases = [0.0, -0.0, 1e-7, -3.3e-5, 0.4999, -1.75, 1234.5678, -98765.4, 3.0e9]
    assert _sweep(_rounding_artifact(7, biases), tmp_path) > 100_000


def test_logit_rounding_ties_go_to_even(tmp_path):
    """B = 1 without hidden layers: the scale is 2^-e, so p = acc * 2^-e is exact and biases of
    1.5 * 2^(24 - e) put every odd acc exactly halfway between two float32 values (and a power-of-two
    bias crosses a binade when p is subtracted)."""
    art = _rounding_artifact(1, [1.0] * 4)
    e = -int(np.log2(art.input_scale))
    art.layers[-1].bias[:] = np.float32([1.5 * 2.0 ** (24 - e), -1.5 * 2.0 ** (25 - e), 2.0 ** (24 - e), -(2.0**-e)])
    assert _sweep(art, tmp_path) > 100


def test_invalid_codes_give_minus_one_and_nan(tmp_path):
    artifact = _artifact("cnn-onehot-3bit")
    path, _ = _export(artifact, tmp_path)
    rt = load_runtime(path)
    bad = np.zeros((3, artifact.n_features), dtype=np.uint8)
    bad[0, 0] = artifact.cardinalities[0]
    bad[1, -1] = 255
    logits, labels = rt.invoke(bad)
    assert labels.tolist() == [-1, -1, int(rt.predict(bad[2:])[0])]
    assert np.isnan(logits[:2]).all() and not np.isnan(logits[2]).any()


def test_same_bytes_for_the_same_model_and_the_prefix_names_everything():
    artifact = _artifact("fc-std-2bit")
    one = c_dnn.build_c_dnn_bytes(artifact)
    assert one == c_dnn.build_c_dnn_bytes(_artifact("fc-std-2bit"))
    packed = c_dnn.build_c_dnn_bytes(artifact, pack_bits=True)
    assert packed == c_dnn.build_c_dnn_bytes(_artifact("fc-std-2bit"), pack_bits=True) and packed != one
    named = c_dnn.build_c_dnn_source(artifact, name="digits")
    assert "digits_predict(" in named and "digits_logits(" in named and "DIGITS_N_CLASSES" in named
    assert not re.search(r"\bbnc_(?!deploy)", _code_only(named)) and "BNC_N" not in named
    with pytest.raises(ExportError, match="--name"):
        c_dnn.build_c_dnn_bytes(artifact, name="9lives")


def _code_only(source: str) -> str:
    return re.sub(r"/\*.*?\*/", "", source, flags=re.S)


@pytest.mark.parametrize("pack_bits", [False, True])
@pytest.mark.parametrize("name", ["fc-std-2bit", "cnn-std-colmajor-8bit", "fc-no-hidden-3bit", "cnn-onehot-3bit"])
def test_header_is_strict_c99_with_integers_only(tmp_path, name, pack_bits):
    cc = shutil.which(os.environ.get("CC") or "cc")
    if cc is None:
        pytest.skip("no C compiler")
    source = c_dnn.build_c_dnn_source(_artifact(name), name="net", pack_bits=pack_bits)
    code = _code_only(source)
    assert re.findall(r"#include\s*<[^>]+>", code) == ["#include <stdint.h>"]
    assert not re.search(r"\b(float|double|malloc|static\s+(?!inline|const)\w+)", code)
    (tmp_path / "net.h").write_text(source)
    (tmp_path / "use.c").write_text(
        '#include "net.h"\nint use(const uint8_t *x, int32_t *l);\n'
        "int use(const uint8_t *x, int32_t *l) { return net_logits(x, l) + net_predict(x); }\n"
    )
    flags = ["-std=c99", "-pedantic", "-Wall", "-Wextra", "-Wconversion", "-Wshadow", "-Wdouble-promotion", "-Werror"]
    done = subprocess.run([cc, *flags, "-c", "use.c", "-o", "use.o"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("name", ["fc-onehot-1bit", "cnn-one-conv-odd-7bit", "fc-one-hidden-8bit"])
def test_packed_windows_stay_inside_the_arrays_under_the_sanitizers(tmp_path, name):
    """Every 32-bit window read of the packed kernels lies inside its array (AddressSanitizer checks the
    const arrays' bounds), with no undefined shift or overflow, on the check rows and the extreme codes."""
    cc = shutil.which(os.environ.get("CC") or "cc")
    if (
        cc is None
        or subprocess.run(
            [cc, "-fsanitize=address", "-x", "c", "-", "-o", str(tmp_path / "t")],
            input="int main(void){return 0;}",
            text=True,
            capture_output=True,
        ).returncode
    ):
        pytest.skip("no C compiler with AddressSanitizer")  # fmt: skip
    artifact = _artifact(name)
    x = np.concatenate(
        [artifact.check_x, np.zeros((1, artifact.n_features), np.int64), artifact.cardinalities[None] - 1]
    )
    (tmp_path / "net.h").write_text(c_dnn.build_c_dnn_source(artifact, name="net", pack_bits=True))
    rows = ",\n".join("{" + ",".join(str(int(v)) for v in row) + "}" for row in x)
    (tmp_path / "main.c").write_text(
        '#include <stdio.h>\n#include "net.h"\n'
        f"static const uint8_t rows[{len(x)}][NET_N_FEATURES] = {{\n{rows}}};\n"
        f'int main(void) {{ int n; for (n = 0; n < {len(x)}; ++n) printf("%d\\n", net_predict(rows[n])); return 0; }}\n'
    )
    flags = ["-std=c99", "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
    built = subprocess.run([cc, *flags, "main.c", "-o", "main"], cwd=tmp_path, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    done = subprocess.run([str(tmp_path / "main")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert [int(v) for v in done.stdout.split()] == DNNReferencePredictor(artifact).predict(x).tolist()


def test_a_packed_sum_that_could_pass_int32_is_refused(monkeypatch):
    artifact = _artifact("fc-std-2bit")
    max_in = int(np.abs(artifact.input_codes.astype(np.int64)).max())
    packed = 2 * 3 * artifact.layers[0].n_in * max_in  # layer 0's bound on 2 * sum(u * in), B = 2
    monkeypatch.setattr(c_dnn, "HIDDEN_ACC_LIMIT", packed - 1)
    assert all(int(accumulator_bound(artifact, k).max()) < packed - 1 for k in range(len(artifact.layers) - 1))
    c_dnn.build_c_dnn_bytes(artifact)
    with pytest.raises(ExportError, match="packed sum"):
        c_dnn.build_c_dnn_bytes(artifact, pack_bits=True)


def test_an_output_accumulator_that_float32_would_round_is_refused(monkeypatch):
    monkeypatch.setattr(c_dnn, "OUTPUT_ACC_LIMIT", 10)
    with pytest.raises(ExportError, match="accumulator can reach"):
        c_dnn.build_c_dnn_bytes(_artifact("fc-std-2bit"))


# -- Cortex-M4 (QEMU mps2-an386) ----------------------------------------------------------------------
MISSING = cortex_m_build.tools_available()
REQUIRED = os.environ.get("BNC_DEPLOY_REQUIRE_CORTEX_M", "") not in ("", "0")
needs_toolchain = pytest.mark.skipif(
    MISSING is not None and not REQUIRED, reason=f"Cortex-M toolchain not installed: {MISSING}"
)


@needs_toolchain
@pytest.mark.parametrize("pack_bits", [False, True])
@pytest.mark.parametrize("name", ["fc-std-2bit", "cnn-onehot-3bit"])
def test_cortex_m4_and_m0_run_every_row_exactly(tmp_path, name, pack_bits):
    from bnc_deploy.targets import cortex_m_dnn

    artifact = _artifact(name)
    path, _ = _export(artifact, tmp_path, name="net", pack_bits=pack_bits)
    boards = ("mps2-an386", "microbit")
    report = cortex_m_dnn.check_dnn_header(path, artifact, boards=boards, workdir=tmp_path / "build")
    assert report["ok"], report["boards"]
    assert [board["board"] for board in report["boards"]] == list(boards)
    for board in report["boards"]:
        assert board["passed"] == board["n_rows"] == len(artifact.check_x) + 256
        assert board["invalid_failed"] == 0 and board["instructions"]["predict_per_row"] > 0
        model = board["model"]
        assert model["data_bss_bytes"] == 0 and model["stack_bounded"] and model["flash_bytes"] > 0


@needs_toolchain
def test_cortex_m_check_refuses_a_header_of_another_model(tmp_path):
    from bnc_deploy.errors import ConfigError
    from bnc_deploy.targets import cortex_m_dnn

    path, _ = _export(_artifact("fc-std-2bit"), tmp_path)
    with pytest.raises(ConfigError, match="not exported from this model"):
        cortex_m_dnn.check_dnn_header(path, _artifact("fc-onehot-1bit"))
