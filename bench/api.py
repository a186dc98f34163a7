"""`bench.evaluate`: a run from Python, the analogue of lm-evaluation-harness's `simple_evaluate`."""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench.errors import ConfigError


def _as_argv(options: dict, parser: argparse.ArgumentParser) -> list[str]:
    """Python values -> the run command's flags, so that the CLI's parsing and checks apply unchanged."""
    actions = {a.dest: a for a in parser._actions if a.option_strings and a.dest != "help"}
    unknown = sorted(set(options) - set(actions))
    if unknown:
        raise ConfigError(f"bench.evaluate: unknown option(s) {', '.join(unknown)}; options: "
                          f"{', '.join(sorted(actions))}")
    argv: list[str] = []
    for name, value in options.items():
        flag = actions[name].option_strings[-1]
        if isinstance(actions[name], argparse._StoreTrueAction):
            argv += [flag] if value else []
        elif value is None:
            continue
        elif name == "param":  # ["mmr.lam=0.7", ...] or {"mmr": {"lam": 0.7}}
            items = value.items() if isinstance(value, dict) else None
            pairs = [f"{m}.{k}={v}" for m, kv in items for k, v in kv.items()] if items else list(value)
            for pair in pairs:
                argv += [flag, str(pair)]
        elif isinstance(value, (list, tuple)):
            argv += [flag, ",".join(map(str, value))]
        else:
            argv += [flag, str(value)]
    return argv


def evaluate(methods, tasks=None, llm="gemma3-270m", **options) -> dict:
    """Run selectors on tasks and return the results.json dict.

    methods: names (see `python -m bench list`) and/or Selector instances (copied per task, always fitted).
    tasks: names or one name (default: the three bundled tasks).
    llm: an alias (`gemma3-270m`), a model id (Hugging Face, run with the hf backend unless `backend=` says
    otherwise) or a backend object (bench.llm.base.Backend).
    options: the run command's long options in snake_case (n_test, k, max_new_tokens, data_dir, out, param,
    temperature, llm_budget, ...). Without `out` the run happens in a temporary folder that is removed after.
    """
    from bench.cli import run_config, run_parser
    from bench.distributed import init
    from bench.llm.registry import ALIASES
    from bench.runner import Runner
    from methods.base import Selector

    names, instances = [], {}
    for method in [methods] if isinstance(methods, (str, Selector)) else list(methods):
        if isinstance(method, str):
            names.append(method)
        elif isinstance(method, Selector):
            name = method.name or type(method).__name__
            method.name = name  # the rows are named after it
            names.append(name)
            instances[name] = method
        else:
            raise ConfigError(f"bench.evaluate: a method is a name or a Selector instance, got {type(method).__name__}")
    backend_object = None
    if isinstance(llm, str):
        if llm not in ALIASES and options.get("backend") is None:
            options["backend"] = "hf"  # a model id
    else:
        backend_object = llm
        llm = getattr(llm, "model_id", None) or type(llm).__name__
    options = {**options, "methods": names, "llm": llm}
    if tasks is not None:
        options["tasks"] = [tasks] if isinstance(tasks, str) else list(tasks)
    parser = run_parser()
    parser.exit_on_error = False
    try:
        args = parser.parse_args(_as_argv(options, parser))  # method names are checked by the Runner
    except argparse.ArgumentError as exc:
        raise ConfigError(f"bench.evaluate: {exc}") from None
    shown = ", ".join(f"{k}={v!r}" for k, v in options.items() if k not in ("methods", "llm"))
    command = f"bench.evaluate(methods={names!r}, llm={llm!r}{', ' + shown if shown else ''})"
    with tempfile.TemporaryDirectory(prefix="bench-evaluate-") as scratch:
        if args.out is None:
            args.out = Path(scratch) / "run"
        config = run_config(args, command=command)
        config.selectors, config.llm_backend = instances, backend_object
        return Runner(config, init()).run()
