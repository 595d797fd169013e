"""Empirical auditing of mechanisms: lower bounds on epsilon, positive controls."""
