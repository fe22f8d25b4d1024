"""Host deploy targets, both measured on this machine: ``x86-64``, a native program (BN models as the
header-only C export compiled by the host's cc, the ``native`` runtime; DNNs, which have no C export,
as ONNX in onnxruntime) and ``server`` (ONNX in onnxruntime, as ``bnc-serve`` runs it).

Why x86-64 ships the C header alone for BN models: a batch-1 onnxruntime call costs about 9 us
before any arithmetic (a letter NB or TAN model: 9 to 18 us in onnxruntime, 1.3 to 2.4 us as C), so
a latency budget would be met or missed by the session's overhead, not by the model; the ONNX
file of the same model is the ``server`` target's.

**latency_us** is the batch-1 median (p50) of the runtime call, in microseconds, from the
profiling library (:func:`bnc_deploy.profiling.latency.measure_latency`, ``mode="session"``,
1 thread: ``warmup`` untimed calls, then ``repeats`` x ``runs`` timed calls on the verification
rows); with several files, the slowest file's median. ``x86-64`` measures latency only on an
x86-64 host (elsewhere it is a problem of the measurement and stays None); ``server`` measures it
on whatever host runs the measurement (the server is this machine). Parity: the verifier.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bnc_deploy.targets.base import Export, ExportedFile, Target, register_target

LATENCY_METHOD = (
    "batch-1 p50 of the runtime call on this host (profiling.latency.measure_latency, session mode, 1 thread, "
    "{runs} x {repeats} calls after {warmup} warm-up calls); the slowest file"
)
X86_64 = ("x86_64", "amd64")


@dataclass(frozen=True)
class HostTarget(Target):
    """Files run on this host; ``machines``: the ``platform.machine()`` values latency is valid on
    (empty: any). ``runs``/``repeats``/``warmup``: the latency protocol; ``n_rows``: random rows
    timed after the check set."""

    machines: tuple[str, ...] = ()
    runs: int = 200
    repeats: int = 3
    warmup: int = 20
    n_rows: int = 64

    def measure_files(
        self, artifact: Any, files: tuple[ExportedFile, ...], workdir: Path, axes: tuple[str, ...]
    ) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
        from bnc_deploy.profiling.latency import cpu_model

        machine = platform.machine()
        details: dict[str, Any] = {"host": {"machine": machine, "cpu": cpu_model()}}
        if self.machines and machine.lower() not in self.machines:
            return {"latency_us": None}, details, [f"{self.name}: latency is not measured on a {machine} host"]
        timings = {f.path.name: self._time(artifact, f) for f in files}
        details["latency"] = timings
        return {"latency_us": max(t["p50_us"] for t in timings.values())}, details, []

    def _time(self, artifact: Any, file: ExportedFile) -> dict[str, Any]:
        """The :class:`~bnc_deploy.profiling.latency.Timing` (as a dict) of ``file`` in its runtime."""
        from bnc_deploy.formats.checkset import verification_rows
        from bnc_deploy.profiling.latency import measure_latency
        from bnc_deploy.runtimes.base import load_runtime

        adapter = load_runtime(file.path, file.result.runtime, threads=1)
        x, _ = verification_rows(artifact, None, self.n_rows)
        if adapter.metadata.get("input") == "raw":
            from bnc_deploy.formats.bnc import raw_representatives

            x = raw_representatives(artifact, x)
        timing = measure_latency(
            adapter, x, runs=self.runs, warmup=self.warmup, repeats=self.repeats, throughput_repeats=0
        )
        return timing.to_dict()


def host_target(name: str, description: str, exports: tuple[Export, ...], machines: tuple[str, ...]) -> HostTarget:
    """A host target whose latency is measured with the default protocol."""
    proto = HostTarget(name=name, description=description, exports=exports)
    method = LATENCY_METHOD.format(runs=proto.runs, repeats=proto.repeats, warmup=proto.warmup)
    return HostTarget(
        name=name,
        description=description,
        exports=exports,
        methods={"latency_us": method + (" (x86-64 hosts only)" if machines else "")},
        not_measurable={
            "flash": "a host has no flash budget (use --max-file-bytes)",
            "ram": "no static RAM figure on a host runtime",
            "instructions": "instructions are counted on emulated Cortex-M targets only",
        },
        parity="the verifier: each file in its runtime (onnxruntime; the C header compiled by the host's cc in "
        "the native runtime) against the NumPy reference",
        machines=machines,
    )


register_target(
    host_target(
        "x86-64",
        "x86-64 host, native: BN models as the header-only C export (native runtime), DNNs as ONNX in onnxruntime",
        (Export("c", kinds=("bnc",)), Export("onnx", kinds=("dnn",))),
        X86_64,
    )
)
register_target(
    host_target("server", "a server (this host): ONNX in onnxruntime, as bnc-serve runs it", (Export("onnx"),), ())
)
