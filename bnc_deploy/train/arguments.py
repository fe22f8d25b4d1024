"""Helpers the families' ``bnc-train`` adapters (``bnc_cli.py``, ``dnn_cli.py``) share: flag
names in messages, the "applies only to" refusal, and the torch thread count.

Importing this imports no torch.
"""

from __future__ import annotations

from bnc_deploy.errors import ConfigError


def flag(name: str) -> str:
    """The command-line flag of an argument attribute: ``int_bits`` -> ``--int-bits``."""
    return f"--{name.replace('_', '-')}"


def applies_only(flags: list[str], where: str) -> ConfigError:
    """``--a, --b apply only to WHERE`` (``applies`` for one flag): a flag given where it has no meaning."""
    return ConfigError(f"{', '.join(flags)} {'applies' if len(flags) == 1 else 'apply'} only to {where}")


def use_threads(threads: int) -> None:
    """Run torch on ``threads`` CPU threads (``--threads``); ConfigError below 1."""
    if threads < 1:
        raise ConfigError(f"--threads must be >= 1, got {threads}")
    import torch

    torch.set_num_threads(threads)


def refuse_random_model(epochs: int, init: str) -> None:
    """ConfigError for ``--epochs 0`` with ``--init uniform``: nothing would be trained, and the
    written model would be the random initialization (``--epochs 0 --init ml`` is the
    maximum-likelihood model and stays allowed)."""
    if epochs == 0 and init == "uniform":
        raise ConfigError(
            "--epochs 0 trains nothing; with --init uniform the model would be random: "
            "use --init ml for the maximum-likelihood model, or --epochs >= 1"
        )
