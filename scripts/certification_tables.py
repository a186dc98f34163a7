"""The summary tables of scripts/certification_study.sh's JSONs, written between the markers of dearicl/README.md.

    python scripts/certification_tables.py [studies/bandit/certification] [dearicl/README.md]
"""
import json
import sys
from pathlib import Path

FAMILIES = ["difficulty", "nonlinear", "slots", "pairwise", "order", "latent"]
METHODS = ["lucb", "lucb-kl", "lucb-paired", "lucb-quantile", "dearicl-pac", "dearicl-pac-model"]
TABLES = ["rules", "sst2", "trec", "agnews", "wmt19"]


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
    return text + f"; {errors}/{row['runs']}; {row['coverage']:.3f}"


def tables(folder: Path) -> str:
    rows: dict[str, dict] = {}
    for path in sorted(folder.glob("*.json")):
        for row in json.loads(path.read_text())["results"]:
            rows.setdefault(path.stem.removesuffix("-pac"), {})[row["method"]] = row
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
        name = {"wmt19": "wmt19 (epsilon 0.005)",
                "difficulty": "difficulty (SIMULATED; 1,000-query pool, batches of 20, epsilon 0.03)"}.get(task, task)
        out.append(f"| {name} | {cell(wor)} | {cell(paired)} | {ratio} | {cell(q)} | "
                   f"{q['mean_simple_regret']:.3f} |" if q else f"| {name} | {cell(wor)} | {cell(paired)} | {ratio} | - | - |")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    folder = Path(argv[0] if argv else "studies/bandit/certification")
    readme = Path(argv[1] if len(argv) > 1 else "dearicl/README.md")
    start, end = "<!-- certification-study:start -->", "<!-- certification-study:end -->"
    text = readme.read_text()
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    readme.write_text(head + start + "\n" + tables(folder) + "\n" + end + tail)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
