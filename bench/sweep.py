"""`python -m bench sweep GRID.yaml --launcher local|slurm --out DIR`: a grid of runs, one cell a run folder.

GRID.yaml holds run options (the `--config` names); an option given as a YAML list varies, and the cells are the
product of those lists, in the file's order (`tasks: [rules, trec]` is two cells; `tasks: rules,trec` is one cell
running both). An option that is itself repeatable (`task_file`, `plugin`, `method_budget`, `replay_from`) varies
only as a list of lists. Two keys are the sweep's own: `baseline` (the method of the merged report's paired tests;
default few-shot where the grid has it, else its first method) and `name` (a cell folder's name, a format string over
the varying options, default `methods=knn_tasks=rules_seed=0`).

Each cell is an ordinary run folder OUT/cells/NAME (its own cache.sqlite unless `cache` is set; `cache_from` a
read-only shared one): `python -m bench run --config OUT/cells/NAME/cell.yaml --out OUT/cells/NAME` is the same run.
A cell whose run finished (results.json and OUT/cells/NAME/sweep_done.json holding the cell's fingerprint, the hash
of its options) is skipped; a cell cut short (config.json present) resumes with `--resume`, so its finished items
and answered calls are not asked again. The launcher is submitit: `local` runs --workers cells at once on this
machine (each in its own process), `slurm` submits one job array. When every cell has ended, OUT/report.md holds
the method-level tests across seeds (reports/sweep.py).

A grid with a `table_build` mapping fans out reward-table builds instead: its keys are `bench table build`'s options
(lists where they vary), `shards: N` splits each build into N cells (`table build --shard i/N`, each with its own
cache, so a killed shard resumes from its answers), and when every shard of a build is done the sweep joins them
(`join_shards`) into OUT/tables/NAME.npz, the table an unsharded build records.
"""
from __future__ import annotations

import fcntl
import hashlib
import itertools
import json
import math
import re
import shlex
import shutil
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path

from bench.errors import ConfigError
from bench.run_options import RunOptions

SWEEP_KEYS = ("baseline", "name")  # the sweep's own keys in GRID.yaml
TABLE_BUILD = "table_build"  # a grid of reward-table builds: `bench table build`'s options, sharded into cells
# the build options a table grid may set (the file, --cache and --shard are the sweep's; --plan & co. another route)
TABLE_OPTIONS = ("task", "task_file", "llm", "backend", "api_base", "arms", "k", "n_val", "n_test", "record_test",
                 "bertscore_rescale", "pool_size", "samples", "temperature", "max_new_tokens", "rewards", "scoring",
                 "calibration", "reward", "seed", "data_dir")
TABLE_REPEATED = ("task_file",)  # a repeatable flag: it varies only as a list of lists
NOT_IN_GRID = ("out", "resume", "only", "k_sweep")  # the sweep sets the folder and the resume itself
DONE = "sweep_done.json"
BEGAN = "sweep_fingerprint"  # the fingerprint of the options a cell was started with
CELL_CONFIG = "cell.yaml"
LAUNCHERS = ("local", "slurm")


@dataclass
class Cell:
    name: str
    varying: dict  # the options this cell sets from the grid's lists
    mapping: dict  # the cell's options (GRID.yaml's, with its varying values): a run's --config, or a build's flags
    folder: Path
    argv: list[str] = field(default_factory=list)  # the `python -m bench` command of the cell (run_cell adds --resume)
    table: str | None = None  # a table cell: the name of the build it is a shard of (OUT/tables/NAME.npz)

    def __post_init__(self):
        if not self.argv:
            self.argv = ["run", "--config", str(self.folder / CELL_CONFIG), "--out", str(self.folder)]

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.mapping, sort_keys=True, default=str).encode()).hexdigest()[:16]

    @property
    def product(self) -> Path:
        """What a finished cell leaves: a run's results, or a build's (shard of a) table."""
        return self.folder / ("table.npz" if self.table is not None else "results.json")

    def state(self) -> str:
        """done (finished with these options), changed (started or finished with other options: set aside and run
        afresh), partial (a run or build was started: it resumes) or new."""
        began = self.folder / BEGAN
        if began.is_file() and began.read_text().strip() != self.fingerprint:
            return "changed"
        done = self.folder / DONE
        if done.is_file() and self.product.is_file():
            try:
                if json.loads(done.read_text()).get("fingerprint") == self.fingerprint:
                    return "done"
            except ValueError:
                pass
        started = "cache.sqlite" if self.table is not None else "config.json"  # a build resumes from its answers
        return "partial" if (self.folder / started).is_file() else "new"


@dataclass
class Grid:
    cells: list[Cell]
    baseline: str | None
    axes: list[str] = field(default_factory=list)
    shards: int = 0  # a grid of table builds: the shards of each (0: a grid of runs)


def _many(name: str) -> bool:
    """Options whose one value is already a list (a repeatable flag): they vary only as a list of lists."""
    spec = {f.name: f for f in fields(RunOptions)}[name]
    return bool(spec.metadata.get("many"))


def _axes(options: dict, where: str, check, repeatable) -> tuple[list[tuple[str, list]], dict]:
    """A grid's options split into the varying ones (YAML lists; a repeatable option only as a list of lists), in
    the file's order, and the fixed ones; `check(option, key, value)` refuses an option the grid may not set."""
    axes, fixed = [], {}
    for key, value in options.items():
        option = str(key).replace("-", "_")
        check(option, key, value)
        varies = isinstance(value, list) and option not in ("params", "param") and (
            not repeatable(option) or (value and all(isinstance(v, list) for v in value)))
        if varies:
            if not value:
                raise ConfigError(f"{where}: '{key}' lists no value")
            axes.append((option, value))
        else:
            fixed[option] = value
    return axes, fixed


def _combinations(axes: list[tuple[str, list]]):
    """Each cell's varying options: the product of the axes' values."""
    for combo in itertools.product(*(values for _, values in axes)) if axes else [()]:
        yield {name: value for (name, _), value in zip(axes, combo)}


def read_grid(path: Path, out: Path) -> Grid:
    """GRID.yaml -> its cells, every one checked as a run's options are (one line, exit 2, on a bad one)."""
    from bench.yamlfile import read_mapping

    data = dict(read_mapping(path, "sweep"))
    where = f"sweep {path}"
    if TABLE_BUILD in data:
        return _table_grid(data, out, where)
    known = {f.name for f in fields(RunOptions)} | {"param"}
    baseline, name_format = data.pop("baseline", None), data.pop("name", None)

    def check(option, key, value):
        if option in NOT_IN_GRID:
            raise ConfigError(f"{where}: '{key}' is set by the sweep (--out DIR, resumed cells), not by the grid")
        if option == "shards":
            raise ConfigError(f"{where}: 'shards' splits a table build: it goes with '{TABLE_BUILD}'")
        if option not in known:
            RunOptions.from_mapping({key: value}, where)  # the run's own message, naming every option

    axes, fixed = _axes(data, where, check, _many)
    cells, seen = [], set()
    for varying in _combinations(axes):
        mapping = {**fixed, **varying}
        options = RunOptions.from_mapping(mapping, f"{where}, cell {_label(varying)}")
        if options.methods is None:
            raise ConfigError(f"{where}: no 'methods': every cell runs selectors")
        cell_name = _folder_name(name_format, varying, where)
        if cell_name in seen:
            raise ConfigError(f"{where}: two cells are both named '{cell_name}' (set 'name' to tell them apart)")
        seen.add(cell_name)
        plain = {k: v for k, v in options.to_mapping().items()}  # typed, converted, as run_config.yaml holds them
        cells.append(Cell(cell_name, varying, plain, out / "cells" / cell_name))
    methods = list(dict.fromkeys(m for c in cells for m in c.mapping["methods"]))
    if baseline is not None and baseline not in methods:
        raise ConfigError(f"{where}: baseline '{baseline}' is not among the grid's methods ({', '.join(methods)})")
    baseline = baseline or ("few-shot" if "few-shot" in methods else methods[0])
    return Grid(cells, baseline, [a for a, _ in axes])


def _table_grid(data: dict, out: Path, where: str) -> Grid:
    """A grid of reward-table builds: every combination of `table_build`'s lists is one table, built in `shards`
    cells (`table build --shard i/N`, each with its own cache) that merge_tables joins into OUT/tables/NAME.npz."""
    build, shards, name_format = data.pop(TABLE_BUILD), data.pop("shards", 1), data.pop("name", None)
    if data:
        raise ConfigError(f"{where}: a grid of table builds holds '{TABLE_BUILD}', 'shards' and 'name', not "
                          f"{', '.join(map(str, data))}")
    if not isinstance(build, dict) or not build:
        raise ConfigError(f"{where}: '{TABLE_BUILD}' holds `bench table build`'s options (a mapping)")
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise ConfigError(f"{where}: 'shards' wants a whole number >= 1, got {shards!r}")

    def check(option, key, value):
        if value is None or (isinstance(value, list) and any(v is None for v in value)):
            raise ConfigError(f"{where}: {TABLE_BUILD}: '{key}' has no value (leave it out for the build's default)")
        if option not in TABLE_OPTIONS:
            raise ConfigError(f"{where}: {TABLE_BUILD}: '{key}' is not an option a sharded build takes "
                              f"(one of {', '.join(TABLE_OPTIONS)}; the file, --cache and --shard are the sweep's)")

    axes, fixed = _axes(build, where, check, lambda option: option in TABLE_REPEATED)
    cells, tables = [], set()
    for varying in _combinations(axes):
        mapping = {**fixed, **varying}
        table = _folder_name(name_format, varying, where) if varying or name_format else "table"
        if table in tables:
            raise ConfigError(f"{where}: two tables are both named '{table}' (set 'name' to tell them apart)")
        tables.add(table)
        for index in range(shards):
            name = f"{table}_shard={index}of{shards}"
            folder = out / "cells" / name
            argv = ["table", "build", str(folder / "table.npz"), "--cache", str(folder / "cache.sqlite"),
                    "--no-progress", *build_flags(mapping)] + (["--shard", f"{index}/{shards}"] if shards > 1 else [])
            cells.append(Cell(name, {**varying, "shard": index}, {**mapping, "shard": [index, shards]}, folder, argv,
                              table))
    return Grid(cells, None, [a for a, _ in axes] + ["shard"], shards)


def build_flags(mapping: dict) -> list[str]:
    """`table build`'s flags of a table grid's options: true a bare flag, a list a repeated one."""
    flags = []
    for option, value in mapping.items():
        flag = "--" + option.replace("_", "-")
        if isinstance(value, bool):
            flags += [flag] if value else []
        elif isinstance(value, list):
            flags += [a for v in value for a in (flag, str(v))] if option in TABLE_REPEATED else [flag, _text(value)]
        else:
            flags += [flag, str(value)]
    return flags


def merge_tables(grid: Grid, out: Path, status: dict[str, str]) -> dict[str, tuple[Path | None, str]]:
    """Each table whose shards all finished, joined into OUT/tables/NAME.npz: name -> (path, its summary), or
    (None, why not) where a shard did not finish."""
    from bench.reward_table import RewardTable, join_shards

    merged: dict[str, tuple[Path | None, str]] = {}
    for table in dict.fromkeys(c.table for c in grid.cells):
        shards = [c for c in grid.cells if c.table == table]
        missing = [c.name for c in shards if status.get(c.name) not in ("done", "skipped")]
        if missing:
            (out / "tables" / f"{table}.npz").unlink(missing_ok=True)  # an earlier grid's table is not this one's
            merged[table] = (None, f"not merged: {len(missing)} of {len(shards)} shard(s) did not finish "
                                   f"({', '.join(missing)})")
            continue
        parts = [RewardTable.load(c.product) for c in shards]
        whole = join_shards(parts) if len(parts) > 1 else parts[0]
        path = out / "tables" / f"{table}.npz"
        path.parent.mkdir(parents=True, exist_ok=True)
        whole.save(path)
        merged[table] = (path, whole.summary())
    return merged


def _text(value) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


def _label(varying: dict) -> str:
    return " ".join(f"{k}={_text(v)}" for k, v in varying.items()) or "the only cell"


def _folder_name(name_format: str | None, varying: dict, where: str) -> str:
    if name_format:
        try:
            name = str(name_format).format(**{k: _text(v) for k, v in varying.items()})
        except (KeyError, IndexError, ValueError) as exc:
            raise ConfigError(f"{where}: 'name' {name_format!r} names no varying option ({exc})") from None
    else:
        name = "_".join(f"{k}={_text(v)}" for k, v in varying.items()) or "cell"
    return re.sub(r"[^A-Za-z0-9=,.+@_-]", "-", name)


# ---- one cell: the job a launcher runs -----------------------------------------------------------------------------
class CellFailed(RuntimeError):
    pass


def run_cell(command: Callable[[list[str]], int], folder: str, fingerprint: str, argv: list[str]) -> str:
    """Run (or resume) the cell in `folder` as `python -m bench ARGV` (`command`: the CLI's entry, handed down by it):
    a run (`run --config cell.yaml --out folder`, with --resume once started) or a table build; on success mark it
    done with its fingerprint. A submitit job: it raises when the command fails."""
    folder_path = Path(folder)
    argv = list(argv)
    if argv[0] == "run" and (folder_path / "config.json").is_file():  # started here: its items and answers are kept
        argv.append("--resume")
    began = time.time()
    status = command(argv)
    if status != 0:
        raise CellFailed(f"`python -m bench {' '.join(argv)}` exited with {status}")
    (folder_path / DONE).write_text(json.dumps({"fingerprint": fingerprint, "seconds": round(time.time() - began, 1)})
                                    + "\n")
    return folder


# ---- the launchers ---------------------------------------------------------------------------------------------------
@dataclass
class SlurmSettings:
    partition: str | None = None
    time_min: int = 60
    gpus: int = 0
    cpus: int = 1
    mem_gb: float | None = None
    array_parallelism: int = 16
    extra: dict = field(default_factory=dict)  # more sbatch settings (submitit's slurm_additional_parameters)


def executor(launcher: str, logs: Path, slurm: SlurmSettings, timeout_min: int):
    try:
        import submitit
    except ImportError:
        raise ConfigError("the sweep's launchers are submitit's: pip install submitit (or .[cluster])") from None
    if launcher == "local":
        ex = submitit.AutoExecutor(folder=logs, cluster="local")
        ex.update_parameters(timeout_min=timeout_min)
        return ex
    ex = submitit.AutoExecutor(folder=logs, cluster="slurm")
    params = {"timeout_min": slurm.time_min, "cpus_per_task": slurm.cpus, "slurm_array_parallelism":
              slurm.array_parallelism, "name": "bench-sweep"}
    if slurm.gpus:
        params["gpus_per_node"] = slurm.gpus
    if slurm.partition:
        params["slurm_partition"] = slurm.partition
    if slurm.mem_gb:
        params["mem_gb"] = slurm.mem_gb
    if slurm.extra:
        params["slurm_additional_parameters"] = slurm.extra
    # the embedding cache is SQLite in WAL mode, unsafe over a network filesystem (a shared home): each node keeps its
    # own under its local temporary folder, unless the submitting environment names one
    params["slurm_setup"] = ['export BENCH_EMBEDDING_CACHE="${BENCH_EMBEDDING_CACHE:-${TMPDIR:-/tmp}/icl-bench-'
                             '$USER/embeddings.sqlite}"']
    ex.update_parameters(**params)
    return ex


def _duration(seconds: float | None) -> str:
    if seconds is None or seconds != seconds:
        return "unknown"
    seconds = int(round(seconds))
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else \
        f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class Progress:
    """The sweep's console line: cells done, running, failed, queued, and an ETA from the cells finished so far."""

    def __init__(self, total: int, skipped: int, workers: int, stream=None):
        self.total, self.skipped, self.workers = total, skipped, max(1, workers)
        self.stream = stream or sys.stderr
        self.began = time.time()
        self.durations: list[float] = []
        self.last = ""
        self.last_at = 0.0

    def eta(self, queued: int, running: int) -> float | None:
        if not self.durations:
            return None
        mean = sum(self.durations) / len(self.durations)
        return mean * math.ceil((queued + running) / self.workers)

    def line(self, done: int, running: int, failed: int, queued: int) -> str:
        skipped = f" ({self.skipped} finished before)" if self.skipped else ""
        eta = "0s" if not running and not queued else _duration(self.eta(queued, running))
        return (f"[sweep] {done}/{self.total} done{skipped}, {running} running, {failed} failed, {queued} queued; "
                f"{_duration(time.time() - self.began)} elapsed, ETA {eta}")

    def show(self, done: int, running: int, failed: int, queued: int, every: float = 30.0) -> None:
        text = self.line(done, running, failed, queued)
        head = text.split(";")[0]
        if head != self.last.split(";")[0] or time.time() - self.last_at >= every:  # on a change, else now and then
            print(text, file=self.stream, flush=True)
            self.last, self.last_at = text, time.time()


def log_tail(job, lines: int = 12) -> str:
    """The last lines a failed cell wrote to its log (stderr, else stdout), before submitit's own report of the
    failure (its traceback through the job wrapper); that report where the cell wrote nothing (a job killed)."""
    for path in (job.paths.stderr, job.paths.stdout):
        try:
            text = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        ends = [i for i, l in enumerate(text) if l.startswith("submitit ERROR")]
        own = [l for l in text[:ends[-1] if ends else len(text)] if l.strip() and not l.startswith("submitit ")]
        kept = own or [l for l in text if l.strip()]
        if kept:
            return "\n".join(kept[-lines:])
    return "(no log)"


def failure_line(error: Exception) -> str:
    """What stopped a cell, in one line: the last line of the traceback submitit carries back (the exception and its
    message), which the cell's log may not hold yet when the sweep reads it."""
    text = str(error)
    parts = text.split("-" * 22 + "\n")  # submitit's FailedJobError: the trace between two rules, then log paths
    lines = [l.strip() for l in (parts[1] if len(parts) >= 3 else text).splitlines() if l.strip()]
    return lines[-1] if lines else type(error).__name__


def launch(grid: Grid, out: Path, launcher: str, workers: int, slurm: SlurmSettings,
           command: Callable[[list[str]], int], timeout_min: int = 24 * 60, poll_s: float = 1.0,
           stream=None) -> dict[str, str]:
    """Run every cell that is not done, each as `command(cell.argv)` (the CLI's main); returns cell name -> done |
    failed | skipped."""
    stream = stream or sys.stderr
    todo = [c for c in grid.cells if c.state() != "done"]
    status = {c.name: "skipped" for c in grid.cells if c not in todo}
    for cell in todo:
        if cell.state() == "changed":  # the grid was edited: the old run stays, beside, and this one starts afresh
            aside = cell.folder.with_name(f"{cell.folder.name}.replaced-{(cell.folder / BEGAN).read_text().strip()}")
            shutil.rmtree(aside, ignore_errors=True)
            cell.folder.rename(aside)
            print(f"[sweep] {cell.name}: its options changed; the earlier cell is now {aside.name}", file=stream,
                  flush=True)
        cell.folder.mkdir(parents=True, exist_ok=True)
        (cell.folder / BEGAN).write_text(cell.fingerprint + "\n")
        import yaml

        if cell.table is None:  # a run's --config; a build's options are its command's flags
            (cell.folder / CELL_CONFIG).write_text(yaml.safe_dump(cell.mapping, sort_keys=False), encoding="utf-8")
        (cell.folder / "command.txt").write_text(shlex.join(["python", "-m", "bench", *cell.argv]) + "\n")
    workers = workers if launcher == "local" else slurm.array_parallelism
    progress = Progress(len(grid.cells), len(status), min(workers, max(1, len(todo))), stream)
    if not todo:
        progress.show(len(grid.cells), 0, 0, 0)
        return status
    ex = executor(launcher, out / "logs", slurm, timeout_min)
    queue = list(todo)
    running: dict[str, tuple[Cell, object, float]] = {}

    def submit(cells: list[Cell]) -> None:
        if launcher == "slurm":  # one job array
            jobs = ex.map_array(run_cell, [command] * len(cells), [str(c.folder) for c in cells],
                                [c.fingerprint for c in cells], [c.argv for c in cells])
        else:
            jobs = [ex.submit(run_cell, command, str(c.folder), c.fingerprint, c.argv) for c in cells]
        for cell, job in zip(cells, jobs):
            running[cell.name] = (cell, job, time.time())
            print(f"[sweep] {cell.name}: job {job.job_id} ({cell.state()})", file=stream, flush=True)

    def cancel(signum, frame):  # an interrupted sweep stops its cells; a rerun resumes them
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, cancel)
    try:
        if launcher == "slurm":
            submit(queue)
            queue = []
        while queue or running:
            if launcher == "local" and queue and len(running) < workers:
                take, queue = queue[:workers - len(running)], queue[workers - len(running):]
                submit(take)
            for name, (cell, job, began) in list(running.items()):
                if not job.done():
                    continue
                del running[name]
                try:
                    job.result()
                    status[name] = "done"
                    progress.durations.append(time.time() - began)
                except Exception as error:  # the cell's failure, reported; the other cells go on
                    status[name] = "failed"
                    print(f"[sweep] FAILED {name} (job {job.job_id}): {failure_line(error)}\n  the last lines of "
                          f"its log ({job.paths.stderr}):\n"
                          + "\n".join("    " + l for l in log_tail(job).splitlines()), file=stream, flush=True)
            finished = sum(s in ("done", "skipped") for s in status.values())
            failed = sum(s == "failed" for s in status.values())
            progress.show(finished, len(running), failed, len(queue))
            if running or queue:
                time.sleep(poll_s)
    except KeyboardInterrupt:
        for cell, job, _ in running.values():
            job.cancel(check=False)
        for cell, job, _ in running.values():
            for _ in range(300):  # each cell writes what it finished and stops (SIGINT: a run's own interruption)
                if job.done():
                    break
                time.sleep(0.1)
        print(f"[sweep] interrupted: {len(running)} running cell(s) stopped; rerun the same command to resume them",
              file=stream, flush=True)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    return status


class SweepLock:
    """One sweep at a time in an OUT folder (two would run the same cells)."""

    def __init__(self, out: Path):
        out.mkdir(parents=True, exist_ok=True)
        self.handle = (out / "sweep.lock").open("w")
        try:
            fcntl.flock(self.handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise ConfigError(f"another sweep is running in {out}") from None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()


def dry_run(grid: Grid, stream=None) -> str:
    """The cells, their state and their planned LLM calls (bench/plan.py, no model loaded)."""
    from tabulate import tabulate

    from bench.configure import run_config
    from bench.plan import plan
    from bench.runner import Runner

    if grid.shards:
        return _dry_run_tables(grid)
    rows, total, unbounded = [], 0, False
    for cell in grid.cells:
        options = RunOptions.from_mapping({**cell.mapping, "out": str(cell.folder),
                                           "resume": cell.state() in ("partial", "done")}, f"cell {cell.name}")
        planned = plan(Runner(run_config(options)))
        selection = [r.selection_calls for r in planned]
        inference = sum(r.inference_calls for r in planned)
        sel = "unbounded" if None in selection else sum(selection)
        unbounded |= None in selection
        total += inference + (0 if None in selection else sum(selection))
        rows.append([cell.name, cell.state(), sel, inference])
    table = tabulate(rows, headers=["cell", "state", "selection calls", "inference calls"], tablefmt="github",
                     disable_numparse=True)
    states = [c.state() for c in grid.cells]
    return (f"{len(grid.cells)} cells ({states.count('done')} done, {states.count('partial')} to resume, "
            f"{states.count('changed')} changed, {states.count('new')} new); planned LLM calls of a first run, cache hits ignored: {total:,}"
            + (" plus unbounded selections" if unbounded else "") + "\n\n" + table)


def _dry_run_tables(grid: Grid) -> str:
    """A table grid's cells: their state and the slice of the arms each records."""
    from tabulate import tabulate

    from bench.reward_table import shard_arms

    rows = []
    for cell in grid.cells:
        arms = int(cell.mapping.get("arms", 100))  # `table build`'s default
        index, count = cell.mapping["shard"]
        lo, hi = shard_arms(arms, (index, count))
        rows.append([cell.name, cell.state(), f"{lo}-{hi - 1} ({hi - lo})", shlex.join(["python", "-m", "bench",
                                                                                          *cell.argv])])
    states = [c.state() for c in grid.cells]
    tables = len(dict.fromkeys(c.table for c in grid.cells))
    return (f"{len(grid.cells)} cells: {tables} table(s) in {grid.shards} shard(s) each ({states.count('done')} done, "
            f"{states.count('partial')} to resume, {states.count('changed')} changed, {states.count('new')} new)\n\n"
            + tabulate(rows, headers=["cell", "state", "arms", "command"], tablefmt="github", disable_numparse=True))
