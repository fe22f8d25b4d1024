"""skl2onnx converters for the estimators of :mod:`bnc_deploy.sklearn`: ``skl2onnx.to_onnx`` of a
pipeline emits this package's own exported graphs.

Use: ``import bnc_deploy.sklearn.onnx`` once (it registers the converters; nothing else does), then
``skl2onnx.to_onnx(estimator_or_pipeline, X[:1])``. Needs the ``sklearn`` extra (skl2onnx); without
it the import raises :class:`~bnc_deploy.errors.MissingExtraError`.

What each estimator becomes
---------------------------
``BNClassifier``
    The graph of the ``("bnc", "onnx")`` exporter (:func:`exporters.onnx_bnc.build_onnx_model`,
    default ``gather`` lowering, codes input) for ``artifact_``, inlined node for node: every
    initializer, node and intermediate tensor is copied with a unique name in the skl2onnx
    scope, the exporter's input ``x`` is wired to the operator's input (a ``Cast`` to int64 first
    when that input is not int64: whole-number codes) and its ``log_joint`` becomes ``scores``.
    No arithmetic is re-lowered here, so the scores are the exporter's, bit for bit.
``FayyadIraniDiscretizer``
    The exporter's raw-input binning (``onnx_bnc.raw_codes_or_minus_one``: the float32
    thresholds of ``formats.bnc.float32_thresholds`` and ``code = sum_k (x > t_k)``), built for
    the discretizer's cut points and inlined the same way. Output: int64 codes [N, D]; a
    non-finite value gets code ``-1`` (an invalid code: a following BN graph maps its row to NaN
    scores). Input: float32 (the binning compares float32 values; a float64 or integer input is
    cast to float32 first, as ``bnc-export --raw-inputs`` files take float32).
``DNNClassifier``
    The graph of the ``("dnn", "onnx")`` exporter (:func:`exporters.onnx_dnn.build_onnx_dnn`) for
    ``artifact_``, inlined the same way; ``scores`` are its ``logits``.

Why a discretizer + BN pipeline is bit-identical to ``bnc-export --raw-inputs``
    The two converters compose: the discretizer's converter emits the raw-input file's binning
    nodes, built by the same exporter function, so the codes (int64, exact) are those the raw
    file computes, ``-1`` for non-finite values included. The classifier's graph then clips them
    into ``-1 .. K`` (the identity on those codes: a bin code is at most ``n_cuts_i = |X_i| - 1``)
    and reads the same table rows, summed by the same ``ReduceSum`` in the same order, so
    ``scores`` equal the raw file's ``log_joint`` bit for bit, float models included. The
    converted graph has the raw-input file's nodes plus that one ``Clip`` (and the label
    ``Gather`` below); tests/test_sklearn_onnx.py checks both the node counts and the outputs on
    every test row. Fusing the two steps into the raw-input graph itself would need a rewrite of
    skl2onnx's pipeline topology (it has no hook for it); composing keeps each converter usable
    alone (a discretizer before another converted model, a classifier on codes).
    Like the raw-input file, the graph bins float32 values: with float64 ``X`` it equals
    ``pipeline.predict(X.astype(np.float32))``.

Outputs of a classifier (the final graph's outputs when it ends a pipeline)
    ``label``: the original ``classes_`` values: int64 [N] for integer, boolean or whole-number
    float labels, string [N] for string labels (other label types raise ExportError). A row the
    exported graph marks invalid (a code out of range, a non-finite raw value) gets ``-1``
    (integer labels) or ``""`` (string labels) and all-NaN ``scores``. With ``classes_ == 0 ..
    C-1`` the exporter's ``label`` is the output unchanged; otherwise one ``Gather`` maps the
    class index into ``classes_``.
    ``scores``: float32 [N, C], the exporter's ``log_joint`` (BN: ``log p(c, x)``, what
    ``BNClassifier.log_joint`` / the multi-class ``decision_function`` return; DNN: ``logits``).
    No ZipMap and no probabilities: skl2onnx's ``zipmap`` option is accepted and ignored.

Opset: the exporters' default (17) when skl2onnx's target opset allows it, else the target
(at least 13); a DNN with 8-bit weights needs 21 (int16 ``DequantizeLinear``).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from bnc_deploy.errors import ExportError, MissingExtraError

try:
    from skl2onnx import update_registered_converter
    from skl2onnx.common.data_types import FloatTensorType, Int64TensorType, StringTensorType
except ImportError as _exc:  # the optional extra
    raise MissingExtraError("converting estimators with skl2onnx (bnc_deploy.sklearn.onnx)", "sklearn", _exc) from None

from bnc_deploy.exporters._onnx_graph import DEFAULT_OPSET, MIN_OPSET, GraphBuilder
from bnc_deploy.exporters.onnx_bnc import build_onnx_model, raw_codes_or_minus_one
from bnc_deploy.exporters.onnx_dnn import build_onnx_dnn
from bnc_deploy.formats.bnc import OUTPUT_LOG_JOINT
from bnc_deploy.formats.dnn import OUTPUT_LOGITS
from bnc_deploy.formats.metadata import INPUT_NAME, INVALID_LABEL, OUTPUT_LABEL
from bnc_deploy.sklearn import BNClassifier, DNNClassifier, FayyadIraniDiscretizer

if TYPE_CHECKING:
    from skl2onnx.common._container import ModelComponentContainer
    from skl2onnx.common._topology import Operator, Scope

#: Names of a classifier's outputs (the graph's outputs when it ends the pipeline).
LABEL_OUTPUT = "label"
SCORES_OUTPUT = "scores"
#: Name of the discretizer's output (an intermediate tensor inside a pipeline).
CODES_OUTPUT = "codes"
#: Label of an invalid row for string labels (integer labels use ``formats.metadata.INVALID_LABEL``).
INVALID_STRING_LABEL = ""

#: skl2onnx aliases of the registered converters.
ALIAS_BNC = "BncDeployBNClassifier"
ALIAS_DNN = "BncDeployDNNClassifier"
ALIAS_DISCRETIZER = "BncDeployFayyadIraniDiscretizer"


# -- inlining an exported model ---------------------------------------------------------------------
def graph_opset(container: ModelComponentContainer, minimum: int = MIN_OPSET) -> int:
    """Opset to build the exporter's graph at: its default, lowered to skl2onnx's target."""
    target = container.target_opset
    if target is not None and target < minimum:
        raise ExportError(f"bnc-deploy's ONNX graphs need opset >= {minimum}; skl2onnx targets {target}")
    return DEFAULT_OPSET if target is None else min(DEFAULT_OPSET, int(target))


def inline_model(
    scope: Scope, container: ModelComponentContainer, model: onnx.ModelProto, wiring: dict[str, str], prefix: str
) -> dict[str, str]:
    """Copy ``model``'s initializers and nodes into ``container``, renaming every tensor.

    ``wiring`` maps the model's graph inputs/outputs to the skl2onnx names they become; every other
    tensor gets a unique name ``prefix_<its name>`` in ``scope``. Returns the full renaming.
    Only the default domain and no subgraphs: what the exporters emit.
    """
    graph = model.graph
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    names = dict(wiring)

    def rename(name: str) -> str:
        if name == "":  # an omitted optional input
            return name
        if name not in names:
            names[name] = scope.get_unique_variable_name(f"{prefix}_{name}")
        return names[name]

    for tensor in graph.initializer:
        container.add_initializer(rename(tensor.name), tensor.data_type, list(tensor.dims), tensor)
    for node in graph.node:
        if node.domain not in ("", "ai.onnx"):
            raise ExportError(f"cannot inline node {node.op_type} of domain {node.domain!r}")
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            raise ExportError(f"cannot inline node {node.op_type} with a subgraph")
        container.add_node(
            node.op_type,
            [rename(i) for i in node.input],
            [rename(o) for o in node.output],
            op_version=opset,
            name=scope.get_unique_operator_name(f"{prefix}_{node.op_type}"),
            **attrs,
        )
    return names


def _input_as(scope: Scope, container: ModelComponentContainer, variable: Any, onnx_type: int, prefix: str) -> str:
    """The name of ``variable`` as a tensor of ``onnx_type`` (a Cast when it is another type)."""
    if variable.type.to_onnx_type().tensor_type.elem_type == onnx_type:
        return str(variable.full_name)
    cast = scope.get_unique_variable_name(f"{prefix}_input")
    container.add_node(
        "Cast", [variable.full_name], [cast], to=onnx_type, name=scope.get_unique_operator_name(f"{prefix}_Cast")
    )
    return cast


# -- classifiers ------------------------------------------------------------------------------------
def label_kind(classes: np.ndarray) -> str:
    """``"int"`` or ``"string"``: how ``classes_`` become the ``label`` tensor; ExportError else."""
    classes = np.asarray(classes)
    if classes.dtype.kind in "iub":
        return "int"
    if classes.dtype.kind == "f" and np.array_equal(classes, np.round(classes)) and np.abs(classes).max() < 2.0**53:
        return "int"  # whole-number floats (a classifier's targets cannot be other floats)
    if classes.dtype.kind in "US" or (classes.dtype.kind == "O" and all(isinstance(c, str) for c in classes)):
        return "string"
    raise ExportError(
        f"the ONNX label output holds integer or string labels; classes_ has dtype {classes.dtype} "
        "(encode the labels as integers or strings before fitting)"
    )


def _classifier_parser(scope: Scope, model: Any, inputs: list, custom_parsers: Any = None) -> list:
    """One operator with outputs ``label`` (classes_' type) and ``scores`` (float32)."""
    alias = ALIAS_BNC if isinstance(model, BNClassifier) else ALIAS_DNN
    operator = scope.declare_local_operator(alias, model)
    operator.inputs = inputs
    label_type = Int64TensorType() if label_kind(model.classes_) == "int" else StringTensorType()
    operator.outputs.append(scope.declare_local_variable(LABEL_OUTPUT, label_type))
    operator.outputs.append(scope.declare_local_variable(SCORES_OUTPUT, FloatTensorType()))
    return list(operator.outputs)


def _classifier_shape(operator: Operator) -> None:
    n = operator.inputs[0].get_first_dimension()
    classes = operator.raw_operator.classes_
    label_type = Int64TensorType if label_kind(classes) == "int" else StringTensorType
    operator.outputs[0].type = label_type([n])
    operator.outputs[1].type = FloatTensorType([n, len(classes)])


def _map_labels(
    scope: Scope, container: ModelComponentContainer, classes: np.ndarray, index: str, out: str, prefix: str
) -> None:
    """``out = classes[index]`` with index ``-1`` (invalid row) -> the invalid label.

    ``Gather`` reads index -1 as the last entry, so the invalid label is appended to the classes.
    """
    table = scope.get_unique_variable_name(f"{prefix}_classes")
    if label_kind(classes) == "int":
        values = np.append(np.asarray(classes).astype(np.int64), INVALID_LABEL)
        container.add_initializer(table, TensorProto.INT64, [len(values)], values.tolist())
    else:
        values = [str(c).encode("utf-8") for c in classes] + [INVALID_STRING_LABEL.encode("utf-8")]
        container.add_initializer(table, TensorProto.STRING, [len(values)], values)
    container.add_node("Gather", [table, index], [out], axis=0, name=scope.get_unique_operator_name(f"{prefix}_label"))


def _convert_classifier(
    scope: Scope, operator: Operator, container: ModelComponentContainer, model: onnx.ModelProto, scores: str
) -> None:
    """Inline ``model`` (input ``x`` int64 codes; outputs ``scores`` and ``label``) for ``operator``."""
    est = operator.raw_operator
    prefix = operator.full_name
    classes = np.asarray(est.classes_)
    codes = _input_as(scope, container, operator.inputs[0], TensorProto.INT64, prefix)
    identity = label_kind(classes) == "int" and np.array_equal(classes, np.arange(len(classes)))
    index = operator.outputs[0].full_name if identity else scope.get_unique_variable_name(f"{prefix}_class_index")
    wiring = {INPUT_NAME: codes, scores: operator.outputs[1].full_name, OUTPUT_LABEL: index}
    inline_model(scope, container, model, wiring, prefix)
    if not identity:
        _map_labels(scope, container, classes, index, operator.outputs[0].full_name, prefix)


def _convert_bnc(scope: Scope, operator: Operator, container: ModelComponentContainer) -> None:
    """BNClassifier: the ``("bnc", "onnx")`` exporter's graph of ``artifact_`` (codes input)."""
    model = build_onnx_model(operator.raw_operator.artifact_, opset=graph_opset(container))
    _convert_classifier(scope, operator, container, model, OUTPUT_LOG_JOINT)


def _convert_dnn(scope: Scope, operator: Operator, container: ModelComponentContainer) -> None:
    """DNNClassifier: the ``("dnn", "onnx")`` exporter's graph of ``artifact_``."""
    artifact = operator.raw_operator.artifact_
    target = container.target_opset
    model = build_onnx_dnn(artifact, opset=graph_opset(container))
    used = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    if target is not None and used > target:
        raise ExportError(f"this DNN's graph needs opset {used} (8-bit weights); skl2onnx targets {target}")
    _convert_classifier(scope, operator, container, model, OUTPUT_LOGITS)


# -- discretizer ------------------------------------------------------------------------------------
def _cut_point_model(discretizer: Any) -> SimpleNamespace:
    """What the exporter's binning reads of a model: the discretizer (``to_dict()`` form) and the
    feature space it implies (``|X_i| = n_cuts_i + 1``)."""
    n_values = np.array([len(c) + 1 for c in discretizer.cut_points_], dtype=np.int64)
    names = getattr(discretizer, "feature_names_in_", None)
    return SimpleNamespace(
        discretizer=discretizer.to_dict(),
        n_features=len(n_values),
        cardinalities=n_values,
        feature_names=[str(n) for n in names] if names is not None else [f"x{i}" for i in range(len(n_values))],
    )


def binning_model(discretizer: Any, opset: int = DEFAULT_OPSET) -> onnx.ModelProto:
    """The raw-input binning of the BN exporter as a model: float32 ``x`` [N, D] -> int64 ``codes``."""
    g = GraphBuilder()
    codes = raw_codes_or_minus_one(g, _cut_point_model(discretizer))
    g.op("Identity", [codes], CODES_OUTPUT)  # a named output; removed by skl2onnx's identity pass
    d = len(discretizer.cut_points_)
    graph = helper.make_graph(
        g.nodes,
        "fayyad_irani_binning",
        inputs=[helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, ["N", d])],
        outputs=[helper.make_tensor_value_info(CODES_OUTPUT, TensorProto.INT64, ["N", d])],
        initializer=g.initializers,
    )
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets))
    onnx.checker.check_model(model, full_check=True)
    return model


def _discretizer_shape(operator: Operator) -> None:
    n = operator.inputs[0].get_first_dimension()
    operator.outputs[0].type = Int64TensorType([n, len(operator.raw_operator.cut_points_)])


def _convert_discretizer(scope: Scope, operator: Operator, container: ModelComponentContainer) -> None:
    prefix = operator.full_name
    raw = _input_as(scope, container, operator.inputs[0], TensorProto.FLOAT, prefix)
    model = binning_model(operator.raw_operator, graph_opset(container))
    inline_model(scope, container, model, {INPUT_NAME: raw, CODES_OUTPUT: operator.outputs[0].full_name}, prefix)


def _discretizer_parser(scope: Scope, model: Any, inputs: list, custom_parsers: Any = None) -> list:
    operator = scope.declare_local_operator(ALIAS_DISCRETIZER, model)
    operator.inputs = inputs
    operator.outputs.append(scope.declare_local_variable(CODES_OUTPUT, Int64TensorType()))
    return list(operator.outputs)


# -- registration -----------------------------------------------------------------------------------
#: skl2onnx passes classifiers inside a pipeline the ``zipmap`` option; accepted, ignored (see above).
_CLASSIFIER_OPTIONS = {"zipmap": [True, False, "columns"], "nocl": [True, False]}

update_registered_converter(
    BNClassifier,
    ALIAS_BNC,
    _classifier_shape,
    _convert_bnc,
    overwrite=True,
    parser=_classifier_parser,
    options=_CLASSIFIER_OPTIONS,
)
update_registered_converter(
    DNNClassifier,
    ALIAS_DNN,
    _classifier_shape,
    _convert_dnn,
    overwrite=True,
    parser=_classifier_parser,
    options=_CLASSIFIER_OPTIONS,
)
update_registered_converter(
    FayyadIraniDiscretizer,
    ALIAS_DISCRETIZER,
    _discretizer_shape,
    _convert_discretizer,
    overwrite=True,
    parser=_discretizer_parser,
)
