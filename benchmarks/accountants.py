"""Our accountants against dp_accounting (and prv-accountant when installed), in one process.

Run: ``python benchmarks/accountants.py``. Three workloads (issue 3):

1. 10^4-step Poisson-subsampled Gaussian (q = 0.01, sigma = 1.1), delta = 1e-5;
2. 1,000 heterogeneous events (Laplace and Gaussian with 1,000 different noise levels)
   composed one call at a time ("online", as a ledger does), then one epsilon query; and the
   same with an epsilon query after every call (a ledger checking its budget on each charge,
   measured on the first 200 events);
3. the FMT21 shuffle bound at n = 10^3, 10^4, 10^5 (epsilon0 = 1, delta = 1e-6): our closed form
   and numerical bound.

Prints seconds, epsilon and the ratio of dp_accounting's time to ours for each line.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import platform
import time

import numpy as np
from dp_accounting import dp_event as _dp
from dp_accounting.pld import PLDAccountant as DpaPLD
from dp_accounting.rdp import RdpAccountant as DpaRDP

from dpkd_audit.accountants import NeighboringRelation, PLDAccountant, RDPAccountant
from dpkd_audit.accountants.shuffle import closed_form_epsilon, numerical_epsilon

DELTA = 1e-5
ADD_REMOVE = NeighboringRelation.ADD_OR_REMOVE_ONE


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def line(name, seconds, eps, ref_seconds=None):
    ratio = f"  dp_accounting/ours = {ref_seconds / seconds:6.1f}x" if ref_seconds else ""
    print(f"  {name:<44} {seconds:9.4f} s   epsilon {eps:10.6f}{ratio}")


def sgd() -> None:
    print("1. Poisson-subsampled Gaussian, q=0.01, sigma=1.1, 10^4 steps, delta=1e-5")
    event = _dp.PoissonSampledDpEvent(0.01, _dp.GaussianDpEvent(1.1))

    def ours_rdp():
        return RDPAccountant(neighboring_relation=ADD_REMOVE).compose(event, 10_000).get_epsilon(
            DELTA)

    def ref_rdp():
        return DpaRDP().compose(event, 10_000).get_epsilon(DELTA)

    def ours_pld():
        return PLDAccountant(neighboring_relation=ADD_REMOVE).compose(event, 10_000).get_epsilon(
            DELTA)

    def ref_pld():
        return DpaPLD(value_discretization_interval=1e-4).compose(event, 10_000).get_epsilon(
            DELTA)

    t_ref, e_ref = timed(ref_rdp)
    t_ours, e_ours = timed(ours_rdp)
    line("dp_accounting RDP", t_ref, e_ref)
    line("ours RDP (fine order optimisation)", t_ours, e_ours, t_ref)
    t_ref, e_ref = timed(ref_pld)
    t_ours, e_ours = timed(ours_pld)
    line("dp_accounting PLD (interval 1e-4)", t_ref, e_ref)
    line("ours PLD (interval 1e-4)", t_ours, e_ours, t_ref)
    if importlib.util.find_spec("prv_accountant"):
        from prv_accountant import Accountant as PrvAccountant

        def prv():
            acc = PrvAccountant(noise_multiplier=1.1, sampling_probability=0.01, delta=DELTA,
                      eps_error=0.01, max_compositions=10_000)
            return acc.compute_epsilon(num_compositions=10_000)[2]  # upper bound

        t_prv, e_prv = timed(prv)
        line("prv-accountant (upper, eps_error 0.01)", t_prv, e_prv)


def heterogeneous() -> None:
    print("2. 1,000 heterogeneous events (Laplace b_i and Gaussian s_i), one compose call each")
    rng = np.random.default_rng(0)
    events = []
    for i in range(1000):
        if i % 2:
            events.append(_dp.LaplaceDpEvent(float(rng.uniform(200, 400))))
        else:
            events.append(_dp.GaussianDpEvent(float(rng.uniform(20, 40))))

    def online(acc, per_call_query=False, limit=None):
        def run():
            eps = None
            for event in events[:limit]:
                acc.compose(event)
                if per_call_query:
                    eps = acc.get_epsilon(DELTA)
            return eps if per_call_query else acc.get_epsilon(DELTA)
        return run

    t_ref, e_ref = timed(online(DpaRDP()))
    t_ours, e_ours = timed(online(RDPAccountant()))
    line("dp_accounting RDP: 1,000 composes, 1 query", t_ref, e_ref)
    line("ours RDP: 1,000 composes, 1 query", t_ours, e_ours, t_ref)
    t_ref, e_ref = timed(online(DpaRDP(), True, 200))
    t_ours, e_ours = timed(online(RDPAccountant(), True, 200))
    line("dp_accounting RDP: 200 x (compose + query)", t_ref, e_ref)
    line("ours RDP: 200 x (compose + query)", t_ours, e_ours, t_ref)
    # dp_accounting's PLD refuses Laplace under REPLACE_ONE; use add/remove for both
    t_ref, e_ref = timed(online(DpaPLD(ADD_REMOVE, value_discretization_interval=1e-4)))
    t_ours, e_ours = timed(online(PLDAccountant(neighboring_relation=ADD_REMOVE)))
    line("dp_accounting PLD: 1,000 composes, 1 query", t_ref, e_ref)
    line("ours PLD: 1,000 composes, 1 query", t_ours, e_ours, t_ref)


def shuffle() -> None:
    print("3. FMT21 shuffle bound, epsilon0 = 1, delta = 1e-6")
    for n in (1_000, 10_000, 100_000):
        t_closed, e_closed = timed(lambda n=n: closed_form_epsilon(1.0, n, 1e-6))
        t_num, e_num = timed(lambda n=n: numerical_epsilon(1.0, n, 1e-6))
        print(f"  n={n:>7,}: closed form {e_closed:.5f} ({t_closed * 1e3:.2f} ms), numerical "
              f"{e_num:.5f} ({t_num * 1e3:.1f} ms), closed/numerical = {e_closed / e_num:.2f}")


def main() -> None:
    version = importlib.metadata.version("dp-accounting")
    print(f"python {platform.python_version()}, dp_accounting {version}, "
          f"numpy {np.__version__}, {platform.machine()}")
    sgd()
    heterogeneous()
    shuffle()


if __name__ == "__main__":
    main()
