"""``dpkd audit module:function``: audit a user's own sampler from the command line.

The target is ``module:attribute`` (a module importable from the current folder or the
environment) or ``path/to/file.py:attribute``; the attribute may be dotted (``module:Class.make``).
It is one of:

- a function ``sampler(x, n, rng)`` returning ``n`` outputs on input ``x`` (the contract of
  :func:`~dpkd_audit.audit.auditor.audit_sampler`): the claim comes from ``--epsilon`` /
  ``--delta`` or the function's ``epsilon`` / ``delta`` attributes, the pair from
  ``--neighbours X X'`` or its ``neighbours`` attribute (a pair, or a function returning one);
- an object with the mechanisms' contract (``sample(x, n, *, rng)``, ``neighbours`` - a
  method or a pair -, ``epsilon``, optionally ``delta``), or a class whose no-argument
  instance has it: audited on its neighbours as ``dpkd audit NAME`` audits a package mechanism
  (``--epsilon`` / ``--delta`` override its claim);
- an object of another DP library (an OpenDP ``Measurement``, a diffprivlib mechanism, a
  python-dp mechanism or aggregation, a Tumult Core measurement): read by its adapter
  (:mod:`dpkd_audit.audit.libraries`): the claim from the library, the neighbours at its
  declared sensitivity (``--d-in``, ``--bounds`` and ``--neighbours`` refine them; ``--delta``
  is the delta at which a zCDP or profile claim is read).

Every error names the flag or attribute to give, and exits with status 2 before any sampling.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["is_user_target", "load_target", "parse_value", "user_audit_record"]

#: What a MECHANISM argument of this form must name (said in every error).
_CONTRACT = ("a function sampler(x, n, rng), an object with sample(x, n, *, rng), neighbours() "
             "and epsilon, a class whose instance has them, or a mechanism of OpenDP, "
             "diffprivlib, python-dp or Tumult Core")


def is_user_target(name: str) -> bool:
    """Whether ``dpkd audit NAME`` names a user's object (``module:attr``, ``file.py:attr``)."""
    return ":" in name


def parse_value(text: str) -> Any:
    """``--neighbours`` values: JSON (``0``, ``1.5``, ``[0, 1]``), else the string itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _import(module: str, spec: str) -> Any:
    if module.endswith(".py") or "/" in module or "\\" in module:
        path = Path(module)
        if not path.is_file():
            raise ValueError(f"MECHANISM {spec!r}: no file {path}")
        name = f"_dpkd_user_{path.stem}"
        loader_spec = importlib.util.spec_from_file_location(name, path)
        if loader_spec is None or loader_spec.loader is None:
            raise ValueError(f"MECHANISM {spec!r}: cannot load {path} as a Python module")
        loaded = importlib.util.module_from_spec(loader_spec)
        sys.modules[name] = loaded
        try:
            loader_spec.loader.exec_module(loaded)
        except Exception as exc:
            sys.modules.pop(name, None)
            raise ValueError(f"MECHANISM {spec!r}: importing {path} failed: "
                             f"{type(exc).__name__}: {exc}") from exc
        return loaded
    cwd = str(Path.cwd())
    added = cwd not in sys.path
    if added:  # as ``python -m`` does: modules of the current folder are importable
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise ValueError(f"MECHANISM {spec!r}: cannot import module {module!r} ({exc}; run "
                         "from the folder that holds it, or give path/to/file.py:NAME)") from exc
    except Exception as exc:
        raise ValueError(f"MECHANISM {spec!r}: importing module {module!r} failed: "
                         f"{type(exc).__name__}: {exc}") from exc
    finally:
        if added:
            sys.path.remove(cwd)


def load_target(spec: str) -> Any:
    """The object ``spec`` (``module:attr`` or ``file.py:attr``) names, a class instantiated.

    Raises:
        ValueError: Naming MECHANISM and what is wrong: the module cannot be imported, the
            attribute is missing, the class cannot be built without arguments, or the object is
            not callable and has no ``sample`` method.
    """
    module, _, attribute = spec.rpartition(":")
    if not module or not attribute:
        raise ValueError(f"MECHANISM {spec!r}: expected module:NAME or path/to/file.py:NAME")
    obj = _import(module, spec)
    for part in attribute.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"MECHANISM {spec!r}: {module} has no attribute {attribute!r} "
                             f"(it should name {_CONTRACT})")
        obj = getattr(obj, part)
    if isinstance(obj, type):
        try:
            obj = obj()
        except Exception as exc:
            raise ValueError(f"MECHANISM {spec!r}: the class {attribute} cannot be built "
                             f"without arguments ({type(exc).__name__}: {exc}); name a "
                             "function returning an instance, or an instance") from exc
    from dpkd_audit.audit.libraries import is_library_object

    if is_library_object(obj):
        return obj
    if not callable(obj) and not callable(getattr(obj, "sample", None)):
        raise ValueError(f"MECHANISM {spec!r}: {attribute} is a {type(obj).__name__}, not a "
                         f"sampler: it should name {_CONTRACT}")
    return obj


def _claim(obj: Any, spec: str, args: argparse.Namespace) -> tuple[float, float]:
    epsilon = args.epsilon if args.epsilon is not None else getattr(obj, "epsilon", None)
    if epsilon is None:
        raise ValueError(f"--epsilon is required for {spec}: the claimed epsilon to audit (or "
                         "give the sampler an epsilon attribute)")
    delta = args.delta if args.delta is not None else getattr(obj, "delta", 0.0)
    try:
        return float(epsilon), float(delta)
    except (TypeError, ValueError):
        raise ValueError(f"{spec}: its epsilon / delta attributes must be numbers; got "
                         f"{epsilon!r} / {delta!r} (or give --epsilon / --delta)") from None


def _pair(obj: Any, spec: str, args: argparse.Namespace) -> tuple[Any, Any]:
    if args.neighbours is not None:
        return tuple(args.neighbours)
    pair = getattr(obj, "neighbours", None)
    if pair is None:
        raise ValueError(f"--neighbours X X' is required for {spec}: the two neighbouring "
                         "inputs the sampler is audited on (or give it a neighbours attribute: "
                         "a pair, or a function returning one)")
    if callable(pair):
        pair = pair()
    if not isinstance(pair, tuple | list) or len(pair) != 2:
        raise ValueError(f"{spec}: its neighbours attribute must be a pair (x, x') or return "
                         f"one; got {pair!r} (or give --neighbours X X')")
    return tuple(pair)


def _library_record(obj: Any, spec: str, args: argparse.Namespace, *, samples: int,
                    rng: np.random.Generator, attack: Any) -> dict[str, Any]:
    """Audit another library's object through its adapter (the claim read from it)."""
    import dataclasses

    from dpkd_audit.audit.libraries import accepted_options, adapt, audit_library

    flags = {"neighbours": "--neighbours", "d_in": "--d-in", "delta": "--delta",
             "lower": "--bounds", "upper": "--bounds"}
    accepted = accepted_options(obj)
    for option, value in (("neighbours", args.neighbours), ("d_in", args.d_in),
                          ("delta", args.delta), ("lower", args.bounds)):
        if value is not None and option not in accepted:
            usable = sorted({flags[o] for o in accepted})
            raise ValueError(f"{flags[option]} does not apply to {spec} (a "
                             f"{type(obj).__name__}); it takes {', '.join(usable)}")
    options: dict[str, Any] = {}
    if args.neighbours is not None:
        options["neighbours"] = tuple(args.neighbours)
    if args.d_in is not None:
        options["d_in"] = args.d_in
    if args.delta is not None:
        options["delta"] = args.delta
    if args.bounds is not None:
        options["lower"], options["upper"] = args.bounds
    mechanism = adapt(obj, **options)  # errors name the option, before any sampling
    if args.epsilon is not None:
        mechanism = dataclasses.replace(mechanism, epsilon=float(args.epsilon),
                                        claim=f"--epsilon {args.epsilon:g} (the library "
                                              f"claims {mechanism.epsilon:.6g})")
    result = audit_library(mechanism, rng=rng, n=samples, confidence=args.confidence,
                           attack=attack)
    record = result.to_dict()
    record.update({
        "mechanism": spec, "control": False, "true_epsilon": None, "flaw": None,
        "configuration": f"{spec}: {mechanism.describe()}; audited on ({result.inputs[0]}, "
                         f"{result.inputs[1]}); randomness: {mechanism.randomness}",
        "library": mechanism.library,
    })
    return record


#: Top-level packages whose code, raising, is the audited object's (another library's).
_LIBRARY_PACKAGES = ("opendp", "diffprivlib", "pydp", "_pydp", "tmlt")


def _external_frame(exc: BaseException, user_file: str | None) -> str | None:
    """Where in the user's file or an audited library ``exc`` was raised (innermost), if so."""
    found = None
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        module = str(tb.tb_frame.f_globals.get("__name__", ""))
        if (user_file is not None and code.co_filename == user_file) or \
                module.split(".")[0] in _LIBRARY_PACKAGES:
            found = f"{code.co_name}, {Path(code.co_filename).name} line {tb.tb_lineno}"
        tb = tb.tb_next
    return found


def user_audit_record(spec: str, args: argparse.Namespace, *, samples: int,
                      rng: np.random.Generator, attack: Any, executor: Any) -> dict[str, Any]:
    """Audit the object ``spec`` names; the JSON-ready record ``dpkd audit`` prints.

    An exception raised by the user's own code (the sampler, its ``neighbours``, an
    ``epsilon`` property, a ``__getattr__``) or by the audited library becomes one line naming
    the function, file and line that raised it (a ``ValueError``: exit status 2).
    """
    obj = load_target(spec)
    module = sys.modules.get(getattr(obj, "__module__", None) or type(obj).__module__)
    user_file = getattr(module, "__file__", None)
    try:
        return _user_audit_record(obj, spec, args, samples=samples, rng=rng, attack=attack,
                                  executor=executor)
    except Exception as exc:
        where = _external_frame(exc, user_file)
        if where is None:
            raise
        raise ValueError(f"MECHANISM {spec}: {type(exc).__name__} raised in {where}: "
                         f"{exc}") from exc


def _user_audit_record(obj: Any, spec: str, args: argparse.Namespace, *, samples: int,
                       rng: np.random.Generator, attack: Any, executor: Any) -> dict[str, Any]:
    from dpkd_audit.audit.auditor import audit_sampler, mechanism_sampler, resolve_attack
    from dpkd_audit.audit.libraries import is_library_object
    from dpkd_audit.audit.suite import samples_within
    from dpkd_audit.provenance import provenance

    if is_library_object(obj):
        if args.workers is not None:
            raise ValueError(f"--workers does not apply to {spec}: another library's object "
                             "is sampled in this process")
        record = _library_record(obj, spec, args, samples=samples, rng=rng, attack=attack)
        record["provenance"] = provenance()
        return record
    for flag, value in (("--d-in", args.d_in), ("--bounds", args.bounds)):
        if value is not None:
            raise ValueError(f"{flag} applies to another library's object (an OpenDP, "
                             f"diffprivlib, python-dp or Tumult Core mechanism); {spec} is not")
    epsilon, delta = _claim(obj, spec, args)
    if callable(getattr(obj, "sample", None)):
        declared = getattr(obj, "neighbours", None)
        if declared is None and args.neighbours is None:
            raise ValueError(f"--neighbours X X' is required for {spec}: it has sample() but "
                             "no neighbours (a method returning the pair, or the pair)")
        if args.neighbours is None and callable(declared):
            sampler, pair, view = mechanism_sampler(obj)
        else:  # --neighbours, or a neighbours attribute that is the pair itself
            pair, view = _pair(obj, spec, args), None

            def sampler(value: Any, k: int, gen: np.random.Generator) -> Any:
                return obj.sample(value, k, rng=gen)
        chosen, policy = resolve_attack(attack, obj)
        if view is not None:
            policy += f"; outputs reduced by the object's audit view: {view.description}"
        kind = "object with sample(x, n, *, rng)"
    else:
        sampler, pair = obj, _pair(obj, spec, args)
        chosen, policy = resolve_attack(attack)
        kind = "function sampler(x, n, rng)"
    first = sampler(pair[0], 1, rng)
    try:
        values = max(1, int(np.size(first[0])))
    except (TypeError, IndexError, KeyError):
        values = 1
    n = samples_within(samples, values, args.max_values)
    result = audit_sampler(sampler, *pair, epsilon=epsilon, delta=delta, n=n,
                           confidence=args.confidence, rng=rng, attack=chosen, policy=policy,
                           mechanism=spec, workers=args.workers,
                           executor=executor if args.workers is not None else None)
    record = result.to_dict()
    record.update({
        "mechanism": spec, "control": False, "true_epsilon": None, "flaw": None,
        "configuration": f"{spec}: {kind} on the pair ({pair[0]!r}, {pair[1]!r}), claimed "
                         f"epsilon={epsilon:g}, delta={delta:g}",
        "provenance": provenance(),
    })
    return record
