"""``bnc-fit`` (issue 27): from a dataset and a device budget to the most accurate model measured to fit.

* :mod:`bnc_deploy.fit.space`: the candidate configurations per family and bit width, pruned by the
  target's lower bounds before training (DNN cells sized to the budget: :mod:`bnc_deploy.fit.dnn_space`);
* :mod:`bnc_deploy.fit.search`: :func:`fit_to_budget`: the sweep engine trains the kept
  configurations (selection on the validation split), then the candidates are exported and measured
  on the target in order until one fits;
* :mod:`bnc_deploy.fit.sweeps`: the kept configurations through the sweep engine, and the trained
  candidates read back from its tables;
* :mod:`bnc_deploy.fit.size_probe`: with a flash or file limit, two short-trained networks per DNN
  family and weight storage measured on the target, so DNN cells are sized to what the file adds;
* :mod:`bnc_deploy.fit.latency_probe`: with a latency limit, one short-trained model per
  architecture timed on the target before training; the cells too slow are pruned;
* :mod:`bnc_deploy.fit.plan`: scales the search to a time budget (default 12 minutes) with the
  sweep's probe, after an allowance for measuring;
* :mod:`bnc_deploy.fit.progress`: the progress lines on stderr;
* :mod:`bnc_deploy.fit.result`: :class:`FitResult`, :class:`InfeasibleBudget`;
* :mod:`bnc_deploy.fit.report`: the stdout table, ``report.json``, ``report.md``, ``pareto.png`` / ``.svg``.

Importing this package imports no torch; training does (the sweep's workers, lazily).
"""

from __future__ import annotations

from bnc_deploy.fit.result import Attempt, Candidate, FitResult, InfeasibleBudget
from bnc_deploy.fit.search import fit_to_budget
from bnc_deploy.fit.space import FAMILIES, SpaceSettings

__all__ = ["FAMILIES", "Attempt", "Candidate", "FitResult", "InfeasibleBudget", "SpaceSettings", "fit_to_budget"]
