"""PATE privacy analysis: data-dependent RDP of GNMax, moments of LNMax, smooth sensitivity.

The noisy-argmax aggregators of PATE are private for every input (their *data-independent*
guarantee), but when the teachers agree strongly the released label is almost deterministic and
the privacy loss on *this* vote histogram is much smaller. PATE bounds that data-dependent loss
from q, an upper bound on the probability that the noisy argmax differs from the true one.

References (theorem numbers are those of the arXiv versions, as cited by the authors' code):

- [PATE18] Papernot, Song, Mironov, Raghunathan, Talwar, Erlingsson, "Scalable Private Learning
  with PATE", ICLR 2018 (arXiv:1802.08908). Theorem 6 (data-dependent RDP from q, with the
  conditions of Lemma 9), Proposition 7 (q for GNMax), Proposition 8 (data-independent RDP of
  GNMax), Proposition 10 (choice of mu1, mu2), Appendix B.4 (smooth sensitivity of the RDP:
  bounds BU/BL on q at a neighbour, Algorithm 3, Proposition 13, Algorithms 4-5, conditions
  C5-C6), Theorem 23 (RDP of the Gaussian noise with smooth sensitivity, GNSS).
- [PATE17] Papernot, Abadi, Erlingsson, Goodfellow, Talwar, "Semi-supervised Knowledge Transfer
  for Deep Learning from Private Training Data", ICLR 2017 (arXiv:1610.05755). Theorem 2
  (data-independent moments of an (2 gamma)-DP mechanism), Theorem 3 (data-dependent moments
  from q), Lemma 4 (q for LNMax).
- [M17] Mironov, "Renyi Differential Privacy", CSF 2017: Proposition 1 (composition), Table II
  (Laplace), Proposition 3 (conversion).
- [BBGHS20] Balle, Barthe, Gaboardi, Hsu, Sato, "Hypothesis testing interpretations and Renyi
  differential privacy", AISTATS 2020, Theorem 21 (improved RDP -> (epsilon, delta) conversion).
- [NRS07] Nissim, Raskhodnikova, Smith, "Smooth sensitivity and sampling in private data
  analysis", STOC 2007, Definitions 2.1-2.2 (local sensitivity at distance d, beta-smooth bound).

Everything is computed in log space: q is carried as log q (it underflows for strong consensus),
``log1mexp`` gives log(1 - e^x) without cancellation, and the Renyi sums use ``logaddexp``.

Neighbouring histograms: one teacher changes its vote (one count -1, another +1). This covers
replace-one and add/remove-one of a *record* alike (a record lives in exactly one teacher's
shard), so :class:`PATEAccountant` accepts both relations.

Data-dependent guarantees bound D_lambda(M(D) || M(D')) for the actual data D and every
neighbour D' (one direction, as in [PATE18]); RDP composition ([M17] Prop. 1) and the conversion
to (epsilon, delta) (:func:`dpkd_audit.accountants.rdp.epsilon_from_rdp`: [BBGHS20] Thm 21, and
a total-variation bound) hold pair by pair, so they apply unchanged. The bound itself depends on
D, so publishing it leaks. [PATE18] Appendix B.4 makes the release private with smooth
sensitivity: :func:`smooth_sensitivity_release_cost` returns the extra RDP that release costs, a
separate line item that :meth:`PATEAccountant.report` always shows next to the data-dependent
epsilon. That analysis rests on conditions C5-C6, which hold only for some (sigma, order) pairs
(roughly order < sigma / 1.3); they are checked numerically and orders where they fail are
refused for the release.

Modules: ``curves`` (the RDP curves of GNMax and LNMax, data-dependent and -independent, and
their registration with the RDP accountant), ``smooth_sensitivity`` (the cost of releasing the
data-dependent value, [PATE18] Appendix B.4), ``accountant`` (:class:`PATEAccountant` and its
:class:`PATEReport`) and ``_common`` (default orders, method names, input checks).
"""

from dpkd_audit.accountants.pate._common import (
    DEFAULT_ORDERS,
    METHOD_DATA_DEPENDENT,
    METHOD_DATA_DEPENDENT_LNMAX,
    METHOD_DATA_DEPENDENT_MIXED,
    METHOD_DATA_INDEPENDENT,
)
from dpkd_audit.accountants.pate.accountant import (
    PATEAccountant,
    PATEReport,
)
from dpkd_audit.accountants.pate.curves import (
    data_independent_rdp,
    gnmax_data_independent_rdp,
    gnmax_logq,
    gnmax_rdp,
    gnmax_rdp_from_logq,
    lnmax_data_independent_log_moments,
    lnmax_log_moments,
    lnmax_logq,
    lnmax_rdp,
    pate_rdp_curve,
    register_data_dependent_rdp_curves,
)
from dpkd_audit.accountants.pate.smooth_sensitivity import (
    SmoothSensitivityRelease,
    gnmax_local_sensitivity_bounds,
    gnmax_smooth_sensitivity,
    gnss_rdp,
    smooth_sensitivity_release_cost,
)

__all__ = [
    "DEFAULT_ORDERS",
    "METHOD_DATA_DEPENDENT",
    "METHOD_DATA_DEPENDENT_LNMAX",
    "METHOD_DATA_DEPENDENT_MIXED",
    "METHOD_DATA_INDEPENDENT",
    "PATEAccountant",
    "PATEReport",
    "SmoothSensitivityRelease",
    "data_independent_rdp",
    "gnmax_data_independent_rdp",
    "gnmax_local_sensitivity_bounds",
    "gnmax_logq",
    "gnmax_rdp",
    "gnmax_rdp_from_logq",
    "gnmax_smooth_sensitivity",
    "gnss_rdp",
    "lnmax_data_independent_log_moments",
    "lnmax_log_moments",
    "lnmax_logq",
    "lnmax_rdp",
    "pate_rdp_curve",
    "register_data_dependent_rdp_curves",
    "smooth_sensitivity_release_cost",
]
