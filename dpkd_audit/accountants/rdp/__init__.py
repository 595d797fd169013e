"""Renyi DP accounting (Mironov 2017): the accountant, its curves and how they are evaluated.

Modules: ``accountant`` (:class:`RDPAccountant`: composition by order, the conversion to
(epsilon, delta)), ``registry`` (which event has which RDP curve; :func:`register_rdp_curve`),
``curves`` (closed-form curves: Gaussian, Laplace, randomized response, ...), ``subsampled``
(the Poisson-subsampled Gaussian, Mironov-Talwar-Zhang 2019), ``plans`` (vectorised evaluation
plans of a composition), ``search`` (the fine search over orders) and ``conversion`` (RDP to
(epsilon, delta), Balle et al. 2020 / Canonne-Kamath-Steinke 2020).
"""

from dpkd_audit.accountants.rdp.accountant import (
    DEFAULT_ORDERS,
    DP_ACCOUNTING_DEFAULT_ORDERS,
    RDPAccountant,
    RdpCurveFn,
    delta_from_rdp,
    discrete_laplace_rdp,
    epsilon_from_rdp,
    gaussian_rdp,
    is_data_dependent,
    laplace_rdp,
    pure_dp_rdp,
    randomized_response_rdp,
    rdp_curve,
    register_rdp_curve,
    subsampled_gaussian_rdp,
    unregister_rdp_curve,
)

__all__ = [
    "DEFAULT_ORDERS",
    "DP_ACCOUNTING_DEFAULT_ORDERS",
    "RDPAccountant",
    "RdpCurveFn",
    "delta_from_rdp",
    "discrete_laplace_rdp",
    "epsilon_from_rdp",
    "gaussian_rdp",
    "is_data_dependent",
    "laplace_rdp",
    "pure_dp_rdp",
    "randomized_response_rdp",
    "rdp_curve",
    "register_rdp_curve",
    "subsampled_gaussian_rdp",
    "unregister_rdp_curve",
]
