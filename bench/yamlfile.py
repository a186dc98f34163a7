"""YAML files the user hands in (run configs, price tables): a mapping at the top, or one clear error."""
from __future__ import annotations

from pathlib import Path

from bench.errors import ConfigError


def read_mapping(path: Path, what: str) -> dict:
    """The top-level mapping of a YAML file; a missing file, bad YAML or another top level is a ConfigError.

    `what` names the file in messages ("price file", "--config").
    """
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{what}: no file at {path}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{what} {path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{what} {path}: the top level must be a mapping")
    return data
