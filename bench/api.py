"""`bench.evaluate`: a run from Python, the analogue of lm-evaluation-harness's `simple_evaluate`."""
from __future__ import annotations

import tempfile
from pathlib import Path

from bench.errors import ConfigError


def evaluate(methods, tasks=None, llm="gemma3-270m", progress: bool = True, **options) -> dict:
    """Run selectors on tasks and return the results.json dict.

    methods: names (see `python -m bench list`) and/or Selector instances (copied per task, always fitted).
    tasks: names or one name (default: the three bundled tasks).
    llm: an alias (`gemma3-270m`), a model id (Hugging Face, run with the hf backend unless `backend=` says
    otherwise) or a backend object (bench.llm.base.Backend).
    options: the run command's long options in snake_case (n_test, k, max_new_tokens, data_dir, out, param,
    temperature, llm_budget, threads, ...). Without `out` the run happens in a temporary folder that is removed after.
    progress: True (default) shows each phase's progress: a bar in a notebook or on a terminal, else a log line
    every 10 s; where the caller configured no logging, the phase lines go to stderr for the run's duration.
    """
    from bench.configure import run_config
    from bench.distributed import init
    from bench.log import console_log
    from bench.llm.registry import ALIASES
    from bench.run_options import RunOptions
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
    shown = ", ".join(f"{k}={v!r}" for k, v in options.items() if k not in ("methods", "llm"))
    command = f"bench.evaluate(methods={names!r}, llm={llm!r}{', ' + shown if shown else ''})"
    # the run's typed options, converted and checked as a config file's are: no command line in between
    run_options = RunOptions.from_mapping(options, "bench.evaluate")
    run_options.no_progress = run_options.no_progress or not progress
    with tempfile.TemporaryDirectory(prefix="bench-evaluate-") as scratch, console_log(not run_options.no_progress):
        if run_options.out is None:
            run_options.out = Path(scratch) / "run"
        config = run_config(run_options, command=command)
        config.selectors, config.llm_backend = instances, backend_object
        return Runner(config, init()).run()
