"""One registration rule for selectors and tasks: a name maps to one subclass of the expected base."""
from __future__ import annotations

from bench.errors import ConfigError


def registrar(registry: dict, base: type, kind: str, decorator: str):
    """A class decorator factory `decorator(name)` that adds subclasses of `base` to `registry`."""

    def register(name: str):
        def wrap(cls):
            if not (isinstance(cls, type) and issubclass(cls, base)):
                raise TypeError(f"@{decorator}('{name}') needs a {base.__name__} subclass")
            if name in registry and registry[name] is not cls:
                raise ConfigError(f"{kind} name '{name}' is already registered by {registry[name].__module__}")
            cls.name = name
            registry[name] = cls
            return cls

        return wrap

    return register
