"""``bnc-target``: set up an emulated target and run exported files on it, compared with this host.

Usage::

    bnc-target setup --target aarch64 [--cache DIR] [--mirror URL] [--force] [--json]
    bnc-target run --target aarch64 FILE... [--data NAME [--fold K]] [--json]

One target today, ``aarch64`` (:mod:`bnc_deploy.targets.aarch64`: qemu-user in a cached arm64
Debian root; label agreement, bit-identical scores and max |delta score| against x86_64; no
latency). The same commands run as ``python -m bnc_deploy.targets.aarch64 setup|run``.

Exit status 0 (setup done, every file passes), 1 (a file fails on the target), 2 with one line
for usage and setup errors (not root, a missing Debian package, no root set up, a bad file).
"""

from __future__ import annotations

import json

from bnc_deploy.cli.common import cli_main

PROG = "bnc-target"
#: Target name -> module with ``build_parser(prog, targets)``, ``execute(args)``.
TARGETS = {"aarch64": "bnc_deploy.targets.aarch64"}


@cli_main(PROG)
def main(argv: list[str] | None = None) -> int:
    from bnc_deploy.targets import aarch64

    parser = aarch64.build_parser(PROG, targets=tuple(TARGETS))
    args = parser.parse_args(argv)
    if getattr(args, "fold", None) is not None and args.data is None:
        parser.error("--fold needs --data")
    result, text, status = aarch64.execute(args)  # the one target; TARGETS[args.target] when there are more
    print(json.dumps(result, indent=2) if args.json else text)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
