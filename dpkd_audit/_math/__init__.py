"""Numerical privacy math shared by every layer (events, accountants, mechanisms, auditors).

``privacy``: Gaussian and zCDP conversions, analytic Gaussian calibration, monotone root
searches; ``shuffle``: the shuffle-amplification bounds (Feldman-McMillan-Talwar 2021). They sit
at the bottom, beside ``_validate``, because the lowest layer that uses them is ``events``.
"""
