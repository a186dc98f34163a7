"""The Selector contract (fit on a pool, select per query) and the registry of selectors."""
from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import inspect
import random
import sys
from pathlib import Path
from abc import ABC, abstractmethod
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, ClassVar, Literal


from bench.errors import ConfigError, unknown_name
from bench.registry import registrar
from bench.items import Item

ENTRY_POINT_GROUP = "bench.selectors"


@dataclass
class FitContext:
    """Everything a selector may use during `fit`. The oracle is its only way to the LLM."""

    task: Any  # bench.tasks.Task
    pool: list[Item]
    validation: list[Item]
    encoder: Any  # bench.encoder.Encoder
    oracle: Any  # bench.oracle.RewardOracle
    seed: int = 0
    k: int = 5
    budget: int | None = None
    arms: Any = None  # fixed arms, pool indices [n_arms, k] (a reward table's); None: built from the seed

    def rng(self, salt: str = "") -> random.Random:
        return random.Random(f"{self.seed}:{salt}")


class Selector(ABC):
    """Pick the ordered demonstrations for a test input.

    Like a scikit-learn estimator: parameters in ``__init__``, learned state with a trailing
    underscore, ``fit`` returns self. ``level`` is "task" (same demos for every query) or
    "instance" (demos depend on the query).
    """

    name: ClassVar[str] = ""
    level: ClassVar[Literal["task", "instance"]] = "task"
    #: row group in the main table: "task", "instance", "bandit", "bandit+ltr" or "beyond" ("" = level)
    table_group: ClassVar[str] = ""
    #: whether `--methods all` includes it (data-ablation variants are asked for with --ltr-data)
    in_all: ClassVar[bool] = True
    #: whether `fit` scores continuations by log-likelihood (ctx.oracle.loglik): not every backend can
    needs_loglik: ClassVar[bool] = False

    def __init__(self, k: int = 5):
        self.k = k

    @abstractmethod
    def fit(self, ctx: FitContext) -> "Selector":
        """Learn from the pool, validation items and (optionally) LLM rewards."""

    @abstractmethod
    def select(self, query: Item) -> list[Item]:
        """Ordered demonstrations for one test input (the last one sits next to the query)."""

    def trace(self) -> list[dict]:
        """Per-round convergence data (gap index, regret, pulls); empty for one-shot selectors."""
        return []

    def demos_per_prompt(self) -> int:
        """Demonstrations in each prompt (for `--dry-run`'s token estimate)."""
        return self.k

    def selection_call_bound(self, n_val: int, n_test: int) -> int | None:
        """An upper bound on the selection-phase LLM calls (for `--dry-run`), before any --llm-budget;
        None when only the budget bounds them. The default claims nothing."""
        return None

    def capped_call_bound(self, n_val: int, n_test: int, budget: int | None) -> int | None:
        """selection_call_bound capped by --llm-budget; None when neither bounds the calls."""
        bound = self.selection_call_bound(n_val, n_test)
        if budget is None:
            return bound
        return budget if bound is None else min(bound, budget)

    def select_info(self) -> dict:
        """What the last `select` did, stored on its record (e.g. a per-query bandit's pulls and calls)."""
        return {}

    def scale(self) -> dict:
        """The size the fit actually ran at (pulls, training queries, optimiser steps, search beam...), printed
        beside the score so a reader sees when a method ran far below its authors' scale; {} when it trains
        and searches nothing."""
        return {}

    def warn(self, message: str) -> None:
        """Record that the fit ran degraded (a fallback, less data than asked); shown on the result row."""
        warnings = self.__dict__.setdefault("warnings_", [])
        if message not in warnings:
            warnings.append(message)

    @property
    def fit_warnings(self) -> list[str]:
        return list(self.__dict__.get("warnings_", []))

    def check_task(self, task) -> None:
        """Raise ConfigError when the selector cannot run on this task; called before any model loads."""

    def check_splits(self, task, pool: int, validation: int) -> None:
        """Raise ConfigError when the run's splits cannot feed this selector (k demonstrations from a smaller
        pool); called with the data loaded, before any model loads. Selectors with more needs extend it."""
        if self.demos_per_prompt() > pool:
            raise ConfigError(f"{self.name}: k={self.k} is larger than the pool of task '{task.name}' ({pool} items); "
                              "lower --k or raise --pool-size")

    def check_pool(self, ctx: FitContext) -> None:
        self.check_splits(ctx.task, len(ctx.pool), len(ctx.validation))


SELECTORS: dict[str, type[Selector]] = {}


register = registrar(SELECTORS, Selector, "selector", "register")
register.__doc__ = """Class decorator: ``@register("knn")`` makes the selector available to the CLI."""


def load_builtin() -> None:
    import methods.zoo  # noqa: F401  (imports register every built-in selector)


def load_entry_points() -> list[str]:
    """Selectors that installed packages declare under the entry-point group ``bench.selectors``."""
    loaded = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
        except Exception as exc:
            raise ConfigError(f"entry point '{ep.name}' ({ep.value}) failed to load: {exc}") from None
        if isinstance(obj, type) and issubclass(obj, Selector) and ep.name not in SELECTORS:
            register(ep.name)(obj)
        loaded.append(ep.name)
    return loaded


def load_plugin(module: str) -> None:
    """``--plugin some.module`` (importable, or from the current folder) or ``--plugin path/to/file.py``:
    import a user's module whose @register calls add selectors."""
    path = Path(module)
    if module.endswith(".py") or path.is_file():
        if not path.is_file():
            raise ConfigError(f"plugin file not found: {module}")
        name = f"bench_plugin_{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]}"
        if name in sys.modules:
            return
        spec = importlib.util.spec_from_file_location(name, path)
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[name] = loaded
        try:
            spec.loader.exec_module(loaded)
        except Exception as exc:
            del sys.modules[name]
            raise ConfigError(f"plugin file '{module}' failed to load: {type(exc).__name__}: {exc}") from None
        return
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))  # `icl-bench --plugin mymod` finds ./mymod.py, as `python -m` would
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(f"plugin module '{module}' could not be imported: {exc}") from None


# Packages whose code decides a selection; the LLM layer (bench/) is left out, as the answer cache leaves it out.
ALGORITHM_PACKAGES = ("methods", "dearicl")
REGISTRY_MODULE = "methods.zoo"  # imports every selector to register it: part of no one selection


def code_version(cls: type) -> str:
    """A hash of the source files of a selector class, its bases (plugin files included) and every module of the
    algorithm packages (and the plugin's own package) they import, transitively: a saved selection made by other
    code is not replayed."""
    files: list[Path] = []
    for klass in cls.__mro__:
        if klass is object:
            continue
        try:
            source = inspect.getsourcefile(klass)
        except TypeError:  # a built-in class
            continue
        if source and Path(source).is_file():
            packages = {*ALGORITHM_PACKAGES, klass.__module__.split(".")[0]}
            _with_imports(Path(source), klass.__module__, packages, files)
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _with_imports(path: Path, module: str, packages: set[str], files: list[Path]) -> None:
    """Append `path` and, depth first, the files of the modules of `packages` it imports (each file once)."""
    if path in files:
        return
    files.append(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_bytes())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package) if node.level \
                else node.module or ""
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]  # `from pkg import submodule`
        else:
            continue
        for name in names:
            if name.split(".")[0] not in packages or name == REGISTRY_MODULE:
                continue
            try:
                spec = importlib.util.find_spec(name)
            except (ImportError, ValueError):  # `from mod import function`: not a module
                continue
            if spec and spec.origin and spec.origin.endswith(".py"):
                _with_imports(Path(spec.origin), name, packages, files)


def available() -> dict[str, type[Selector]]:
    load_builtin()
    load_entry_points()
    return dict(SELECTORS)


def default_params(cls: type[Selector]) -> dict:
    """Every parameter a selector runs with when none is given (the nearest class's default wins), JSON-ready."""
    defaults: dict = {}
    for klass in cls.__mro__:
        if "__init__" in vars(klass):
            for p in inspect.signature(vars(klass)["__init__"]).parameters.values():
                if p.default is not p.empty and p.name not in defaults:
                    defaults[p.name] = list(p.default) if isinstance(p.default, tuple) else p.default
    return {name: defaults[name] for name in accepted_params(cls) if name in defaults}


def accepted_params(cls: type[Selector]) -> list[str]:
    """Parameter names of a selector's __init__, following **kwargs up the class hierarchy."""
    names: list[str] = []
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        params = inspect.signature(vars(klass)["__init__"]).parameters.values()
        names += [p.name for p in params if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
                  and p.name not in names]
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return names


def param_defaults(cls: type[Selector]) -> dict[str, tuple[Any, str]]:
    """Each parameter's (default, annotation), following **kwargs up the class hierarchy as accepted_params does."""
    defaults: dict[str, tuple[Any, str]] = {}
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        params = inspect.signature(vars(klass)["__init__"]).parameters.values()
        for p in params:
            if p.default is not p.empty:
                defaults.setdefault(p.name, (p.default, str(p.annotation)))
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return defaults


def check_param_types(name: str, cls: type[Selector], params: dict[str, Any]) -> None:
    """After a selector refused its parameters: a value whose type cannot stand for its parameter's plain default (a
    word for a number, a number for a flag) is a one-line error naming the parameter, the type it takes and the value
    received. Not checked before: some parameters take more than their default's type ('all' cold-start pulls)."""
    defaults = param_defaults(cls)
    for param, value in params.items():
        default, annotation = defaults.get(param, (None, ""))
        wanted = type(default)
        if value is None or wanted not in (bool, int, float, str) or any(
                mark in annotation for mark in ("|", "Union", "Optional", "Any")):
            continue  # no default, a container, or a parameter that takes more than one type
        numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
        fits = (isinstance(value, bool) if wanted is bool else numeric if wanted is float else
                numeric and float(value).is_integer() if wanted is int else isinstance(value, str))
        if not fits:
            raise ConfigError(f"method '{name}': parameter {param} takes {wanted.__name__} (default {default!r}), "
                              f"got {value!r} ({type(value).__name__})")


def create(name: str, params: dict[str, Any] | None = None) -> Selector:
    """Instantiate a registered selector, checking parameter names against its __init__."""
    known = available()
    if name not in known:
        raise unknown_name("method", name, sorted(known))
    cls = known[name]
    params = dict(params or {})
    allowed = accepted_params(cls)
    unknown = [p for p in params if p not in allowed]
    if unknown:
        raise ConfigError(f"method '{name}' has no parameter {', '.join(unknown)}; parameters: {', '.join(allowed)}")
    try:
        return cls(**params)
    except (TypeError, ValueError) as exc:
        check_param_types(name, cls, params)  # name the parameter whose value's type cannot stand for its default
        given = ", ".join(f"{k}={v!r}" for k, v in params.items())
        raise ConfigError(f"method '{name}': bad parameter value ({exc}; given {given})") from None
