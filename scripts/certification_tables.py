"""The summary tables of scripts/certification_study.sh's JSONs, written between the markers of dearicl/README.md.

    python scripts/certification_tables.py [studies/bandit/certification] [dearicl/README.md]
"""
import json
import sys
from pathlib import Path

import numpy as np
from scipy import stats

FAMILIES = ["difficulty", "nonlinear", "slots", "pairwise", "order", "latent"]
METHODS = ["lucb", "lucb-kl", "lucb-paired", "lucb-quantile", "dearicl-pac", "dearicl-pac-model"]
TABLES = ["rules", "sst2", "trec", "agnews", "wmt19", "gsm8k", "aquarat"]
TABLE_EPSILON = {"wmt19": "0.005", "gsm8k": "0.002", "aquarat": "0.002"}  # the study's epsilon where it is not 0.1


def table_name(task: str, kind: str = "") -> str:
    """A table's row label, with its epsilon where it is not 0.1 (and RECORDED where families share the table)."""
    tags = [kind] if kind else []
    tags += [f"epsilon {TABLE_EPSILON[task]}"] if task in TABLE_EPSILON else []
    return f"{task} ({', '.join(tags)})" if tags else task
VARIANTS = ["lucb-wider", "lucb-pp", "lucb-pp-wider"]  # the LUCB variants, against `lucb` on the same instances
WOR_VARIANTS = ["lucb-pp-wor", "lucb-pp-wider-wor"]  # against `lucb-wor` on the same shuffles
# the custom close-arms landscape (configs/landscapes/close_arms.py): every fixed-set certified method, by part
CLOSE_ARMS = [("close-arms", m) for m in ("lucb", "lucb-kl", "lucb-paired", "lucb-quantile")] + \
    [("close-arms-lucb-variants", m) for m in ("lucb-pp", "lucb-pp-wider", "lucb-wider", "lucb-paired-pp")] + \
    [("close-arms-quantile-pp", "lucb-quantile-pp"), ("close-arms-tuned", "lucb-pp-wider"),
     ("close-arms-plugin", "lucb-pp-plugin"), ("close-arms-pac", "dearicl-pac"), ("close-arms-pac", "dearicl-pac-pp")]
LABELS = {"close-arms-tuned": " (tuned: upper share 0.8, weight 0.9)",
          "close-arms-plugin": " (pre-registered: upper share 0.8, lookahead 2)"}


def cell(row: dict | None) -> str:
    if row is None:
        return "-"
    text = f"{row['mean_pulls']:,.0f}" + (f" ({row['mean_calls']:,.0f})" if row.get("mean_calls") is not None else "")
    stops = row["stopped_by"]
    if "max_pulls" in stops:
        text += " (the cap: no certificate)"
    elif "model-stop" in stops:
        text += " (model stop: not a certificate)"
    errors = round(row["eps_error_rate"] * row["runs"])
    # the share of rounds covered, then (where recorded) the share of runs whose event held at every round
    event = f"; every round {row['event_rate']:.2f}" if "event_rate" in row else ""
    return text + f"; {errors}/{row['runs']}; {row['coverage']:.3f}{event}"


def paired_ratio(row: dict | None, base: dict | None, key: str = "pulls") -> str:
    """Mean pulls (or calls) of `row` over `base`'s on the same seeded instances, with a paired 95% BCa bootstrap
    interval over the instances: the ratio of means, the statistic the goal names."""
    if row is None or base is None:
        return "-"
    if key not in row or key not in base:  # runs saved before per-run calls were kept: the ratio of the means
        return f"{row['mean_' + key] / base['mean_' + key]:.3f}"
    ours, theirs = np.asarray(row[key], dtype=float), np.asarray(base[key], dtype=float)
    if len(ours) != len(theirs) or row["runs"] != base["runs"]:
        raise ValueError(f"{row['method']} and {base['method']} ran different instances: no paired ratio")
    point = ours.mean() / theirs.mean()
    if np.all(ours == ours[0]) and np.all(theirs == theirs[0]):  # constant: no spread to resample
        return f"{point:.3f}"
    ci = stats.bootstrap((ours, theirs), lambda a, b, axis=-1: a.mean(axis) / b.mean(axis), paired=True,
                         vectorized=True, n_resamples=9999, random_state=0).confidence_interval
    if not np.isfinite([ci.low, ci.high]).all():  # every resample gives the same ratio: no interval to show
        return f"{point:.3f}"
    return f"{point:.3f} ({ci.low:.3f}-{ci.high:.3f})"  # 3 decimals: a goal of 0.75 is read at its edge


def close_arms(parts: dict[str, dict]) -> list[str]:
    """The close-arms landscape's table: per certified method, its pulls, how it stopped, eps-error with its 95%
    upper bound, and the every-round event rate with its 95% lower bound, each against delta (the goal)."""
    out = ["| method (close arms, exact truth) | runs | mean pulls | stops | eps-error (95% upper bound) | "
           "event at every round (95% lower bound) | both within delta |", "|---|---|---|---|---|---|---|"]
    for part, method in CLOSE_ARMS:
        row = parts.get(part, {}).get(method)
        name = f"`{method}`" + LABELS.get(part, "")
        if row is None:
            out.append(f"| {name} | not run | | | | | |")
            continue
        stops = ", ".join(f"{k} {v}" for k, v in sorted(row["stopped_by"].items()))
        errors = round(row["eps_error_rate"] * row["runs"])
        event = (f"{row['event_rate']:.2f} ({row['event_rate_lcb95']:.3f})" if "event_rate" in row else "not recorded")
        certified = row["stopped_by"].get("certified", 0)
        met = ("no certificate to judge" if not certified else "yes" if row["eps_error_ucb95"] <= row["delta"]
               and row.get("event_rate_lcb95", 0.0) >= 1 - row["delta"] else "no")
        out.append(f"| {name} | {row['runs']} | {row['mean_pulls']:,.0f} | {stops} | {errors}/{row['runs']} "
                   f"({row['eps_error_ucb95']:.3f}) | {event} | {met} |")
    return out


def family_of(part: str) -> str:
    """The family (or table part) a study part's rows join: its suffix naming the methods it ran dropped."""
    for suffix in ("-pac-pp", "-paired-pp", "-pac", "-lucb-variants", "-quantile-pp"):
        if part.endswith(suffix):
            return part.removesuffix(suffix)
    return part


def split_table(rows: dict[str, dict]) -> list[str]:
    """LUCB++'s one-sided split against the uniform split on the same instances: PairedLUCB's arms and dearicl-pac's
    sequences on the families, PairedLUCB's without-replacement sequences on the tables."""
    out = ["| LUCB++'s split, same instances | `lucb-paired` | `lucb-paired-pp` | pp / uniform: pulls (95% CI) | "
           "`dearicl-pac` | `dearicl-pac-pp` | pp / uniform: pulls (95% CI) |", "|---|---|---|---|---|---|---|"]
    for env in [*FAMILIES, *TABLES]:
        if env in TABLES:
            got = {**rows.get(f"table-{env}-population", {}), **rows.get(f"table-{env}", {})}
            pairs = [(got.get("lucb-paired-wor"), got.get("lucb-paired-pp-wor")), (None, None)]
            name = table_name(env, "RECORDED, population protocol")
        else:
            got = rows.get(env, {})
            pairs = [(got.get("lucb-paired"), got.get("lucb-paired-pp")), (got.get("dearicl-pac"), got.get("dearicl-pac-pp"))]
            name = f"{env} (SIMULATED{', epsilon 0.03' if env == 'difficulty' else ''})"
        if all(pp is None for _, pp in pairs):
            continue  # no split run there yet
        out.append(f"| {name} | " + " | ".join(f"{cell(base)} | {cell(pp)} | {paired_ratio(pp, base)}"
                                             for base, pp in pairs) + " |")
    return out


def tables(folder: Path) -> str:
    rows: dict[str, dict] = {}
    parts: dict[str, dict] = {}  # each JSON's rows by its own name
    for path in sorted(folder.glob("*.json")):
        for row in json.loads(path.read_text())["results"]:
            parts.setdefault(path.stem, {})[row["method"]] = row
            rows.setdefault(family_of(path.stem), {})[row["method"]] = row
    out = ["| family (SIMULATED) | " + " | ".join(f"`{m}`" for m in METHODS) + " |", "|---|" + "---|" * len(METHODS)]
    for family in FAMILIES:
        name = family + (" (epsilon 0.03)" if family == "difficulty" else "")
        out.append(f"| {name} | " + " | ".join(cell(rows.get(family, {}).get(m)) for m in METHODS) + " |")
    out += ["", "| population protocol: table (RECORDED) or family (SIMULATED) | `lucb-wor` | `lucb-paired-wor` | "
            "paired / wor: pulls, calls | `lucb-quantile` (fixed set = the pool) | its regret |", "|---|---|---|---|---|---|"]
    for task in ["difficulty", *TABLES]:
        part = "difficulty-population" if task == "difficulty" else f"table-{task}-population"
        pop, quantile = rows.get(part, {}), rows.get(f"table-{task}-quantile", {})
        wor, paired, q = pop.get("lucb-wor"), pop.get("lucb-paired-wor"), quantile.get("lucb-quantile")
        ratio = (f"{paired['mean_pulls'] / wor['mean_pulls']:.2f}, {paired['mean_calls'] / wor['mean_calls']:.2f}"
                 if wor and paired else "-")
        name = ("difficulty (SIMULATED; 1,000-query pool, batches of 20, epsilon 0.03)" if task == "difficulty"
                else table_name(task))
        out.append(f"| {name} | {cell(wor)} | {cell(paired)} | {ratio} | {cell(q)} | "
                   f"{q['mean_simple_regret']:.3f} |" if q else f"| {name} | {cell(wor)} | {cell(paired)} | {ratio} | - | - |")
    out += ["", "| family (SIMULATED), fixed set | `lucb` | " + " | ".join(f"`{m}`" for m in VARIANTS) + " | "
            + " | ".join(f"`{m}` / `lucb` (95% CI)" for m in VARIANTS) + " |", "|---|" + "---|" * (1 + 2 * len(VARIANTS))]
    for family in FAMILIES:
        got = rows.get(family, {})
        name = family + (" (epsilon 0.03)" if family == "difficulty" else "")
        out.append(f"| {name} | {cell(got.get('lucb'))} | " + " | ".join(cell(got.get(m)) for m in VARIANTS) + " | "
                   + " | ".join(paired_ratio(got.get(m), got.get("lucb")) for m in VARIANTS) + " |")
    out += ["", "| table (RECORDED), population protocol | `lucb-wor` | " + " | ".join(f"`{m}`" for m in WOR_VARIANTS)
            + " | " + " | ".join(f"`{m}` / `lucb-wor`: pulls (95% CI); calls" for m in WOR_VARIANTS) + " |",
            "|---|" + "---|" * (1 + 2 * len(WOR_VARIANTS))]
    for task in TABLES:
        got = {**rows.get(f"table-{task}-population", {}), **rows.get(f"table-{task}", {})}  # the variants' part
        base = got.get("lucb-wor")
        name = table_name(task)
        out.append(f"| {name} | {cell(base)} | " + " | ".join(cell(got.get(m)) for m in WOR_VARIANTS) + " | "
                   + " | ".join(f"{paired_ratio(got.get(m), base)}; {paired_ratio(got.get(m), base, 'calls')}"
                                if got.get(m) and base else "-" for m in WOR_VARIANTS) + " |")
    out += ["", "| quantile-PAC (rho 0.1) | `lucb-quantile` | `lucb-quantile-pp` | `lucb-quantile-pp` / `lucb-quantile`: "
            "pulls (95% CI); calls | regret: quantile / pp |", "|---|---|---|---|---|"]
    for env in [*FAMILIES, *TABLES]:
        plain = rows.get(env, {}).get("lucb-quantile") or rows.get(f"table-{env}-quantile", {}).get("lucb-quantile")
        pp = rows.get(env, {}).get("lucb-quantile-pp") or rows.get(f"table-{env}", {}).get("lucb-quantile-pp")
        name = ("difficulty (SIMULATED, epsilon 0.03)" if env == "difficulty"
                else table_name(env, "RECORDED") if env in TABLES else f"{env} (SIMULATED)")
        calls = f"; {paired_ratio(pp, plain, 'calls')}" if plain and pp and "mean_calls" in plain else ""
        regret = (f"{plain['mean_simple_regret']:.3f} / {pp['mean_simple_regret']:.3f}" if plain and pp else "-")
        out.append(f"| {name} | {cell(plain)} | {cell(pp)} | {paired_ratio(pp, plain)}{calls} | {regret} |")
    split = split_table(rows)
    if len(split) > 2:
        out += [""] + split
    if any(part.startswith("close-arms") for part in parts):
        out += [""] + close_arms(parts)
    return "\n".join(out)


def main(argv: list[str]) -> int:
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", nargs="?", type=Path, default=Path("studies/bandit/certification"),
                   help="the study's JSONs (default: %(default)s)")
    p.add_argument("readme", nargs="?", type=Path, default=Path("dearicl/README.md"),
                   help="the page whose certification-study markers get the tables (default: %(default)s)")
    args = p.parse_args(argv)
    folder, readme = args.folder, args.readme
    if not folder.is_dir():
        print(f"certification_tables.py: {folder}: no such folder", file=sys.stderr)
        return 2
    start, end = "<!-- certification-study:start -->", "<!-- certification-study:end -->"
    text = readme.read_text()
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    readme.write_text(head + start + "\n" + tables(folder) + "\n" + end + tail)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
