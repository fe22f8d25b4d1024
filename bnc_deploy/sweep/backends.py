"""Where chunks run: in this process (``local``) or spread over a Ray cluster (``ray``).

A backend's :meth:`run` takes the planned :class:`~bnc_deploy.sweep.tasks.ChunkTask` list and
yields ``(task, outcome)`` as chunks finish (in completion order); the driver writes each one.
``thresholds()`` is read when a chunk is submitted, so the keep-best policy builds only models
that can still win.

Ray (``pip install bnc-deploy[distributed]``): ``ray.init(address=...)`` joins a running cluster
(``--address auto`` or ``ray://host:10001``); without an address a local instance starts with
``num_cpus`` CPUs. Each chunk is one Ray task (``num_gpus=1`` when the chunk asks for a GPU), which
runs the same :func:`~bnc_deploy.sweep.tasks.run_chunk` as the local backend, so results are
identical; only the driver writes the directory. Ray is the standard here instead of a hand-made
process pool: it schedules across machines, restarts lost workers and moves the results.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from bnc_deploy.errors import ConfigError, require_extra
from bnc_deploy.sweep.tasks import run_chunk


class LocalBackend:
    """Chunks one after another in this process (the batched trainer uses the CPU's threads or the GPU)."""

    name = "local"

    def run(self, tasks, *, thresholds: Callable[[], dict], on_epoch=None) -> Iterator:
        for task in tasks:
            task.thresholds = thresholds()
            yield task, run_chunk(task, on_epoch=on_epoch)

    def close(self) -> None:
        pass


class RayBackend:
    """Chunks as Ray tasks; at most ``in_flight`` submitted at a time (bounded memory on the driver)."""

    name = "ray"

    def __init__(self, address: str | None = None, num_cpus: int | None = None, in_flight: int | None = None):
        require_extra("bnc-sweep --backend ray", "distributed", "ray")
        import ray  # lazy: ray is the optional extra "distributed"

        self.ray = ray
        self.started_here = not ray.is_initialized()
        if self.started_here:
            kwargs = {"address": address} if address else {"num_cpus": num_cpus}
            for attempt in (1, 2):
                try:
                    ray.init(include_dashboard=False, log_to_driver=False, ignore_reinit_error=True, **kwargs)
                    break
                except ConnectionError as exc:
                    raise ConfigError(f"--address {address}: cannot connect to a Ray cluster ({exc})") from None
                except Exception as exc:  # noqa: BLE001  (Ray raises a bare Exception on a startup timeout)
                    # A local instance can fail to come up on a loaded machine: its raylet must
                    # register within a fixed 30 s. One more try, then a clear error.
                    ray.shutdown()
                    if address or attempt == 2:
                        where = f"the Ray cluster at {address}" if address else "a local Ray instance"
                        raise ConfigError(f"--backend ray: cannot start {where} ({exc})") from None
                    time.sleep(5)
        resources = ray.cluster_resources()
        self.in_flight = in_flight or max(1, int(resources.get("CPU", 1)))
        self.cluster_gpus = resources.get("GPU", 0)

    def run(self, tasks, *, thresholds: Callable[[], dict], on_epoch=None) -> Iterator:
        ray = self.ray
        remote = ray.remote(run_chunk)
        pending: dict = {}
        queue = list(tasks)
        while queue or pending:
            while queue and len(pending) < self.in_flight:
                task = queue.pop(0)
                task.thresholds = thresholds()
                gpus = gpus_per_task(task.device, self.cluster_gpus)
                ref = remote.options(num_gpus=gpus, num_cpus=1).remote(task)
                pending[ref] = task
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                task = pending.pop(ref)
                yield task, ray.get(ref)

    def close(self) -> None:
        if self.started_here and self.ray.is_initialized():
            self.ray.shutdown()


def gpus_per_task(device: str, cluster_gpus: float) -> int:
    """GPUs a Ray task asks for: one for ``cuda``, and for ``auto`` where the cluster has any (Ray
    hides the GPUs from a task that asked for none, so ``auto`` would otherwise train on the CPU)."""
    device = str(device)
    if device.startswith("cuda"):
        return 1
    return 1 if device == "auto" and cluster_gpus > 0 else 0


def make_backend(options):
    if options.backend == "local":
        return LocalBackend()
    if options.backend == "ray":
        return RayBackend(options.address, options.ray_num_cpus)
    raise ConfigError(f"unknown backend {options.backend!r}: use local or ray")
