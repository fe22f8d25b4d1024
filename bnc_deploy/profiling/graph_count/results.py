"""What a count returns: per-node counts, parameter tensors, and the totals of one graph.

Contract: every number is **per input row**. ``ops`` None means "could not be counted" and makes
the totals that include it None; it is never silently 0. ``NodeCount.category`` is one of
:data:`CATEGORIES` (the package docstring defines them). :meth:`GraphCount.to_dict` is the JSON
form that ``bnc-profile --json`` writes; its keys are part of the command's interface.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

CATEGORIES = ("arithmetic", "addressing", "binning", "guard", "argmax", "rescale", "load-time", "free", "unknown")


@dataclass
class NodeCount:
    """Counts of one node (per input row). ``ops`` is None when the node could not be counted."""

    index: int
    op: str
    source_op: str
    output: str
    category: str
    shape: tuple | None
    ops: int | None = 0
    macs: int | None = None
    effective_additions: int | None = None
    lookups: int = 0
    folded: int = 0
    guard_share: int = 0
    note: str = ""


@dataclass
class ParamTensor:
    """A parameter tensor found in the graph."""

    name: str
    shape: tuple | None
    elements: int | None  # None: the tensor's shape is unknown
    bits_per_element: int
    param_bits: int | None
    storage: list  # [(initializer, dtype, elements, bits)]
    note: str = ""


@dataclass
class GraphCount:
    """Per-node counts and totals of one graph (all per input row)."""

    path: str
    format: str
    nodes: list
    params: list
    metadata: dict | None = None
    breakdown: dict | None = None  # DNN graphs: per-layer MACs, batch-norm and bias terms

    # -- totals -----------------------------------------------------------------------------------
    def total(self, category: str) -> int | None:
        """Sum of ``ops`` over nodes of ``category`` (None if one of them is uncountable)."""
        values = [n.ops for n in self.nodes if n.category == category]
        if category == "guard":
            values += [n.guard_share for n in self.nodes]
        return None if any(v is None for v in values) else int(sum(values))

    @property
    def unknown_ops(self) -> list[str]:
        return sorted({n.source_op for n in self.nodes if n.category == "unknown"})

    @property
    def complete(self) -> bool:
        """True when every node has a rule and a count, and every parameter a size."""
        return (
            not self.unknown_ops
            and all(n.ops is not None for n in self.nodes)
            and all(p.elements is not None for p in self.params)
        )

    @property
    def per_row_additions(self) -> int | None:
        return self.total("arithmetic")

    @property
    def folded_additions(self) -> int:
        return int(sum(n.folded for n in self.nodes))

    @property
    def paper_ops(self) -> int | None:
        """Arithmetic per row (effective additions for one-hot products) + folded additions."""
        per_row = self.per_row_additions
        return None if per_row is None or self.unknown_ops else per_row + self.folded_additions

    @property
    def macs(self) -> int:
        return int(sum(n.macs or 0 for n in self.nodes if n.category == "arithmetic"))

    @property
    def lookups(self) -> int:
        return int(sum(n.lookups for n in self.nodes))

    @property
    def param_elements(self) -> int | None:
        values = [p.elements for p in self.params]
        return None if None in values else int(sum(values))

    @property
    def param_bits(self) -> int | None:
        values = [p.param_bits for p in self.params]
        return None if None in values else int(sum(values))

    @property
    def storage_bits(self) -> int:
        seen = {}
        for p in self.params:
            for name, _, elements, bits in p.storage:
                seen[name] = elements * bits
        return int(sum(seen.values()))

    def totals(self) -> dict:
        """JSON-ready totals (per row)."""
        out = {c: self.total(c) for c in CATEGORIES if c not in ("unknown", "free")}
        out.update(
            paper_ops=self.paper_ops,
            per_row_additions=self.per_row_additions,
            folded_additions=self.folded_additions,
            macs=self.macs,
            lookups=self.lookups,
            param_elements=self.param_elements,
            param_bits=self.param_bits,
            storage_bits=self.storage_bits,
            n_nodes=len(self.nodes),
            n_load_time_nodes=sum(n.category == "load-time" for n in self.nodes),
            unknown_ops=self.unknown_ops,
            complete=self.complete,
        )
        return out

    def compare(self, size_bits: int | None = None, n_ops: int | None = None) -> dict:
        """Check the graph against analytic numbers (defaults: the file's metadata)."""
        meta = self.metadata or {}
        size_bits = meta.get("size_bits") if size_bits is None else size_bits
        n_ops = meta.get("n_ops") if n_ops is None else n_ops
        return {
            "size_bits": {
                "graph": self.param_bits,
                "analytic": size_bits,
                "equal": size_bits is not None and self.param_bits == size_bits,
            },
            "n_ops": {
                "graph": self.paper_ops,
                "analytic": n_ops,
                "equal": n_ops is not None and self.paper_ops == n_ops,
            },
        }

    def to_dict(self) -> dict:
        out = {
            "path": self.path,
            "format": self.format,
            "totals": self.totals(),
            "check": self.compare(),
            "nodes": [asdict(n) for n in self.nodes],
            "params": [asdict(p) for p in self.params],
        }
        if self.breakdown is not None:
            out["breakdown"] = self.breakdown
        return out

    def table(self) -> str:
        """Per-node table and totals, for people."""
        head = (
            f"{'#':>3} {'op':<16} {'category':<11} {'row shape':<14} {'ops':>8} {'MACs':>8} {'eff.add':>8} "
            f"{'lookups':>7} {'folded':>6}  note"
        )
        lines = [f"{self.path or '(graph)'} [{self.format}]", head, "-" * len(head)]
        for n in self.nodes:
            shape = "?" if n.shape is None else "x".join(str(d) for d in n.shape) or "scalar"
            ops = "?" if n.ops is None else f"{n.ops:,}"
            lines.append(
                f"{n.index:>3} {n.source_op[:16]:<16} {n.category:<11} {shape[:14]:<14} {ops:>8} "
                f"{'' if n.macs is None else f'{n.macs:,}':>8} "
                f"{'' if n.effective_additions is None else f'{n.effective_additions:,}':>8} "
                f"{n.lookups or '':>7} {n.folded or '':>6}  {n.note}"
            )
        t = self.totals()
        lines.append("-" * len(head))
        cats = ", ".join(
            f"{c} {format_count(t[c])}"
            for c in ("arithmetic", "addressing", "binning", "guard", "argmax", "rescale", "load-time")
        )
        lines.append(f"per row: {cats}; {t['lookups']:,} lookups; {t['macs']:,} MACs in products")
        lines.append(
            f"paper operations = arithmetic {format_count(t['arithmetic'])} "
            f"+ folded at load {t['folded_additions']:,} = {format_count(t['paper_ops'])}"
        )
        lines.append(
            f"parameters: {format_count(t['param_elements'])} elements, "
            f"{format_count(t['param_bits'])} parameter bits ({t['storage_bits']:,} bits stored)"
        )
        b = self.breakdown
        if b is not None:
            macs = format_count(b["macs"])
            if b["graph_macs"] != b["macs"]:
                macs += f" (graph {format_count(b['graph_macs'])})"
            lines.append(
                f"DNN: ops = MACs {macs} + batch-norm outputs {format_count(b['batch_norm_outputs'])} "
                f"+ bias outputs {format_count(b['bias_outputs'])}; "
                f"bits = {format_count(b['weights'])} weights x "
                f"{b['weight_bits']} + {format_count(b['batch_norm_units'])} batch-norm units x 64 "
                f"+ {format_count(b['biases'])} biases x 32"
            )
            lines += [f"NOT COUNTED: {p}" for p in b["problems"]]
        check = self.compare()
        if check["n_ops"]["analytic"] is not None:
            verdict = {True: "equal", False: "DIFFERENT"}
            lines.append(
                f"analytic: size {format_count(check['size_bits']['analytic'])} bits "
                f"({verdict[check['size_bits']['equal']]}), "
                f"ops {format_count(check['n_ops']['analytic'])} ({verdict[check['n_ops']['equal']]})"
            )
        if self.unknown_ops:
            lines.append(f"INCOMPLETE: no counting rule for {', '.join(self.unknown_ops)} (counted as unknown, not 0)")
        return "\n".join(lines)


def format_count(value) -> str:
    """A count for people: thousands separators, ``?`` for an uncountable (None) value."""
    return "?" if value is None else f"{value:,}"
