"""Audit many mechanisms at once: the package's catalogue and the positive controls.

Used by ``dpkd audit``. Each mechanism is audited on its ``neighbours()`` pair; the number of
samples per side is capped so that one side holds at most ``max_values`` output values (a vector
output of 400 entries counts 400), which keeps the run time of large-output mechanisms bounded
while staying deterministic; the record says how many samples were used.

Every catalogued mechanism is audited with every applicable attack, float bits included (the
rule of :func:`~dpkd_audit.audit.auditor.resolve_attack`, shared with the API): the package's
continuous mechanisms are float-safe. The textbook floating-point samplers
(:class:`~dpkd_audit.mechanisms.TextbookLaplace`, :class:`~dpkd_audit.mechanisms.
TextbookGaussian`) are listed among the positive controls: their float64 outputs carry
Mironov's (2012) artefacts, which the ``FLOAT_BITS`` attack exposes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from dpkd_audit import _validate
from dpkd_audit.audit.attacks import Attack
from dpkd_audit.audit.auditor import CONFIRMATION_CONFIDENCE, audit_mechanism
from dpkd_audit.executor import ExecutorConfig
from dpkd_audit.mechanisms import CATALOGUE, TextbookGaussian, TextbookLaplace, example_text
from dpkd_audit.provenance import provenance

__all__ = ["FAMILY_ERROR", "AuditTarget", "audit_targets", "find_target", "run_audits",
           "suite_confirmation_confidence", "with_epsilon"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class AuditTarget:
    """A mechanism to audit: a factory, and whether it is a positive control."""

    name: str
    make: Callable[[], Any]
    control: bool = False


#: The package's textbook floating-point samplers, audited as positive controls.
TEXTBOOK_CONTROLS: tuple[Callable[[], Any], ...] = (
    lambda: TextbookLaplace(epsilon=1.0),
    lambda: TextbookGaussian(epsilon=1.0, delta=1e-5),
)


def audit_targets(*, include_controls: bool = True) -> list[AuditTarget]:
    """The package's catalogued mechanisms, then (optionally) the controls.

    Each catalogued mechanism is audited in its audit configuration
    (:meth:`~dpkd_audit.mechanisms.CatalogueEntry.audited`), which the record names. The
    controls: the broken-on-purpose mechanisms of :mod:`~dpkd_audit.audit.controls` and the
    textbook floating-point samplers (positive), then the correct look-alikes (negative).
    """
    return list(_iter_targets(include_controls=include_controls))


def _iter_targets(*, include_controls: bool) -> Iterator[AuditTarget]:
    """:func:`audit_targets`, one target at a time.

    Each name costs building an example (the shuffled histogram's takes 0.1 s), and the
    controls module is imported only when reached.
    """
    for entry in CATALOGUE:
        yield AuditTarget(name=type(entry.example()).__name__, make=entry.audited)
    if include_controls:
        from dpkd_audit.audit import controls

        for factory in TEXTBOOK_CONTROLS:
            yield AuditTarget(name=type(factory()).__name__, make=factory, control=True)
        for factory in (*controls.CONTROLS, *controls.NEGATIVE_CONTROLS):
            yield AuditTarget(name=type(factory()).__name__, make=factory,
                              control=factory in controls.CONTROLS)


def find_target(name: str) -> AuditTarget:
    """Look a mechanism or control up by class name (case and dashes ignored).

    The first target of :func:`audit_targets` with that name, found without building the
    examples listed after it.
    """
    key = name.replace("-", "").replace("_", "").lower()
    names = []
    for target in _iter_targets(include_controls=True):
        if target.name.lower() == key:
            return target
        names.append(target.name)
    raise ValueError(f"unknown mechanism {name!r}; choose one of {', '.join(names)}")


def with_epsilon(mechanism: Any, epsilon: float) -> Any:
    """A copy of ``mechanism`` claiming ``epsilon`` (the local randomizer's, for shufflers)."""
    epsilon = _validate.check_epsilon(epsilon)
    fields = {f.name for f in dataclasses.fields(mechanism) if f.init}
    if "epsilon" in fields:
        return dataclasses.replace(mechanism, epsilon=epsilon)
    if "local" in fields:
        return dataclasses.replace(mechanism, local=with_epsilon(mechanism.local, epsilon))
    raise ValueError(f"{type(mechanism).__name__} has no epsilon parameter to set")


#: Fewest samples per side the ``max_values`` cap leaves an audit (never more than asked).
MIN_SAMPLES = 2_000

#: Family-wise error a suite of audits allows itself for its violations of correct mechanisms.
FAMILY_ERROR = 0.05


def suite_confirmation_confidence(audits: int, *, family_error: float = FAMILY_ERROR) -> float:
    """Confidence of each confirmation in a suite of ``audits``: the family-wise error kept.

    A correct mechanism is reported violated only when its confirmation bound, valid on its
    own, exceeds the claim: probability at most ``1 - c`` each. With ``c = 1 - min(0.005,
    family_error / audits)`` the chance that any correct mechanism of the suite is reported
    violated is at most ``family_error`` (Bonferroni: a union bound over the audits, whatever
    their dependence), and each audit keeps the single-audit rate or better.

    Raises:
        ValueError: If ``audits`` < 1 or ``family_error`` is not in (0, 1).
    """
    audits = _validate.check_int("audits", audits, minimum=1)
    family_error = _validate.check_probability("family_error", family_error, open_low=True,
                                               open_high=True)
    return 1.0 - min(1.0 - CONFIRMATION_CONFIDENCE, family_error / audits)


def samples_within(samples: int, values: int, max_values: int) -> int:
    """Samples per side for outputs of ``values`` numbers.

    ``samples``, capped by ``max_values / values`` but not below :data:`MIN_SAMPLES` (nor
    above ``samples``).
    """
    return min(samples, max(MIN_SAMPLES, max_values // max(1, values)))


def _samples_within(mechanism: Any, samples: int, max_values: int,
                    rng: np.random.Generator) -> int:
    x, _ = mechanism.neighbours()
    values = max(1, int(np.size(mechanism.sample(x, 1, rng=rng)[0])))
    return samples_within(samples, values, max_values)


def run_audits(targets: list[AuditTarget], *, samples: int, confidence: float,
               rng: np.random.Generator, max_values: int = 5_000_000,
               attack: Attack | None = None,
               epsilon: float | None = None, workers: int | None = None,
               executor: ExecutorConfig | None = None,
               attainable: bool = True) -> Iterator[dict[str, Any]]:
    """Audit each target and yield one JSON-ready record per target.

    ``attainable``: each record also holds ``epsilon_attainable``, the best bound an audit of
    the mechanism's claimed event could attain with the same samples (see
    :func:`~dpkd_audit.audit.auditor.audit_mechanism`).

    ``workers`` / ``executor``: the bounding outputs drawn in parts, possibly on a Ray cluster
    (see :func:`~dpkd_audit.audit.auditor.audit_sampler`); recorded as ``workers`` and
    ``executor``.

    A violation is reported only when its confirmation on fresh samples passes at
    :func:`suite_confirmation_confidence` of the number of targets: the suite's family-wise
    error on correct mechanisms is at most :data:`FAMILY_ERROR` (recorded as
    ``family_error``).
    """
    samples = _validate.check_int("samples", samples, minimum=1_000)
    confirming = suite_confirmation_confidence(len(targets))
    max_values = _validate.check_int("max_values", max_values, minimum=1)
    origin = provenance()  # which code, libraries and commit produced the records
    for target in targets:
        mechanism = target.make()
        if epsilon is not None:
            mechanism = with_epsilon(mechanism, epsilon)
        n = _samples_within(mechanism, samples, max_values, rng)
        result = audit_mechanism(mechanism, n=n, confidence=confidence, rng=rng, attack=attack,
                                 workers=workers, executor=executor, attainable=attainable,
                                 confirmation_confidence=confirming)
        record = result.to_dict()
        record["family_error"] = {"audits": len(targets), "error": FAMILY_ERROR,
                                  "confirmation_confidence": confirming}
        if workers is not None:
            record["workers"] = workers
            record["executor"] = (executor or ExecutorConfig()).kind.value
        record.update({
            "mechanism": target.name,
            "control": target.control,
            "true_epsilon": getattr(mechanism, "true_epsilon", None),
            "flaw": getattr(mechanism, "flaw", None),
            "configuration": example_text(mechanism),
            "provenance": origin,
        })
        yield record
