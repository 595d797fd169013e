"""The ``dpkd`` command line."""
