"""Test-session settings shared by every test file."""

from __future__ import annotations

import os

import pytest


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
