"""Names the ``dpkd`` parsers offer, spelled out here so that building them imports nothing heavy.

The enums they mirror (:class:`~dpkd_audit.accountants.budget.PlanKind`,
:class:`~dpkd_audit.pipelines.common.teacher.TeacherArchitecture`,
:class:`~dpkd_audit.audit.attacks.Attack`, :class:`~dpkd_audit.audit.training.OneRunAnalysis`)
live in modules that import dp_accounting and scipy (about a second); ``tests/test_cli.py``
checks that the lists here match them. One spelling rule everywhere: a name is matched with
case, dashes and underscores ignored (``laplace``, ``Laplace``, ``LAPLACE`` are one mechanism;
``float-bits`` and ``float_bits`` one attack).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

__all__ = ["ATTACKS", "BATCH_RELATIONS", "ONE_RUN_ANALYSES", "PLAN_KINDS", "SAMPLINGS",
           "TEACHER_ARCHITECTURES", "flag_form", "name_key", "name_type"]

#: ``dpkd budget MECHANISM``: the values of ``PlanKind``.
PLAN_KINDS = ("laplace", "laplace-noisy-max", "gaussian", "subsampled-gaussian",
              "randomized-response", "shuffle", "dp-sgd")

#: ``dpkd budget dp-sgd --sampling``: the values of ``DpSgdSampling``.
SAMPLINGS = ("poisson", "shuffle", "sequential", "balls-in-bins")

#: ``dpkd budget dp-sgd --relation``: the values of ``BatchRelation``.
BATCH_RELATIONS = ("add/remove-one", "zero-out", "replace-one")

#: ``dpkd audit --attack``: the values of ``Attack``.
ATTACKS = ("threshold", "histogram", "classifier", "coordinate", "float_bits", "auto",
           "auto_real")

#: ``dpkd run dgd|dpdfd --dp-architecture``: the values of ``TeacherArchitecture`` (whose
#: module imports torch).
TEACHER_ARCHITECTURES = ("vgg", "resnet18", "resnet34", "tanh-cnn", "dgd-cnn", "scatter-cnn")

#: ``dpkd audit-run --analysis``: the values of ``OneRunAnalysis``.
ONE_RUN_ANALYSES = ("steinke", "fdp", "gaussian", "all")


def name_key(text: str) -> str:
    """The spelling-free key of a name: lower case, no dashes, underscores or spaces."""
    return "".join(c for c in text.strip().lower() if c not in "-_ ")


def flag_form(value: str) -> str:
    """A value as typed on the command line (``float_bits`` -> ``float-bits``)."""
    return value.replace("_", "-")


def name_type(allowed: Sequence[str], what: str) -> Callable[[str], str]:
    """An argparse type: the member of ``allowed`` that ``text`` names, in any spelling."""
    by_key = {name_key(name): name for name in allowed}

    def parse(text: str) -> str:
        try:
            return by_key[name_key(text)]
        except KeyError:
            raise argparse.ArgumentTypeError(
                f"unknown {what} {text!r}; choose one of "
                f"{', '.join(flag_form(a) for a in allowed)} (case, dashes and underscores "
                "ignored)") from None
    return parse
