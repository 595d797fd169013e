"""Start-up cost of ``dpkd``: each command imports what it computes with, nothing more (issue 36).

Checked on the modules a fresh interpreter holds after the command, not on wall time (timings
are flaky on a loaded 2-core runner). What the commands do need stays allowed: ``dpkd budget``
has a PLD row and ``dpkd audit`` an attainable bound, both computed with ``dp_accounting.pld``
(which imports ``scipy.stats`` and ``scipy.signal`` at module level), and the audit's
Clopper-Pearson bounds use ``scipy.stats``: that import (about a second on a 2-core machine) is
most of what is left of their start-up.
"""

from __future__ import annotations

import functools
import importlib
import json
import subprocess
import sys

import pytest

#: Libraries none of ``--help``, ``budget`` and ``audit`` uses.
NEVER = ("torch", "sklearn", "matplotlib", "tqdm", "faiss", "opacus", "ray", "umap", "mpmath",
         "dpkd_audit.pipelines", "dpkd_audit.ledger")

#: Loaded by parsing alone: the parsers are built from name lists (``dpkd_audit.cli.names``).
NOT_FOR_PARSING = ("scipy", "dp_accounting", "dpkd_audit.accountants", "dpkd_audit.audit",
                   "dpkd_audit.mechanisms", "dpkd_audit.reports", "dpkd_audit.data",
                   "importlib.metadata")

NOT_FOR_BUDGET = ("dpkd_audit.mechanisms", "dpkd_audit.audit", "dpkd_audit.reports",
                  "dpkd_audit.data", "dpkd_audit.accountants.pate")

NOT_FOR_AUDIT = ("dpkd_audit.accountants.pate", "dpkd_audit.accountants.rdp",
                 "dpkd_audit.accountants.advanced", "dpkd_audit.accountants.shuffle",
                 "dpkd_audit.accountants.calibration", "dpkd_audit.audit.controls",
                 "dpkd_audit.audit.training", "dpkd_audit.reports.tables",
                 "dpkd_audit.reports.records", "dpkd_audit.reports.accuracy", "dpkd_audit.data")

# Runs main(argv) in a fresh interpreter, then prints the exit status and the loaded modules.
_PROBE = """
import contextlib, io, json, sys
from dpkd_audit.cli.main import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        code = main(json.loads(sys.argv[1]))
    except SystemExit as exc:
        code = exc.code
print(json.dumps({"code": code, "out": out.getvalue(), "modules": sorted(sys.modules)}))
"""


@functools.cache
def _at_startup() -> frozenset[str]:
    """Modules a bare interpreter already holds (site hooks of the install may load some)."""
    done = subprocess.run([sys.executable, "-c", "import json, sys; "
                           "print(json.dumps(sorted(sys.modules)))"],
                          capture_output=True, text=True, check=True)
    return frozenset(json.loads(done.stdout))


def _run(argv: list[str]) -> tuple[int, str, set[str]]:
    """Exit status, standard output and the modules ``dpkd ARGV`` loaded beyond start-up."""
    done = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(argv)],
                          capture_output=True, text=True, check=True)
    result = json.loads(done.stdout.splitlines()[-1])
    return result["code"], result["out"], set(result["modules"]) - _at_startup()


def _loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    """The ``names`` (packages count with their submodules) found among ``modules``."""
    return sorted(n for n in names if n in modules
                  or any(m.startswith(n + ".") for m in modules))


@pytest.mark.parametrize("argv", [["--help"], ["budget", "--help"], ["audit", "--help"],
                                  ["budget", "no-such-mechanism"]])
def test_parsing_imports_no_numerical_library(argv):
    code, out, modules = _run(argv)
    assert code in (0, 2)
    assert argv[0] != "--help" or "budget" in out
    assert _loaded(modules, NEVER + NOT_FOR_PARSING) == []


def test_budget_imports_the_accountants_it_runs_and_nothing_else():
    code, out, modules = _run(["budget", "laplace", "--epsilon", "1", "--queries", "10"])
    assert code == 0
    assert "PLDAccountant" in out and "RDPAccountant" in out
    assert _loaded(modules, NEVER + NOT_FOR_BUDGET) == []
    # what it needs: the five accountants of the table (the PLD one through dp_accounting)
    assert {"dpkd_audit.accountants.pld.accountant", "dpkd_audit.accountants.rdp.accountant",
            "dp_accounting.pld"} <= modules


def test_audit_of_one_mechanism_imports_neither_the_other_accountants_nor_the_controls():
    code, out, modules = _run(["audit", "Laplace", "--samples", "1000"])
    assert code == 0
    assert "| Laplace | 1 |" in out
    assert _loaded(modules, NEVER + NOT_FOR_AUDIT) == []
    assert "dpkd_audit.accountants.pld.accountant" in modules  # its attainable bound


def test_a_control_is_still_found_and_an_unknown_name_lists_every_target():
    from dpkd_audit.audit.suite import audit_targets, find_target

    names = [t.name for t in audit_targets(include_controls=True)]
    assert find_target("half_noise_laplace").name == "HalfNoiseLaplace"
    assert find_target("TEXTBOOK-laplace").control
    with pytest.raises(ValueError, match="unknown mechanism") as info:
        find_target("no-such-thing")
    assert str(info.value).endswith("choose one of " + ", ".join(names))


@pytest.mark.parametrize("package", ["dpkd_audit.accountants", "dpkd_audit.reports"])
def test_lazy_facades_export_the_same_objects(package):
    module = importlib.import_module(package)
    for name in module.__all__:
        source = importlib.import_module(f"{package}.{module._EXPORTS[name]}")
        assert getattr(module, name) is getattr(source, name), name
    assert set(module.__all__) == set(module._EXPORTS) <= set(dir(module))
    with pytest.raises(AttributeError):
        module.no_such_name  # noqa: B018
    if package == "dpkd_audit.accountants":  # subpackages as attributes, as before
        assert module.pld.PLDAccountant is module.PLDAccountant
        assert module.rdp.RDPAccountant is module.RDPAccountant


def test_package_version_is_read_on_first_use():
    if "importlib.metadata" in _at_startup():
        pytest.skip("this install loads importlib.metadata at interpreter start-up")
    code = ("import sys, dpkd_audit; loaded = 'importlib.metadata' in sys.modules; "
            "from importlib.metadata import version; "
            "print(loaded, dpkd_audit.__version__ == version('dpkd-audit'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "True"]
