"""Layering: mechanisms, accountants, audit and the ledger never import torch."""

from __future__ import annotations

import subprocess
import sys


def test_core_layers_do_not_import_torch():
    code = ("import sys; import dpkd_audit.mechanisms, dpkd_audit.accountants, "
            "dpkd_audit.audit, dpkd_audit.audit.controls, dpkd_audit.ledger.core, "
            "dpkd_audit.accountants.budget; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"
