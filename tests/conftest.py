"""Test-session settings shared by every test file."""

from __future__ import annotations

import os

import pytest

# Under pytest-xdist each worker is one process per core: one thread each (torch's OpenMP,
# numpy's BLAS) instead of every worker starting a thread per core. Measured on the 2-core
# machine, four pipeline CLI tests at -n 2: 44.4 s -> 20.1 s. Set before torch or numpy start
# their pools; a value the user set wins.
if os.environ.get("PYTEST_XDIST_WORKER") and int(os.environ.get("PYTEST_XDIST_WORKER_COUNT",
                                                                "1")) > 1:
    for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_name, "1")


@pytest.fixture(scope="session", autouse=True)
def _ledger_witnesses_in_a_temporary_folder(tmp_path_factory):
    """Keyed ledgers write witnesses (``dpkd_audit.ledger.witness``): keep the tests' out of
    the user's ~/.local/state (subprocesses inherit the variable)."""
    previous = os.environ.get("DPKD_LEDGER_WITNESS_DIR")
    os.environ["DPKD_LEDGER_WITNESS_DIR"] = str(tmp_path_factory.mktemp("ledger-witness"))
    yield
    if previous is None:
        os.environ.pop("DPKD_LEDGER_WITNESS_DIR", None)
    else:
        os.environ["DPKD_LEDGER_WITNESS_DIR"] = previous
