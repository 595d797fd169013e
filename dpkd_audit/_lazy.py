"""Package attributes imported on first use (PEP 562), for the packages the CLI starts through.

``dpkd budget`` and ``dpkd audit`` import one accountant and one report module; importing every
module a package exports would load scipy, dp_accounting and matplotlib paths they never use.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_attributes"]


def lazy_attributes(package: str, exports: Mapping[str, str], namespace: dict[str, Any]
                    ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__`` that import its exports on first access.

    Args:
        package: The package's ``__name__``.
        exports: Each exported name -> the submodule (relative to ``package``) it lives in.
        namespace: The package's ``globals()``: a name, once imported, is stored there, so
            later look-ups do not reach ``__getattr__``.

    Returns:
        ``(__getattr__, __dir__)``; ``__getattr__`` also returns the package's submodules
        (``accountants.pld``), as when the package imported them all.
    """

    def get(name: str) -> Any:
        if name in exports:
            value = getattr(importlib.import_module(f"{package}.{exports[name]}"), name)
            namespace[name] = value
            return value
        if not name.startswith("__") and importlib.util.find_spec(f"{package}.{name}"):
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def names() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return get, names
