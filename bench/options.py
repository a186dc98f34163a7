"""Pieces shared by the subcommands' argument parsers (bench/cli.py, simulate.py, perf.py)."""
from __future__ import annotations

import argparse
import os
from pathlib import Path


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (ConfigError: "error: ...", exit 2): the usage is for --help."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        from bench.errors import ConfigError

        raise ConfigError(f"{message} (`{self.prog} --help` lists the options)")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default, unless it is unset or the help text already names it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default is None or action.default is False or action.default == argparse.SUPPRESS \
                or "default" in text:
            return text
        return super()._get_help_string(action)


def default_data_dir() -> Path | None:
    """--data-dir, else BENCH_DATA_DIR, else a ../shared/data beside the working or project folder."""
    env = os.environ.get("BENCH_DATA_DIR")
    if env:
        return Path(env)
    project = Path(__file__).resolve().parent.parent
    for base in (Path.cwd(), project):
        candidate = base.parent / "shared" / "data"
        if candidate.is_dir():
            return candidate
    return None
