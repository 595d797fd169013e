"""dpkd-audit: differential-privacy accounting and auditing for private knowledge distillation."""

__version__ = "0.1.0"
