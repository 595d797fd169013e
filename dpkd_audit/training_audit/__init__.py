"""Training audits on the torch side: canaries, the Opacus attach, the sampler check.

Public API for users' own DP-SGD loops and for the package's pipelines:

- :class:`OpacusAudit` / :class:`AuditConfig`: a one-run audit with gradient canaries attached
  to an unchanged Opacus training loop (``audit.make_private(privacy_engine, ...)`` in place of
  ``privacy_engine.make_private(...)``, then ``audit.finish()``).
- :func:`check_sampler`: does the accountant match the sampler the code runs? (before the
  first step; :class:`SamplerReport`, :class:`Mismatch`, :class:`SamplerMismatchError`).
- :class:`GradientCanaries`, :class:`GradientCanaryInjector`, :class:`CanaryTap`,
  :class:`RecordCanaries`: the canaries the pipelines' audits use.

The statistics (one-run bounds, analyses) stay in :mod:`dpkd_audit.audit.training` (numpy
only); this package is where torch and Opacus meet them.
"""

from dpkd_audit.training_audit.attach import OpacusAudit, SamplerMismatchWarning
from dpkd_audit.training_audit.canaries import (
    CanaryPlacement,
    CanaryScoring,
    CanaryTap,
    GradientCanaries,
    GradientCanaryInjector,
    RecordCanaries,
)
from dpkd_audit.training_audit.config import AuditConfig
from dpkd_audit.training_audit.result import OpacusAuditResult
from dpkd_audit.training_audit.sampler_check import (
    Mismatch,
    MismatchKind,
    SamplerKind,
    SamplerMismatchError,
    SamplerReport,
    check_sampler,
)

__all__ = [
    "AuditConfig",
    "CanaryPlacement",
    "CanaryScoring",
    "CanaryTap",
    "GradientCanaries",
    "GradientCanaryInjector",
    "Mismatch",
    "MismatchKind",
    "OpacusAudit",
    "OpacusAuditResult",
    "RecordCanaries",
    "SamplerKind",
    "SamplerMismatchError",
    "SamplerMismatchWarning",
    "SamplerReport",
    "check_sampler",
]
