"""Mechanisms: noise-adding objects with a declared sensitivity and an exact event."""
