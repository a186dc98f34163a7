"""Command line: `python -m bench [run] ...`, `list`, `report`, `compare`."""
from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from dataclasses import replace
from pathlib import Path

from bench.errors import BenchError, ConfigError
from bench.options import HelpFormatter, Parser, default_data_dir
from bench.configure import default_out, run_config  # noqa: F401 (bench.cli.run_config: the API's name)
from bench.run_options import RunOptions, add_run_options
from bench.run_options import csv as _csv, param as _param, positive as _positive, rows_or_auto
from bench.tasks.base import CALIBRATIONS, REWARDS, SCORINGS

SUBCOMMANDS = {  # name -> what it does, for `python -m bench --help`
    "run": "run selectors on tasks with an LLM (the default: `python -m bench --methods ...` is a run)",
    "list": "the methods, tasks and LLM aliases",
    "report": "tables, significance and plots from one or more run folders",
    "compare": "compare a run with a reference results.json (exit 1 on a regression)",
    "simulate": "bandit methods on SIMULATED rewards with known truth",
    "perf": "speed ratios: shared-prefix pulls, ranking, bandit overhead",
    "data": "fetch the bundled data from its pinned sources (checksums verified), or verify a data folder",
    "table": "record every (arm, item) reward of the bandit setting once (build), or summarise a table (show)",
    "view": "one self-contained HTML file of run folders or a study, item by item (no server, no network)",
    "sweep": "a grid of runs (GRID.yaml) through submitit, here or on Slurm: finished cells skipped, one report",
    "cache": "merge LLM answer caches (each sweep job's own) into one",
}
DEMO_METHODS = ("zero-shot", "few-shot", "knn", "mmr")  # what a bare run shows the plan of (the README demo)
EXIT_FIT_FAILED = 3  # some (method, task) fits failed; their rows say why (2 is bad input)


def run_parser(defaults: RunOptions | None = None) -> argparse.ArgumentParser:
    """The run command's options, generated from RunOptions' fields (`defaults`: a config file's values), and the
    flags that only steer the command line."""
    p = Parser(prog="python -m bench run", description="Benchmark ICL demonstration selectors.",
               formatter_class=HelpFormatter)
    add_run_options(p, defaults)
    p.add_argument("--param", type=_param, action="append", default=[], metavar="METHOD.NAME=VALUE",
                   help="selector parameter, e.g. mmr.lam=0.7; *.n_arms=20 sets it for every selector that has it")
    p.add_argument("--config", type=Path, default=None,
                   help="YAML file of run options (long names) and per-method `params`; flags override it "
                        "(configs/paper.yaml, configs/smoke.yaml)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the plan (LLM calls, tokens, time per method x task) without loading any model")
    p.add_argument("--tokens-per-second", type=float, default=None,
                   help="decode rate for --dry-run's time (default: 85, measured on the embedded model, 2 CPU cores)")
    p.add_argument("--prefill-tokens-per-second", type=float, default=None,
                   help="prefill rate for --dry-run's time (default: 180, measured likewise)")
    return p


def config_options(path: Path) -> RunOptions:
    """A YAML run config (the run command's long options, `params` by method) as RunOptions."""
    from bench.yamlfile import read_mapping

    return RunOptions.from_mapping(read_mapping(path, "--config"), f"--config {path}")


def cmd_run(argv: list[str]) -> int:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", type=Path, default=None)
    pre.add_argument("--resume", action="store_true")
    pre.add_argument("--out", type=Path, default=None)
    early = pre.parse_known_args(argv)[0]
    config_path = early.config
    if early.resume and config_path is None:
        if early.out is None:
            raise ConfigError("--resume needs --out DIR, the run folder to continue")
        saved = early.out / "run_config.yaml"
        if saved.is_file():  # `--resume --out DIR` alone: the run's own settings, flags on top
            config_path = saved
    from_file = config_options(config_path) if config_path else RunOptions()
    args = run_parser(from_file).parse_args(argv)  # flags over the file's values
    from bench.distributed import init
    from bench.runner import Runner

    options = RunOptions.from_args(args, from_file.params)
    command = shlex.join(["python", "-m", "bench", "run", *argv])
    if options.k_sweep:
        return run_k_sweep(options, command, args)
    config = run_config(options, command)
    out = config.out
    bare = args.methods is None
    if bare:  # a bare run is a question, not an hour of work: show the demo's plan
        config.methods = list(DEMO_METHODS)
    if args.dry_run or bare:
        print_plan(config, args)
        if bare:
            print(f"\nNothing was run: pass --methods (e.g. --methods {','.join(DEMO_METHODS)}, or all) to run "
                  "this plan.")
        return 0
    runner = Runner(config, init())
    results = runner.run()
    if not results:
        return 0
    print(f"wrote {out}/records.jsonl, calls.jsonl, results.json, report.md" + (", report.html" if config.html else ""))
    return print_summary(results)


def print_plan(config, args, header: str = "") -> None:
    """--dry-run: the same checks as the run itself (names, weights, data, k <= pool, --out), then the plan."""
    from bench.plan import embedding_cache_line, plan, rates_for, render_plan, token_counter
    from bench.runner import Runner

    if any(rate is not None and rate <= 0 for rate in (args.tokens_per_second, args.prefill_tokens_per_second)):
        raise ConfigError("--tokens-per-second and --prefill-tokens-per-second must be > 0")
    from bench.llm.registry import check_llm_at_hand

    for spec in {config.llm.name: config.llm, config.oracle_llm.name: config.oracle_llm}.values():
        check_llm_at_hand(spec)  # the weights, as the run's first step checks them
    planned = Runner(config)  # names, data and k first: a wrong task is one line before the tokenizer loads (6 s)
    rates = rates_for(config.llm, args.prefill_tokens_per_second, args.tokens_per_second)
    count, counted = token_counter(config.llm)
    if header:
        print(header)
    print(render_plan(plan(planned, count), config.llm.name, *(rates[:2] if rates else (None, None)), counted))
    print(embedding_cache_line(planned))


def print_summary(results: dict) -> int:
    """The summary table and one line per failed fit; the exit code (EXIT_FIT_FAILED when a fit failed)."""
    from reports.results import failed_runs, summary_table

    print(summary_table(results))
    failed = failed_runs(results)
    for run in failed:
        print(f"error: {run['method']} on {run['task']}: {run['error']}", file=sys.stderr)
    return EXIT_FIT_FAILED if failed else 0


def run_k_sweep(options: RunOptions, command: str, args) -> int:
    """--k-sweep: every k checked before any model loads (its runner, and the longest prompt against the model's
    context), then one run per k into OUT/k=N, then OUT/k-sweep.md and accuracy_vs_k.png."""
    from bench.distributed import init
    from bench.k_sweep import check_context, sweep_options
    from bench.plan import token_counter
    from bench.runner import Runner
    from reports.k_sweep import write_k_sweep

    if options.methods is None:
        raise ConfigError("--k-sweep runs --methods at every k: pass --methods (e.g. few-shot,knn)")
    out = options.out or default_out(options)
    configs = [run_config(each, command) for each in sweep_options(replace(options, out=out), out)]
    count, counted = token_counter(configs[0].llm)
    if args.dry_run:
        for config in configs:
            print_plan(config, args, header=f"\n## k = {config.k}")
        print(check_context(Runner(configs[0]), options.k_sweep, count, counted))
        return 0
    dist = init()
    runners = [Runner(config, dist) for config in configs]  # every k's checks before any model loads
    print(check_context(runners[0], options.k_sweep, count, counted))
    out.mkdir(parents=True, exist_ok=True)  # `--resume --out OUT` alone takes the sweep's options back from here
    import yaml

    (out / "run_config.yaml").write_text(yaml.safe_dump(replace(options, out=out).to_mapping(), sort_keys=False),
                                         encoding="utf-8")
    status = 0
    for config, runner in zip(configs, runners):
        print(f"\n## k = {config.k}: {config.out}")
        results = runner.run()
        if results:
            status = max(status, print_summary(results))
    path = write_k_sweep(out, options.k_sweep, options.llm)
    print(f"wrote {path}, {out / 'accuracy_vs_k.png'} and the runs in {out}/k=N/")
    return status


def list_parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m bench list", formatter_class=HelpFormatter)
    p.add_argument("--plugin", action="append", default=[], help="module that registers selectors or tasks")
    p.add_argument("--task-file", type=Path, action="append", default=[], metavar="FILE.yaml",
                   help="a task spec to list with the others")
    p.add_argument("--defaults", action="store_true",
                   help="print every selector's default parameters as JSON (studies/reference/selector-defaults.json)")
    return p


def cmd_list(argv: list[str]) -> int:
    p = list_parser()
    args = p.parse_args(argv)
    from bench.llm.registry import ALIASES
    from bench.tasks import TASKS, load_task_entry_points, load_task_file
    from methods.base import available, default_params, load_plugin

    for module in args.plugin:
        load_plugin(module)
    if args.defaults:
        print(json.dumps({name: default_params(cls) for name, cls in sorted(available().items())}, indent=1))
        return 0
    for path in args.task_file:
        load_task_file(path)
    load_task_entry_points()
    from tabulate import tabulate

    def table(rows):  # aligned, however long a name; descriptions whole
        return tabulate(rows, tablefmt="plain", disable_numparse=True)

    methods = [[name, cls.level, first_sentence(cls.__doc__ or sys.modules[cls.__module__].__doc__)]
               for name, cls in sorted(available().items())]
    tasks = [[name, cls.metric_name, f"{len(cls.labels)} labels" if cls.labels else "generation",
              cls.description or first_sentence(sys.modules[cls.__module__].__doc__)] for name, cls in TASKS.items()]
    aliases = [[name, ", ".join(f"{b}={m}" for b, m in alias.names.items()), alias.note]
               for name, alias in ALIASES.items()]
    for title, rows in (("methods", methods), ("tasks", tasks), ("llm aliases", aliases)):
        print(f"{title}:")
        print("\n".join("  " + line for line in table(rows).splitlines()))
    return 0


def first_sentence(doc: str | None) -> str:
    """The first sentence of a docstring's first paragraph, whatever its line breaks."""
    paragraph = " ".join((doc or "").strip().split("\n\n")[0].split())
    end = re.search(r"(?<!\bal)(?<!e\.g)(?<!i\.e)\.\s(?=[A-Z`(])", paragraph)  # "Wei et al. 2022" is no end
    return paragraph if end is None else paragraph[:end.start() + 1]


def report_parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m bench report", formatter_class=HelpFormatter)
    p.add_argument("dirs", type=Path, nargs="+",
                   help="run folder(s); several are merged, one column group each; or one study folder (run folders inside)")
    p.add_argument("--baseline", default=None, help="method for the paired t-tests (default case-dynamic)")
    p.add_argument("--prices", type=Path, default=None, help="YAML: model -> {input, output} USD per 1M tokens")
    p.add_argument("--exemplars", type=int, default=0, help="show N test items where two methods disagree")
    p.add_argument("--exemplar-methods", type=_csv, default=None, help="the two methods (default: the paper's pair)")
    p.add_argument("--out", type=Path, default=None, help="merged report file (several folders; default: print)")
    return p


def cmd_report(argv: list[str]) -> int:
    p = report_parser()
    args = p.parse_args(argv)
    from reports.costs import PriceTable
    from reports.render import merged_report, write_report

    for folder in args.dirs:
        if not folder.is_dir():
            raise ConfigError(f"no run folder at {folder}")
    prices = PriceTable.load(args.prices) if args.prices else None
    if len(args.dirs) > 1:
        text = merged_report(args.dirs, args.baseline)
        if args.out:
            args.out.write_text(text, encoding="utf-8")
        print(text)
        return 0
    from reports.study import study_runs, write_study_report

    if study_runs(args.dirs[0]):  # a study: run folders inside
        path = write_study_report(args.dirs[0], args.baseline)
        print(path.read_text(encoding="utf-8"))
        return 0
    pair = tuple(args.exemplar_methods) if args.exemplar_methods else None
    path = write_report(args.dirs[0], args.baseline, prices, args.exemplars, pair)
    print(path.read_text(encoding="utf-8"))
    return 0


def view_parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m bench view", formatter_class=HelpFormatter,
               description="One self-contained HTML file (reports/viewer.py): results, items, selection, plots, "
                           "provenance; a page per task.")
    p.add_argument("dirs", type=Path, nargs="+", help="run folder(s), or study folder(s) (run folders inside)")
    p.add_argument("--out", type=Path, required=True, metavar="FILE.html", help="the HTML file to write")
    return p


def cmd_view(argv: list[str]) -> int:
    args = view_parser().parse_args(argv)
    from reports.viewer import write_viewer

    path = write_viewer(args.dirs, args.out)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB); open it in a browser, no server needed")
    return 0


def compare_parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m bench compare", formatter_class=HelpFormatter)
    p.add_argument("dir", type=Path, help="run folder (or its results.json)")
    p.add_argument("--to", type=Path, required=True,
                   help="reference results.json (with --accept, a file that does not exist yet is created)")
    p.add_argument("--tolerance", type=float, default=0.0, help="allowed score drop (metric units, 0-1)")
    p.add_argument("--calls-tolerance", type=float, default=None,
                   help="allowed relative rise of LLM calls (default: --tolerance)")
    p.add_argument("--allow-different", action="store_true",
                   help="compare even when the runs' shared settings (tasks, n-test, seed, LLM, decoding, ...) differ")
    p.add_argument("--accept", action="store_true",
                   help="an intended change: print the comparison, then make this run the new reference")
    p.add_argument("--accept-hint", default=None, metavar="TEXT",
                   help="how a failed check says to accept the change (a wrapper script names its own command; "
                        "default: this comparison with --accept)")
    return p


def cmd_compare(argv: list[str]) -> int:
    p = compare_parser()
    args = p.parse_args(argv)
    from bench.compare import compare, differing_settings, format_checks
    from reports.results import load_results

    import shlex
    import shutil

    current = load_results(args.dir)
    source = args.dir / "results.json" if args.dir.is_dir() else args.dir
    if not args.to.exists():
        if not args.accept:
            raise ConfigError(f"--to {args.to}: no reference there yet; make this run the first one with "
                              f"`python -m bench compare {shlex.quote(str(args.dir))} --to {shlex.quote(str(args.to))} "
                              "--accept`")
        args.to.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, args.to)
        print(f"created the reference {args.to} from {source} ({len(current['runs'])} cells); commit it")
        return 0
    reference = load_results(args.to)
    differ = differing_settings(current, reference)
    if differ and not args.allow_different:
        raise ConfigError(f"the runs are not alike: {'; '.join(differ)} (--allow-different compares them anyway)")
    checks = compare(current, reference, args.tolerance,
                     args.tolerance if args.calls_tolerance is None else args.calls_tolerance)
    accept = args.accept_hint or (
        f"python -m bench compare {shlex.quote(str(args.dir))} --to {shlex.quote(str(args.to))} --accept")
    print(format_checks(checks, None if args.accept else accept))
    failed = [c for c in checks if not c.ok]
    if args.accept:
        shutil.copyfile(source, args.to)
        print(f"accepted: {args.to} is now this run's results ({len(failed)} difference(s) accepted)")
        return 0
    if failed:
        changed = sum(c.what in ("fingerprint", "metric") for c in failed)  # changes to accept, not drops
        print(f"{len(failed) - changed} regression(s) and {changed} change(s) against {args.to}", file=sys.stderr)
        return 1
    print(f"no regression against {args.to} ({len(checks)} checks)")
    return 0


def cmd_simulate(argv: list[str]) -> int:
    from bench.simulate import run

    out = run(argv)
    env = out["env"]
    kind = "RECORDED (real LLM rewards replayed from a table)" if env.get("recorded") else "SIMULATED"
    print(f"{kind} environment '{env['name']}' (m={env['m']}, epsilon={env['epsilon']}, delta={env['delta']}):")
    if "truth" in env:
        print(f"  truth: {env['truth']}, largest standard error of an arm's true mean {env['truth_se_max']:.4f}"
              + ("" if env["truth_judges"] else ": NOT below epsilon / 10, so eps-error, coverage and the event rate "
                 "below are NOT JUDGED (define expected() in the module, or --truth-samples auto)"))
    for r in out["results"]:
        coverage = "  coverage n/a" if r["coverage"] is None else f"  coverage {r['coverage']:.3f} of rounds"
        if "event_rate" in r:  # what the guarantee is about: the event at every round of a run
            coverage += (f", every round in {r['event_rate']:.3f} of runs (95% lower bound {r['event_rate_lcb95']:.3f}"
                         + (f"; sample missed the top rho in {r['sampling_miss_rate']:.3f}" if "sampling_miss_rate" in r
                            else "") + ")")
        if r["method"] == "dearicl-pac-model":
            coverage += "  [a model stop: NOT a certificate]"
        # a SIMULATED population has no LLM: its count is the distinct rewards drawn
        calls = (f"  {'rewards' if r.get('simulated') else 'calls'} {r['mean_calls']:.0f}" if "mean_calls" in r
                 else "")
        print(f"  {r['method']:>22}  runs {r['runs']}  rounds {r['mean_rounds']:.1f}  pulls {r['mean_pulls']:.1f} ± "
              f"{r['pulls_se']:.1f}{calls}  error rate {r['error_rate']:.3f}  eps-error vs the {r['target']} "
              f"{r['eps_error_rate']:.3f} (95% bound {r['eps_error_ucb95']:.3f})"
              f"  regret {r['mean_simple_regret']:.4f} ± {r['simple_regret_se']:.4f}{coverage}  stops {r['stopped_by']}")
        if "eps_error_pool_rate" in r:  # the pool is not what a fixed set estimates: its floor beside it
            print(f"  {'':>22}  vs the validation pool: eps-error {r['eps_error_pool_rate']:.3f} (95% bound "
                  f"{r['eps_error_pool_ucb95']:.3f}; oracle floor {r['oracle_floor_pool']:.3f}: knowing each arm's "
                  f"exact mean on the items pulled), regret {r['mean_simple_regret_pool']:.4f}")
    return 0


def cmd_perf(argv: list[str]) -> int:
    from bench.perf import run

    r = run(argv)
    if "model_config" in r:  # printed by bench/model_perf.py's render
        return 0
    d = r["details"]
    if "p3_speedup" in r:
        print(f"P3 shared-prefix speedup ({r['llm']}, median of {d['repeats']}): {r['p3_speedup']:.2f}x over "
              f"{d['p3_items']} items ({d['p3_seconds_one_at_a_time']:.1f} s -> {d['p3_seconds_shared']:.1f} s; "
              f"prefilled tokens {d['p3_prompt_tokens']} -> {d['p3_prefilled_tokens_shared']}); outputs identical: "
              f"{r['p3_outputs_identical']}")
        print(f"P4 rank 1,000 subsets: {r['p4_rank_ms']:.2f} ms")
        print(f"P5 bandit round time outside the LLM: {100 * r['p5_overhead_share']:.2f}% over "
              f"{d['p5']['rounds']} rounds")
    for name, row in r.get("engines", {}).items():
        print(f"engine {name}: {row['items_per_second']:.3f} items/s, {row['tokens_per_second']:.1f} tokens/s "
              f"(median {row['seconds']:.1f} s); outputs identical to hf: {100 * row['outputs_identical_to_hf']:.0f}%")
    if "p7_engine_speedup" in r:
        print(f"P7 fastest engine / transformers: {r['p7_engine_speedup']:.2f}x")
    for procs, row in r.get("scaling", {}).items():
        print(f"scaling: {procs} process(es): {row['items_per_second']:.3f} items/s ({row['wall_seconds']:.1f} s, "
              f"{row.get('speedup', 1.0):.2f}x)")
    return 0


def top_help() -> str:
    lines = ["usage: python -m bench [SUBCOMMAND] [OPTIONS]   (icl-bench works the same)", "",
             "Benchmark in-context-learning demonstration selectors.", "", "subcommands:"]
    lines += [f"  {name:<10} {what}" for name, what in SUBCOMMANDS.items()]
    lines += ["", "`python -m bench SUBCOMMAND --help` shows its options and their defaults.",
              "--version prints the version; --debug shows tracebacks instead of one-line errors;",
              "-v shows debug lines, -q only warnings (every run folder keeps the full log in run.log)."]
    return "\n".join(lines)


def data_parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m bench data", formatter_class=HelpFormatter,
                                description="The data folder from its pinned sources (bench/data.py).")
    p.add_argument("action", choices=["fetch", "verify"],
                   help="fetch: download, convert and check the files into --to; verify: check a data folder's files")
    from bench.data import MANIFEST

    p.add_argument("--tasks", type=_csv, default=list(MANIFEST), help="comma-separated tasks")
    p.add_argument("--to", type=Path, default=None, help="fetch: the folder to write (laid out like ../shared/data)")
    p.add_argument("--data-dir", type=Path, default=None, help="verify: the folder to check (default: as `run`)")
    p.add_argument("--mirror", default=None,
                   help="base URL laid out like https://raw.githubusercontent.com (or BENCH_DATA_MIRROR)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per download")
    return p


def cmd_data(argv: list[str]) -> int:
    p = data_parser()
    args = p.parse_args(argv)
    from bench.data import check_tasks, fetch, verify

    check_tasks(args.tasks)
    if args.action == "fetch":
        if args.to is None:
            raise ConfigError("data fetch needs --to DIR")
        written = fetch(args.tasks, args.to, base=args.mirror, timeout=args.timeout)
        print(f"{len(written)} file(s) written to {args.to}; every checksum matches")
        return 0
    folder = args.data_dir or default_data_dir()
    if folder is None:
        raise ConfigError("no data folder: pass --data-dir or set BENCH_DATA_DIR")
    problems = verify(args.tasks, folder)
    for problem in problems:
        print(problem)
    print(f"{folder}: " + ("every checksum matches" if not problems else f"{len(problems)} problem(s)"))
    return 1 if problems else 0


def table_parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m bench table", description="Recorded reward tables (bench/reward_table.py).")
    p.add_argument("action", choices=["build", "show", "replay", "calls", "merge"],
                   help="build: record a table; show: summarise one; replay: fit the harness's selectors from it; "
                        "merge: join the columns of two tables of the same arms and items; "
                        "calls: answer a plan's calls (another machine's half of build --plan / --answers-from)")
    p.add_argument("file", type=Path,
                   help="the table (.npz): written by build, read by show and replay; calls: the plan (.json)")
    p.add_argument("--task", default="sst2", help="task of the table (build)")
    p.add_argument("--task-file", type=Path, action="append", default=[], metavar="FILE.yaml",
                   help="a task spec to register first (build)")
    p.add_argument("--llm", default="gemma3-270m", help="LLM alias or model (build)")
    p.add_argument("--backend", choices=["embedded", "hf", "openai", "ollama", "llamacpp"], default=None,
                   help="override the alias's backend (build)")
    p.add_argument("--api-base", default=None,
                   help="build with --backend openai: the server's URL (an OpenAI-compatible vLLM, SGLang or "
                        "llama.cpp server; default OPENAI_BASE_URL)")
    p.add_argument("--arms", type=_positive, default=100, help="arms, built as the bandit selectors build them")
    p.add_argument("--k", type=_positive, default=5, help="demonstrations per arm")
    p.add_argument("--n-val", type=_positive, default=None,
                   help="build: validation items, the pool a replay draws from (default 50); replay: items a pull "
                        "evaluates, drawn per seed from that pool (default 10)")
    p.add_argument("--n-test", type=_positive, default=200, help="test items (the scores of a replayed selection)")
    p.add_argument("--record-test", type=_positive, default=None, metavar="M",
                   help="build: record M of the --n-test items (a seeded subsample); a later build of all of them "
                        "reuses the cache, so a long CPU build lands in stages (the table's meta says how many)")
    p.add_argument("--extend", type=Path, default=None, metavar="TABLE.npz",
                   help="build: keep every cell of TABLE, an earlier stage of this build (same settings, fewer "
                        "--record-test items), and answer only the items it lacks: a staged build grows on a "
                        "machine without its cache (FILE may be TABLE itself)")
    p.add_argument("--bertscore-rescale", action="store_true",
                   help="build: BERTScore rewards baseline-rescaled, (F - b) / (1 - b) clipped at 0")
    p.add_argument("--pool-size", type=_positive, default=None, help="subsample the demonstration pool")
    p.add_argument("--samples", type=_positive, default=3,
                   help="seeded samples per (arm, item) at --temperature (one when answers are deterministic)")
    p.add_argument("--temperature", type=float, default=0.25, help="sampling temperature (the paper's 0.25)")
    p.add_argument("--max-new-tokens", type=_positive, default=256, help="generation cap (a label needs 8)")
    p.add_argument("--rewards", type=_csv, default=["generation"], metavar="GROUPS",
                   help="build: the columns recorded, a comma list of generation (sampled answers, their rewards and "
                        "metric, the gold log-likelihood: the default), loglik (the gold output's log-likelihood "
                        "alone, one teacher-forced pass per (arm, item): affordable on a CPU) and options (a "
                        "multiple-choice task's options ranked by log-likelihood: AQuA-RAT)")
    p.add_argument("--merge", type=Path, action="append", default=[], metavar="OTHER.npz",
                   help="merge: the table whose columns join FILE's (the same arms and items), written to --out; "
                        "or, repeated, the other shards of FILE's build (`build --shard`), joined into its table")
    p.add_argument("--shard", type=_shard, default=None, metavar="I/N",
                   help="build: record the I-th of N slices of the arms (0-based; the arms are built whole), so N "
                        "jobs build one table; `table merge` joins the N files into the unsharded build's table (with "
                        "--extend, each grows its slice of the earlier table)")
    p.add_argument("--scoring", choices=SCORINGS, default="auto", help="as for `run`")
    p.add_argument("--calibration", choices=CALIBRATIONS, default="none", help="as for `run`")
    p.add_argument("--reward", choices=REWARDS, default="auto", help="as for `run`")
    p.add_argument("--seed", type=int, default=0, help="seed of the subsamples and the arms")
    p.add_argument("--data-dir", type=Path, default=None,
                   help="data folder (default: BENCH_DATA_DIR, else ../shared/data beside the project)")
    p.add_argument("--cache", type=Path, default=None,
                   help="LLM answer cache; a killed build resumes from it (default: FILE's folder/FILE.cache.sqlite)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    remote = p.add_argument_group("recording on another machine (a GPU box without the data or the encoder)")
    remote.add_argument("--plan", type=Path, default=None, metavar="PLAN.json",
                        help="build: write the table's calls (arms and items) to PLAN.json and stop, no LLM loaded")
    remote.add_argument("--answers-from", type=Path, default=None, metavar="RECORDED.json",
                        help="build: the answers are in --cache, made by `table calls` (its RECORDED.json goes "
                             "into the table's meta); every call must be there")
    remote.add_argument("--recorded", type=Path, default=None, metavar="RECORDED.json",
                        help="calls: where to write what ran (device, versions, sampler, time)")
    remote.add_argument("--gguf", type=Path, default=None,
                        help="calls: the embedded model's GGUF file, copied by hand (no package needed)")
    remote.add_argument("--prefix-batch", type=rows_or_auto, default=None, metavar="N|auto",
                        help="calls: rows decoded together after a shared prefix (GPU: hundreds; auto: as many as the "
                             "free GPU memory holds)")
    remote.add_argument("--kv-cache-gib", type=float, default=None, help="calls: memory cap of those rows' caches")
    remote.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                        help="calls with --gguf: the weights' dtype; bfloat16 is a GPU's fast path, and RECORDED.json "
                             "(the table's meta) says which dtype answered")
    remote.add_argument("--attention", choices=["auto", "sdpa", "eager"], default="auto",
                        help="calls: transformers' attention kernel (eager avoids torch's CUDA memory-efficient SDPA "
                             "kernel, wrong on some inputs before torch 2.13: pytorch#191937)")
    remote.add_argument("--no-check", action="store_true",
                        help="calls: skip the check of the batched paths against one call at a time on the first arm")
    replay = p.add_argument_group("replay (bench/replay.py)")
    replay.add_argument("--methods", type=_csv, default=["case-static", "dearicl-static"],
                        help="selectors that choose among the arms (bandit, LTR, explora)")
    replay.add_argument("--seeds", type=_positive, default=10, help="seeds 0..N-1, each a paired observation")
    replay.add_argument("--param", type=_param, action="append", default=[], metavar="METHOD.NAME=VALUE",
                        help="a selector parameter (repeatable)")
    replay.add_argument("--table-reward", default="auto",
                        help="which recorded column a pull returns (rewards, metric, loglik, chrf, option_correct, "
                             "option_prob: those the table holds); auto: rewards where recorded, else loglik")
    replay.add_argument("--table-metric", default="auto",
                        help="which recorded score a selection's test items get: the task's metric, or a secondary "
                             "one the table holds (WMT19: chrf); auto: the metric where recorded, else the reward")
    replay.add_argument("--llm-budget", type=_positive, default=None, help="calls a fit may ask for")
    replay.add_argument("--baseline", default=None, help="the method the others are compared with (default: the first)")
    replay.add_argument("--margin", type=float, default=None,
                        help="equivalence margin of the TOST, on the metric's 0-1 scale, fixed before the run "
                             "(default: the analysis plan's, studies/tables/ANALYSIS_PLAN.md: 0.05 on accuracy, "
                             "0.02 on chrF and log-likelihood)")
    replay.add_argument("--out", type=Path, default=None,
                        help="replay: folder for rows.jsonl (resumable) and the summary; merge: the merged table")
    return p


def _shard(value: str) -> tuple[int, int]:
    """'1/4' -> (1, 4): the second of four shards."""
    index, slash, count = value.partition("/")
    try:
        shard = (int(index), int(count))
    except ValueError:
        raise argparse.ArgumentTypeError(f"wants I/N, e.g. 0/4, got {value!r}") from None
    if not slash or not 0 <= shard[0] < shard[1]:
        raise argparse.ArgumentTypeError(f"wants I/N with 0 <= I < N, got {value!r}")
    return shard


def cmd_table(argv: list[str]) -> int:
    args = table_parser().parse_args(argv)
    from bench.reward_table import RewardTable, build

    if args.action == "show":
        print(RewardTable.load(args.file).summary())
        return 0
    if args.action == "merge":
        if not args.merge or args.out is None:
            raise ConfigError("table merge FILE --merge OTHER.npz [--merge ...] --out MERGED.npz")
        tables = [RewardTable.load(path) for path in [args.file, *args.merge]]
        if any("shard" in t.meta for t in tables):  # the slices of one build
            from bench.reward_table import join_shards

            merged = join_shards(tables)
        elif len(tables) == 2:
            merged = tables[0].merge(tables[1])
        else:
            raise ConfigError("table merge: two tables merge their columns; more are the shards of one build")
        merged.save(args.out)
        print(merged.summary())
        print(f"wrote {args.out}")
        return 0
    if args.action == "replay":
        from bench import replay

        params: dict = {}
        for method, name, value in args.param:
            params.setdefault(method, {})[name] = value
        if args.baseline and args.baseline not in args.methods:
            raise ConfigError(f"--baseline {args.baseline} is not among --methods")
        replay.run(args.file, args.methods, params, list(range(args.seeds)), args.n_val or 10, args.table_reward,
                   args.llm_budget, args.baseline, args.margin, args.data_dir or default_data_dir(), args.out,
                   progress=not args.no_progress, metric_name=args.table_metric)
        return 0
    if args.action == "calls":
        return _table_calls(args)
    args.n_val = args.n_val or 50
    from bench.encoder import Encoder
    from bench.llm import CallCache, CallLog, GenerationParams, LLMClient, LLMSpec, make_backend
    from bench.llm.registry import resolve
    from bench.metrics import BertScore, BertScoreConfig
    from bench.tasks import load_task_file, make_task

    if args.temperature < 0:
        raise ConfigError(f"--temperature must be >= 0, got {args.temperature}")
    for path in args.task_file:
        load_task_file(path)
    bertscore = BertScore(BertScoreConfig(rescale=args.bertscore_rescale))
    task = make_task(args.task, bertscore).configure(args.scoring, args.calibration, args.reward)
    from bench.reward_table import check_columns

    groups = check_columns(task, args.rewards)
    if args.shard is not None and args.shard[1] > args.arms:
        raise ConfigError(f"--shard {args.shard[0]}/{args.shard[1]}: more shards than the {args.arms} arms")
    if args.plan is not None and args.shard is not None:
        raise ConfigError("--plan writes every arm's calls; shard the build (--shard) or the plan's answers, not both")
    if args.plan is not None and groups != ("generation",):
        raise ConfigError("--plan writes the generation calls for another machine; --rewards loglik,options run here")
    splits = task.load_splits(args.data_dir or default_data_dir(), n_test=args.n_test, n_val=args.n_val,
                              pool_size=args.pool_size, seed=args.seed)
    if args.record_test is not None and (args.record_test > len(splits.test) or args.plan is not None):
        raise ConfigError(f"--record-test {args.record_test}: " + ("a plan holds every test item" if args.plan else
                          f"more than the {len(splits.test)} test items"))
    spec = LLMSpec(args.llm, backend=args.backend, api_base=args.api_base)
    resolve(spec)  # a bad name fails before any model loads
    earlier = None
    if args.extend is not None:
        if args.plan is not None or args.answers_from is not None:
            raise ConfigError("--extend grows a table built here; --plan and --answers-from build one elsewhere")
        from bench.reward_table import RewardTable, extend_check, template_hash

        earlier = RewardTable.load(args.extend)
        extend_check(earlier, {"task": task.name, "answering": task.settings(), "k": args.k, "seed": args.seed,
                               "n_arms": args.arms, "n_validation": len(splits.validation),
                               "n_test": len(splits.test), "pool_size": len(splits.pool), "groups": list(groups),
                               "template_hash": template_hash(task)}, args.extend)
    cache = None if args.plan else CallCache(args.cache or args.file.with_suffix(".cache.sqlite"))  # plan: no calls
    client = LLMClient(make_backend(spec), cache, CallLog(None),
                       GenerationParams(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                                        seed=args.seed), "auto")
    if args.plan is not None:
        from bench.reward_table import write_plan

        plan = write_plan(args.plan, task, splits, client, Encoder(), llm=args.llm, n_arms=args.arms, k=args.k,
                          seed=args.seed, samples=args.samples)
        print(f"wrote {args.plan}: {len(plan['arms'])} arms x {len(plan['items'])} items x {plan['samples']} "
              f"sample(s), plan {plan['plan']}")
        return 0
    recorded = None
    if args.answers_from is not None:
        try:
            recorded = json.loads(args.answers_from.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"--answers-from {args.answers_from}: not readable ({exc})") from None
    table = build(task, splits, client, Encoder(), bertscore, n_arms=args.arms, k=args.k, seed=args.seed,
                  samples=args.samples, progress=not args.no_progress, answers_from=recorded, groups=groups,
                  test_recorded=args.record_test, shard=args.shard, extend=earlier)
    table.save(args.file)
    print(table.summary())
    print(f"wrote {args.file}")
    return 0


def _table_calls(args) -> int:
    """`table calls PLAN`: every call of a plan through the plan's model, into --cache (a GPU box's half)."""
    from bench.llm import CallCache, CallLog, LLMClient, LLMSpec, make_backend
    from bench.reward_table import answer_plan, plan_parts, read_plan

    plan = read_plan(args.file)
    if args.cache is None:
        raise ConfigError("table calls needs --cache: the file the answers go to")
    if args.gguf is not None:
        from bench.llm.embedded import EmbeddedModel

        backend = EmbeddedModel(plan["llm"], gguf=args.gguf, attention=args.attention, dtype=args.dtype)
    else:
        backend = make_backend(LLMSpec(plan["llm"], backend=args.backend))
        if args.attention != "auto":
            if not hasattr(backend, "attention"):
                raise ConfigError(f"--attention applies to the transformers backends, not {type(backend).__name__}")
            backend.attention = args.attention
    if args.prefix_batch == "auto" and hasattr(backend, "rows_from_memory"):
        from bench.llm.hf import AUTO_ROWS_CAP

        backend.rows_from_memory, args.prefix_batch = True, AUTO_ROWS_CAP
    for name, value in (("prefix_batch_size", args.prefix_batch), ("kv_cache_gib", args.kv_cache_gib)):
        if value is not None and hasattr(backend, name):
            setattr(backend, name, value)
    params = plan_parts(plan)[1]
    client = LLMClient(backend, CallCache(args.cache), CallLog(None), params, "auto")
    recorded = answer_plan(plan, client, progress=not args.no_progress, check=not args.no_check)
    if hasattr(backend, "attention"):
        recorded["attention"] = backend.model.config._attn_implementation  # the kernel that answered
    recorded.update(backend.runtime())  # device, weights' dtype, the kernel checks of the first batches
    out = args.recorded or args.cache.with_suffix(".recorded.json")
    out.write_text(json.dumps(recorded, indent=1) + "\n")
    print(f"answered plan {plan['plan']} in {recorded['seconds']:.0f} s into {args.cache}; wrote {out}")
    return 0


def sweep_parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m bench sweep", formatter_class=HelpFormatter,
               description="A grid of runs, one run folder a cell (bench/sweep.py): GRID.yaml holds run options, a "
                           "YAML list where one varies. Finished cells are skipped and cut ones resumed. A grid "
                           "with a `table_build` mapping (table build's options) and `shards: N` fans reward-table "
                           "builds out into N shard cells each, joined into OUT/tables/NAME.npz.")
    p.add_argument("grid", type=Path, metavar="GRID.yaml", help="the grid: run options, lists where they vary")
    p.add_argument("--out", type=Path, required=True, help="the sweep's folder: cells/NAME run folders, logs/, "
                                                           "report.md")
    p.add_argument("--launcher", choices=["local", "slurm"], default="local",
                   help="local: --workers cells at once on this machine; slurm: one job array (submitit)")
    p.add_argument("--workers", type=_positive, default=1, help="local: cells run at once")
    p.add_argument("--dry-run", action="store_true", help="print the cells, their state and planned calls; run none")
    slurm = p.add_argument_group("slurm")
    slurm.add_argument("--partition", default=None, help="the partition of the job array")
    slurm.add_argument("--time", type=_positive, default=60, metavar="MINUTES", help="time limit per cell")
    slurm.add_argument("--gpus", type=int, default=0, help="GPUs per cell")
    slurm.add_argument("--cpus", type=_positive, default=1, help="CPUs per cell")
    slurm.add_argument("--mem-gb", type=float, default=None, help="memory per cell")
    slurm.add_argument("--array-parallelism", type=_positive, default=16, help="cells of the array running at once")
    slurm.add_argument("--sbatch", action="append", default=[], metavar="KEY=VALUE",
                       help="another sbatch setting (e.g. account=myproj); repeatable")
    return p


def cmd_sweep(argv: list[str]) -> int:
    args = sweep_parser().parse_args(argv)
    from bench.sweep import SlurmSettings, SweepLock, dry_run, launch, read_grid

    if not args.grid.is_file():
        raise ConfigError(f"sweep: no grid file at {args.grid}")
    extra = {}
    for pair in args.sbatch:
        key, eq, value = pair.partition("=")
        if not eq or not key:
            raise ConfigError(f"--sbatch wants KEY=VALUE, got {pair!r}")
        extra[key.replace("-", "_")] = value
    grid = read_grid(args.grid, args.out)
    for cell in grid.cells if grid.shards else []:  # a build's flags checked as its command checks them
        build = table_parser().parse_args(cell.argv[1:])
        if grid.shards > build.arms:
            raise ConfigError(f"sweep {args.grid}: {grid.shards} shards of {build.arms} arms: at most one a shard")
    if args.dry_run:
        print(dry_run(grid))
        return 0
    slurm = SlurmSettings(args.partition, args.time, args.gpus, args.cpus, args.mem_gb, args.array_parallelism, extra)
    from reports.sweep import write_sweep_report, write_table_report

    with SweepLock(args.out):
        try:
            status = launch(grid, args.out, args.launcher, args.workers, slurm, main)
        except KeyboardInterrupt:
            return 130  # launch said what stopped; the same command resumes
        if grid.shards:
            from bench.sweep import merge_tables

            path = write_table_report(args.out, merge_tables(grid, args.out, status), status)
        else:
            path = write_sweep_report(args.out, {c.name: (c.folder, c.varying) for c in grid.cells}, grid.baseline,
                                      status)
    print(path.read_text(encoding="utf-8"))
    failed = sorted(name for name, s in status.items() if s == "failed")
    print(f"wrote {path}; {len(status) - len(failed)} of {len(status)} cells finished"
          + (f", failed: {', '.join(failed)} (rerun the same command to retry them)" if failed else ""),
          file=sys.stderr)
    return 1 if failed else 0


def cache_parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m bench cache", formatter_class=HelpFormatter,
               description="LLM answer caches (bench/llm/cache.py).")
    p.add_argument("action", choices=["merge"], help="merge: every key of the caches into --out")
    p.add_argument("caches", type=Path, nargs="+", metavar="CACHE.sqlite", help="the caches, in order of preference")
    p.add_argument("--out", type=Path, required=True, help="the merged cache (created, or added to)")
    return p


def cmd_cache(argv: list[str]) -> int:
    args = cache_parser().parse_args(argv)
    from bench.llm.cache import merge_caches

    stats = merge_caches(args.caches, args.out)
    print(f"wrote {args.out}: {stats['keys']} keys from {len(args.caches)} cache(s) ({stats['added']} added); "
          f"{stats['differed']} key(s) answered differently by two caches (the first cache's answer kept)")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    if debug:
        argv.remove("--debug")
    verbosity = 0
    for flag, value in (("-v", 1), ("--verbose", 1), ("-q", -1), ("--quiet", -1)):
        while flag in argv:
            argv.remove(flag)
            verbosity = value
    from bench.log import configure

    configure(verbosity)
    if not argv or argv[0] in ("-h", "--help", "help"):  # a bare call explains itself and runs nothing
        print(top_help())
        return 0
    if argv[0] == "--version":
        from bench.provenance import version

        print(version())
        return 0
    command = argv[0] if argv[0] in SUBCOMMANDS else "run"
    if argv[0] in SUBCOMMANDS:
        argv = argv[1:]
    handler = {"run": cmd_run, "list": cmd_list, "report": cmd_report, "compare": cmd_compare,
               "simulate": cmd_simulate, "perf": cmd_perf, "data": cmd_data, "table": cmd_table,
               "view": cmd_view, "sweep": cmd_sweep, "cache": cmd_cache}[command]
    try:
        return handler(argv)
    except BenchError as exc:
        if debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: answered LLM calls are cached and finished items recorded; rerun with --resume",
              file=sys.stderr)
        return 130
