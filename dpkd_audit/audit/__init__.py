"""Empirical auditing of mechanisms: lower bounds on epsilon, positive controls.

- :func:`audit_sampler` / :func:`audit_mechanism`: a lower bound on epsilon, valid at the stated
  confidence, from outputs of a black-box sampler on two neighbouring inputs (event chosen on a
  selection part, counted on fresh samples, exact Clopper-Pearson bounds).
- :class:`Attack`: how the event is chosen (threshold, histogram, classifier, float bits; AUTO
  by output type, AUTO_REAL the same without float bits, i.e. auditing the real-valued design
  rather than its floating-point implementation).
- :func:`search_neighbouring_pair`: pick the most telling pair among candidate inputs on a pilot
  sample, then audit it on fresh samples.
- :func:`clopper_pearson`, :func:`epsilon_lower_bound`, :func:`optimal_attainable_bound`: the
  statistics, and the benchmark an audit is compared with; :func:`attainable_epsilon`: that
  benchmark for a mechanism's DP event (its privacy-loss tails).
- ``controls`` (loaded on first access): mechanisms that are wrong on purpose.

Never imports torch.
"""

from __future__ import annotations

import importlib
from typing import Any

from dpkd_audit.audit.attacks import Attack
from dpkd_audit.audit.attainable import attainable_epsilon
from dpkd_audit.audit.auditor import (
    POWER_FRACTION,
    AuditResult,
    Verdict,
    audit_mechanism,
    audit_sampler,
    resolve_attack,
)
from dpkd_audit.audit.bounds import (
    ProbabilityKind,
    clopper_pearson,
    epsilon_lower_bound,
    optimal_attainable_bound,
)
from dpkd_audit.audit.pair_search import search_neighbouring_pair

__all__ = [
    "POWER_FRACTION",
    "Attack",
    "AuditResult",
    "ProbabilityKind",
    "Verdict",
    "attainable_epsilon",
    "audit_mechanism",
    "audit_sampler",
    "clopper_pearson",
    "epsilon_lower_bound",
    "optimal_attainable_bound",
    "resolve_attack",
    "search_neighbouring_pair",
]


def __getattr__(name: str) -> Any:
    """Load ``dpkd_audit.audit.controls`` on first access (it may not be installed yet)."""
    if name == "controls":
        try:
            module = importlib.import_module("dpkd_audit.audit.controls")
        except ModuleNotFoundError as exc:
            if exc.name != "dpkd_audit.audit.controls":
                raise
            raise AttributeError("dpkd_audit.audit has no 'controls' module") from exc
        globals()["controls"] = module
        return module
    raise AttributeError(f"module 'dpkd_audit.audit' has no attribute {name!r}")
