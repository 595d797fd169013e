"""Ray executor: sweep throughput with 1 vs 2 workers, and the audit's samples per second.

Sweep: ``dpkd sweep rknn`` on the embedded digits, 8 runs that share nothing (seeds 0-7, one
Ray task each), torch / BLAS at 1 thread per task; a local Ray instance with 1, then 2 CPUs
(= workers), and the local executor for reference. Audit: ``dpkd audit Laplace`` with the
bounding samples drawn in W parts per input by W Ray workers (local Ray with W CPUs); samples
per second count every output drawn (selection on the driver included); the bound of a Ray run
equals the local executor's with the same W and seed (the same parts, the same counts).

Usage: python benchmarks/distributed.py [--samples 20000000]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import numpy as np
import ray
import torch
from threadpoolctl import threadpool_limits

from dpkd_audit.audit.auditor import audit_mechanism
from dpkd_audit.cli.main import main as dpkd
from dpkd_audit.executor import ExecutorConfig, ExecutorKind
from dpkd_audit.mechanisms import Laplace


def _sweep(executor: str, out: str) -> float:
    start = time.perf_counter()
    code = dpkd(["sweep", "rknn", "--dataset", "digits", "--epsilons", "1", "--seeds",
                 "0,1,2,3,4,5,6,7", "--quiet", "--force", "--executor", executor, "--out", out])
    assert code == 0
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=20_000_000)
    args = parser.parse_args()
    os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    torch.set_num_threads(1)
    threadpool_limits(1)  # every loaded OpenMP / BLAS library at 1 (the workers replay it)
    out: dict[str, object] = {"cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as tmp:
        _sweep("local", f"{tmp}/warm-local")  # data loading, imports, first-call set-up
        out["sweep_local_seconds"] = round(_sweep("local", f"{tmp}/local"), 2)
        for workers in (1, 2):
            ray.init(num_cpus=workers, include_dashboard=False, logging_level="ERROR")
            _sweep("ray", f"{tmp}/warm")  # workers started and imports done outside the timer
            out[f"sweep_ray_{workers}_workers_seconds"] = round(_sweep("ray", f"{tmp}/r"), 2)
            ray.shutdown()
    out["sweep_speedup_2_vs_1_workers"] = round(
        out["sweep_ray_1_workers_seconds"] / out["sweep_ray_2_workers_seconds"], 2)
    mech = Laplace(epsilon=1.0)
    start = time.perf_counter()
    local = audit_mechanism(mech, n=args.samples, rng=np.random.default_rng(0), workers=2)
    out["audit_local_2_parts_bound"] = local.epsilon_lower
    out["audit_local_samples_per_second"] = round(2 * args.samples
                                                  / (time.perf_counter() - start))
    for workers in (1, 2):
        ray.init(num_cpus=workers, include_dashboard=False, logging_level="ERROR")
        config = ExecutorConfig(kind=ExecutorKind.RAY)
        audit_mechanism(mech, n=20_000, rng=np.random.default_rng(1), workers=workers,
                        executor=config)  # warm-up
        start = time.perf_counter()
        result = audit_mechanism(mech, n=args.samples, rng=np.random.default_rng(0),
                                 workers=workers, executor=config)
        seconds = time.perf_counter() - start
        out[f"audit_ray_{workers}_workers_samples_per_second"] = round(2 * args.samples
                                                                       / seconds)
        out[f"audit_ray_{workers}_workers_per_worker"] = round(2 * args.samples / seconds
                                                               / workers)
        out[f"audit_ray_{workers}_workers_bound"] = result.epsilon_lower
        ray.shutdown()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
