"""Audit every scalar and vector mechanism of the DP libraries installed, each with one call.

For each library given (``opendp``, ``diffprivlib``, ``pydp``, ``tmlt``), every mechanism of
the catalogue below is built with a typical configuration (epsilon 1, sensitivity 1, delta
1e-5 where it has one, bounds [0, 10] where it needs them) and audited by
``dpkd_audit.audit.libraries.audit_library`` - the one line a user writes - at ``--samples``
per side. The whole run is one suite: each violation must pass a confirmation on fresh samples
at ``1 - 0.05 / K`` (K the mechanisms audited), so the chance that any correct mechanism of the
run is reported violated is at most 5%. Each record (JSON lines) names the library version,
the claim's source, the pair audited, both stages, the real-valued design's bound when float
bits won, the attainable bound of the claim at this sample size (``attain.``: the most any audit
of this size can show of a mechanism meeting the claim), the attainable bound of the mechanism's
own DP event where the adapter names one (``own``: the Gaussians, from their noise scale or the
claimed rho), and the bounding samples per side at which that attainable bound reaches half the
claim (``need``: what makes an audit conclusive).

Usage: ``python benchmarks/library_audit.py --library opendp,pydp [--samples 100000]
[--seed 0] [--only TEXT] [--out reports/libraries/records.jsonl]``; ``--render RECORDS...``
prints the Markdown table of saved records. A library that is not installed is
skipped with a line saying so. The libraries are optional extras: ``pip install -e
".[libraries]"`` (diffprivlib 0.6.6 needs scikit-learn < 1.8; Tumult Core on Python 3.11
needs numpy < 2, so it runs in a venv of its own).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dpkd_audit.audit.attainable import samples_needed
from dpkd_audit.audit.libraries import adapt, audit_library
from dpkd_audit.audit.suite import suite_confirmation_confidence
from dpkd_audit.provenance import provenance

Entry = tuple[str, Callable[[], Any], dict[str, Any]]


def opendp_catalogue() -> list[Entry]:
    import opendp.prelude as dp

    dp.enable_features("contrib")
    f64 = dp.atom_domain(T=float, nan=False)
    i32 = dp.atom_domain(T=int)
    abs_f, abs_i = dp.absolute_distance(T=float), dp.absolute_distance(T=int)
    bounded_f = dp.vector_domain(dp.atom_domain(bounds=(0.0, 10.0)))
    bounded_i = dp.vector_domain(dp.atom_domain(bounds=(0, 10)))
    sym = dp.symmetric_distance()
    return [
        ("make_laplace f64 scale 1", lambda: dp.m.make_laplace(f64, abs_f, scale=1.0), {}),
        ("make_laplace i32 scale 1", lambda: dp.m.make_laplace(i32, abs_i, scale=1.0), {}),
        ("make_gaussian f64 scale 1 (zCDP)",
         lambda: dp.m.make_gaussian(f64, abs_f, scale=1.0), {}),
        ("make_gaussian i32 scale 1 (zCDP)",
         lambda: dp.m.make_gaussian(i32, abs_i, scale=1.0), {}),
        ("make_geometric i32 scale 1", lambda: dp.m.make_geometric(i32, abs_i, scale=1.0), {}),
        ("make_laplace f64 vector(3) L1",
         lambda: dp.m.make_laplace(dp.vector_domain(f64, size=3), dp.l1_distance(T=float),
                                   scale=1.0), {}),
        ("make_gaussian f64 vector(3) L2 (zCDP)",
         lambda: dp.m.make_gaussian(dp.vector_domain(f64, size=3), dp.l2_distance(T=float),
                                    scale=1.0), {}),
        ("randomized_response_bool 0.75", lambda: dp.m.make_randomized_response_bool(0.75),
         {}),
        ("sum [0,10] f64 >> laplace 10",
         lambda: dp.t.make_sum(bounded_f, sym) >> dp.m.then_laplace(10.0), {}),
        ("sum [0,10] i32 >> laplace 10",
         lambda: dp.t.make_sum(bounded_i, sym) >> dp.m.then_laplace(10.0), {}),
        ("count >> laplace 1",
         lambda: dp.t.make_count(dp.vector_domain(dp.atom_domain(T=int)), sym)
         >> dp.m.then_laplace(1.0), {}),
        ("sum [0,10] f64 >> gaussian 10 (zCDP)",
         lambda: dp.t.make_sum(bounded_f, sym) >> dp.m.then_gaussian(10.0), {}),
    ]


def diffprivlib_catalogue() -> list[Entry]:
    from diffprivlib import mechanisms as m

    return [
        ("Laplace", lambda: m.Laplace(epsilon=1.0, sensitivity=1.0), {}),
        ("LaplaceTruncated [0,10]",
         lambda: m.LaplaceTruncated(epsilon=1.0, sensitivity=1.0, lower=0.0, upper=10.0), {}),
        ("LaplaceFolded [0,10]",
         lambda: m.LaplaceFolded(epsilon=1.0, sensitivity=1.0, lower=0.0, upper=10.0), {}),
        ("LaplaceBoundedDomain [0,10]",
         lambda: m.LaplaceBoundedDomain(epsilon=1.0, sensitivity=1.0, lower=0.0, upper=10.0),
         {}),
        ("LaplaceBoundedNoise (1, 0.1)",
         lambda: m.LaplaceBoundedNoise(epsilon=1.0, delta=0.1, sensitivity=1.0), {}),
        ("Staircase", lambda: m.Staircase(epsilon=1.0, sensitivity=1.0), {}),
        ("Snapping [0,10]",
         lambda: m.Snapping(epsilon=1.0, sensitivity=1.0, lower=0.0, upper=10.0), {}),
        ("Gaussian (1, 1e-5)", lambda: m.Gaussian(epsilon=1.0, delta=1e-5, sensitivity=1.0),
         {}),
        ("GaussianAnalytic (1, 1e-5)",
         lambda: m.GaussianAnalytic(epsilon=1.0, delta=1e-5, sensitivity=1.0), {}),
        ("GaussianDiscrete (1, 1e-5)",
         lambda: m.GaussianDiscrete(epsilon=1.0, delta=1e-5, sensitivity=1), {}),
        ("Geometric", lambda: m.Geometric(epsilon=1.0, sensitivity=1), {}),
        ("GeometricTruncated [0,10]",
         lambda: m.GeometricTruncated(epsilon=1.0, sensitivity=1, lower=0, upper=10), {}),
        ("GeometricFolded [0,10]",
         lambda: m.GeometricFolded(epsilon=1.0, sensitivity=1, lower=0, upper=10), {}),
        ("Binary", lambda: m.Binary(epsilon=1.0, value0="0", value1="1"), {}),
        ("Exponential (4 candidates)",
         lambda: m.Exponential(epsilon=1.0, sensitivity=1.0, utility=[0.0, 1.0, 2.0, 3.0]),
         {}),
        ("PermuteAndFlip (4 candidates)",
         lambda: m.PermuteAndFlip(epsilon=1.0, sensitivity=1.0, utility=[0.0, 1.0, 2.0, 3.0]),
         {}),
    ]


def pydp_catalogue() -> list[Entry]:
    from pydp.algorithms import laplacian as lap
    from pydp.algorithms.numerical_mechanisms import GaussianMechanism, LaplaceMechanism

    bounds = {"lower": 0.0, "upper": 10.0}
    return [
        ("LaplaceMechanism", lambda: LaplaceMechanism(epsilon=1.0, sensitivity=1.0), {}),
        ("GaussianMechanism (1, 1e-5)",
         lambda: GaussianMechanism(epsilon=1.0, delta=1e-5, sensitivity=1.0), {}),
        ("BoundedSum [0,10]", lambda: lap.BoundedSum(epsilon=1.0, lower_bound=0,
                                                     upper_bound=10, dtype="float"), bounds),
        ("BoundedMean [0,10]", lambda: lap.BoundedMean(epsilon=1.0, lower_bound=0,
                                                       upper_bound=10, dtype="float"), bounds),
        ("Count", lambda: lap.Count(epsilon=1.0, dtype="float"), {}),
        ("Max [0,10]", lambda: lap.Max(epsilon=1.0, lower_bound=0, upper_bound=10,
                                       dtype="float"), bounds),
        ("Median [0,10]", lambda: lap.Median(epsilon=1.0, lower_bound=0, upper_bound=10,
                                             dtype="float"), bounds),
    ]


def tmlt_catalogue() -> list[Entry]:
    from tmlt.core.domains.numpy_domains import NumpyFloatDomain
    from tmlt.core.measurements.noise_mechanisms import (
        AddDiscreteGaussianNoise,
        AddGeometricNoise,
        AddLaplaceNoise,
    )

    return [
        ("AddLaplaceNoise float scale 1",
         lambda: AddLaplaceNoise(input_domain=NumpyFloatDomain(), scale=1), {}),
        ("AddGeometricNoise alpha 1", lambda: AddGeometricNoise(alpha=1), {}),
        ("AddDiscreteGaussianNoise sigma^2 1 (zCDP)",
         lambda: AddDiscreteGaussianNoise(sigma_squared=1), {}),
    ]


CATALOGUES = {"opendp": opendp_catalogue, "diffprivlib": diffprivlib_catalogue,
              "pydp": pydp_catalogue, "tmlt": tmlt_catalogue}


def render(paths: list[Path]) -> str:
    """A Markdown table of the records in ``paths`` (JSON lines), one row per audit."""
    rows = ["| library | mechanism | claim (source) | bound | real-valued design | attainable "
            "(claim / own event) | verdict | confirmation | attack | inputs | samples for "
            "half the claim |",
            "|---|---|---|---:|---:|---:|---|---|---|---|---:|"]
    for path in paths:
        for line in path.read_text().splitlines():
            r = json.loads(line)
            claim = (f"{r['epsilon_claimed']:.4g}" if r["delta"] == 0
                     else f"({r['epsilon_claimed']:.4g}, {r['delta']:g})")
            design = r.get("design")
            conf = r.get("confirmation")
            own = r.get("epsilon_attainable")
            need = r.get("samples_for_half_the_claim")
            rows.append(
                f"| {r['library']} | {r['name']} | {claim} ({r['claim_source']}) | "
                f"{r['epsilon_lower']:.4f} | "
                + ("-" if not design else f"{design['epsilon_lower']:.4f} "
                   f"({design['verdict']})")
                + f" | {r['claim_attainable']:.4f} / "
                + ("-" if own is None else f"{own:.4f}")
                + f" | {r['verdict']} | "
                + ("-" if not conf else f"{conf['epsilon_lower']:.4f} at "
                   f"{conf['confidence']:.4%}")
                + f" | {r['attack']} | {r['inputs'][0]} vs {r['inputs'][1]} | "
                + ("> 10^12" if need is None else f"{need:,}") + " |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--render", type=Path, nargs="+", metavar="RECORDS",
                        help="print the Markdown table of these records and exit")
    parser.add_argument("--library", default=",".join(CATALOGUES),
                        help=f"comma-separated, of {', '.join(CATALOGUES)}")
    parser.add_argument("--samples", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", help="audit the mechanisms whose name holds this text")
    parser.add_argument("--out", type=Path, help="append JSON lines here")
    args = parser.parse_args()
    if args.render:
        print(render(args.render))
        return
    entries: list[tuple[str, Entry]] = []
    for name in args.library.split(","):
        if name not in CATALOGUES:
            parser.error(f"--library: unknown {name!r}; choose of {', '.join(CATALOGUES)}")
        try:
            catalogue = CATALOGUES[name]()
        except ImportError as exc:
            print(f"# {name}: not installed or not importable ({exc}); skipped")
            continue
        entries += [(name, e) for e in catalogue
                    if not args.only or args.only.lower() in e[0].lower()]
    confirming = suite_confirmation_confidence(max(1, len(entries)))
    command = "python " + " ".join(shlex.quote(a) for a in sys.argv)
    origin = provenance()
    print(f"# {len(entries)} mechanisms, {args.samples:,} samples per side, seed {args.seed}, "
          f"confirmation at {confirming:.5f} (family-wise 5%); {platform.machine()}, Python "
          f"{platform.python_version()}")
    print(f"{'library':12} {'mechanism':40} {'claim':>16} {'bound':>8} {'design':>8} "
          f"{'attain.':>8} {'own':>8} {'verdict':>13} {'attack':>11} {'inputs':>28} "
          f"{'need':>9} {'s':>6}")
    rng = np.random.default_rng(args.seed)
    for library, (name, make, options) in entries:
        obj = make()
        mechanism = adapt(obj, **options)
        start = time.perf_counter()
        result = audit_library(mechanism, rng=rng, n=args.samples,
                               confirmation_confidence=confirming)
        seconds = time.perf_counter() - start
        design = result.design
        own = result.epsilon_attainable
        # the samples a conclusive audit needs: for the mechanism's own event where the
        # adapter names one (a Gaussian), else for the claim's dominating pair (a lower limit)
        need = samples_needed(result.epsilon_claimed, result.delta, event=mechanism.event)
        claim = (f"{result.epsilon_claimed:.4g}" if result.delta == 0
                 else f"({result.epsilon_claimed:.4g}, {result.delta:g})")
        inputs = f"{result.inputs[0].split(' (')[0]} vs {result.inputs[1].split(' (')[0]}"
        print(f"{library:12} {name:40} {claim:>16} {result.epsilon_lower:8.4f} "
              f"{'-' if design is None else f'{design.epsilon_lower:.4f}':>8} "
              f"{result.claim_attainable:8.4f} "
              f"{'-' if own is None else f'{own:.4f}':>8} {result.verdict.value:>13} "
              f"{result.attack.value:>11} {inputs[:28]:>28} "
              f"{'>1e12' if need is None else f'{need:.2g}':>9} {seconds:6.1f}", flush=True)
        if args.out is not None:
            record = result.to_dict()
            record.update({"library": mechanism.library, "name": name,
                           "claim_source": mechanism.claim,
                           "randomness": mechanism.randomness,
                           "samples_for_half_the_claim": need,
                           "samples_for_half_the_claim_of": (
                               mechanism.event_note or "the claim's dominating pair"),
                           "seed": args.seed,
                           "family_error": {"audits": len(entries), "error": 0.05,
                                            "confirmation_confidence": confirming},
                           "command": command, "provenance": origin,
                           "seconds": seconds})
            args.out.parent.mkdir(parents=True, exist_ok=True)
            with args.out.open("a") as handle:
                handle.write(json.dumps(record, default=lambda v: None if isinstance(
                    v, float) and math.isnan(v) else str(v)) + "\n")


if __name__ == "__main__":
    main()
