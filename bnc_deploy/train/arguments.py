"""Helpers the families' ``bnc-train`` adapters (``bnc_cli.py``, ``dnn_cli.py``) share: flag
names in messages, the "applies only to" refusal, the torch thread count, and the refusal of and
warning about a uniform start with no or few epochs.

Importing this imports no torch.
"""

from __future__ import annotations

import sys

from bnc_deploy.errors import ConfigError

#: ``--init uniform`` with fewer epochs than this warns (:func:`warn_short_uniform`). Issue 26,
#: breast cancer as a CSV, TAN at 3 bits, seeds 0..3: 14 to 64 % test error after 30 epochs from a
#: uniform start, 3.7 to 9.5 % after 100 (from maximum likelihood: 3.7 to 10 % after 30); the paper
#: trains 500.
UNIFORM_MIN_EPOCHS = 100


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


def short_uniform_message(epochs: int, init: str) -> str | None:
    """The warning for ``--init uniform`` with 1 .. :data:`UNIFORM_MIN_EPOCHS` - 1 epochs, else None
    (``--epochs 0`` is :func:`refuse_random_model`'s)."""
    if init != "uniform" or not 0 < epochs < UNIFORM_MIN_EPOCHS:
        return None
    return (
        f"--init uniform with --epochs {epochs}: a uniform start usually needs {UNIFORM_MIN_EPOCHS} or more "
        "epochs (the paper trains 500) and can end far from a good model; --init ml starts from maximum likelihood"
    )


def warn_short_uniform(epochs: int, init: str, prog: str = "bnc-train") -> None:
    """Print :func:`short_uniform_message` as ``PROG: warning: ...`` on stderr, if there is one."""
    message = short_uniform_message(epochs, init)
    if message is not None:
        print(f"{prog}: warning: {message}", file=sys.stderr)
