"""`python -m bench view RUN_DIR [RUN_DIR ...] --out FILE.html`: one self-contained HTML file of runs and studies,
item by item, and each run's `report.html`.

The page holds only what the run folders hold: results.json (scores, intervals, calls, times, provenance),
records.jsonl (per item: the demonstrations' ids and questions, the output, the score), fits.jsonl (the selectors'
traces), config.json (the tasks' metrics and labels), run_config.yaml and README.md (settings), the folders' PNG
plots and, where a run kept one, its `selections/` store (whole demonstrations: question, rationale and answer).
A run without that store has the demonstrations' questions as records.jsonl keeps them, cut at 400 characters, and
no answers; the page says so. The template (`viewer_page.html`: inline CSS and vanilla JavaScript, no framework)
makes no network request: a Content-Security-Policy forbids any, and the plots are data: URIs.

One page per task. Each (run folder, task) is a *part*: its items go into a `<script type="application/json">` block
of their own that the page parses only when that part's items are first shown, so a study of many runs opens fast.
"""
from __future__ import annotations

import base64
import json
import math
import statistics
from dataclasses import dataclass, field, fields
from pathlib import Path

from bench.errors import ConfigError, DataError
from bench.records import RECORD_CHARS, ItemRecord, read_fits, read_jsonl, round_floats
from reports.exemplars import RIGHT_AT

TEMPLATE = Path(__file__).with_name("viewer_page.html")
CUT = RECORD_CHARS  # a record's query and demonstration questions are kept to this many characters
RIGHT = RIGHT_AT  # an item is right when its score is at least this (reports/exemplars.py's rule)
ROUND_ROWS = 4000  # trace rows kept per fit (evenly thinned beyond, the last row always kept)
_RECORD_FIELDS = {f.name for f in fields(ItemRecord)}


@dataclass
class Folder:
    """One run folder and where it came from (a study's run folders carry the study's path)."""

    path: Path
    label: str
    study: Path | None = None
    results: dict = field(default_factory=dict)
    records: list[dict] = field(default_factory=list)


def is_run(path: Path) -> bool:
    return (path / "results.json").is_file() and (path / "records.jsonl").is_file()


def run_folders(paths: list[Path]) -> tuple[list[Folder], list[Path]]:
    """(the run folders of `paths`, the study folders among them): each path a run folder, or a study (its
    subfolders holding a run). A path that is neither is a ConfigError (one line, exit 2)."""
    from reports.study import study_runs

    found: list[Folder] = []
    studies: list[Path] = []
    for path in map(Path, paths):
        if not path.exists():
            raise ConfigError(f"{path}: no such folder")
        if not path.is_dir():
            raise ConfigError(f"{path}: not a folder (a run folder holds results.json and records.jsonl)")
        if is_run(path):
            found.append(Folder(path, path.name))
            continue
        runs = [run for run in study_runs(path) if is_run(run)]
        if not runs:
            raise ConfigError(f"{path}: not a run folder (no results.json and records.jsonl) and not a study "
                              "(no run folder inside)")
        studies.append(path)
        found += [Folder(run, run.name, study=path) for run in runs]
    seen, unique = set(), []
    for folder in found:  # a folder named twice (a run and its study) is shown once
        key = folder.path.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(folder)
    names = [f.label for f in unique]
    for folder in unique:  # two studies may both hold "rq1-gsm8k-seed0"
        if names.count(folder.label) > 1:
            folder.label = f"{(folder.study or folder.path.parent).name}/{folder.label}"
    return unique, studies


# ---- JSON -----------------------------------------------------------------------------------------------------
def clean(value):
    """JSON-safe: NaN and infinities become null (JSON.parse rejects them), tuples lists, floats to 7 significant
    digits (a p-value of 3.1e-25 stays one)."""
    if isinstance(value, float):
        return None if not math.isfinite(value) else round_floats(value, 7)
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


def script_json(value) -> str:
    """JSON for a <script type="application/json"> block: no '<' left, so no '</script>' or '<!--' in a record can
    end the block early."""
    return json.dumps(clean(value), ensure_ascii=False, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")


# ---- one folder ----------------------------------------------------------------------------------------------
def load(folder: Folder) -> Folder:
    from reports.results import load_results

    folder.results = load_results(folder.path)
    if not isinstance(folder.results.get("runs"), list):
        raise DataError(f"{folder.path / 'results.json'}: no 'runs' list (not a run's results)")
    folder.records = [row for row in read_jsonl(folder.path / "records.jsonl")
                      if isinstance(row, dict) and {"method", "task", "item_id"} <= row.keys()]
    return folder


def right(score) -> bool:
    return score is not None and score >= RIGHT


def whole_demos(path: Path) -> dict[str, dict]:
    """Demonstration id -> its whole item (question, answer, rationale, options), from the run's own selections/
    store (bench/selections.py); empty without one."""
    out: dict[str, dict] = {}
    for store in sorted((path / "selections").glob("*.json")):
        try:
            data = json.loads(store.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        for demos in (data.get("demos") or {}).values():
            for demo in demos:
                if isinstance(demo, dict) and "id" in demo:
                    out.setdefault(str(demo["id"]), demo)
    return out


def part_items(records: list[dict], task: str, methods: list[str], whole: dict[str, dict]) -> dict:
    """The lazy block of one (run, task): its test items, their demonstrations (each text once) and, per method,
    one entry per item (null where the method has no record): demonstration indices in prompt order, output,
    prediction where it differs, score, right (score >= 0.5), secondary metrics, select_info, label
    probabilities, the prompt and the whole generation where logged."""
    items: list[list] = []
    item_index: dict[str, int] = {}
    demos: list[list] = []
    demo_index: dict[str, int] = {}
    cut_demos = 0
    rows = [r for r in records if r["task"] == task]
    for rec in rows:
        if rec["item_id"] not in item_index:
            item_index[rec["item_id"]] = len(items)
            query = rec.get("query") or ""
            items.append([rec["item_id"], query, rec.get("gold", ""), len(query) >= CUT])
    cells: dict[str, list] = {m: [None] * len(items) for m in methods}
    for rec in rows:
        method = rec["method"]
        if method not in cells:
            cells[method] = [None] * len(items)
            methods.append(method)
        questions = rec.get("demo_questions") or []
        refs = []
        for position, demo_id in enumerate(rec.get("demo_ids") or []):
            demo_id = str(demo_id)
            if demo_id not in demo_index:
                demo_index[demo_id] = len(demos)
                if demo_id in whole:
                    item = whole[demo_id]
                    demos.append([demo_id, item.get("question", ""), item.get("answer", ""),
                                  item.get("rationale", ""), list(item.get("options") or []), 1])
                else:
                    text = questions[position] if position < len(questions) else ""
                    cut = len(text) >= CUT
                    cut_demos += cut
                    demos.append([demo_id, text, "", "", [], 0 if cut else 2])  # 2: whole question, no answer
            refs.append(demo_index[demo_id])
        entry = {"d": refs, "o": rec.get("output", ""), "s": rec.get("score"), "r": int(right(rec.get("score")))}
        if rec.get("prediction", "") != rec.get("output", ""):
            entry["p"] = rec.get("prediction", "")
        for key, short in (("extra", "x"), ("select_info", "si"), ("prompt", "pr"), ("full_output", "fo")):
            if rec.get(key):
                entry[short] = rec[key]
        if rec.get("label_probs"):
            entry["lp"] = {k: round(v, 4) for k, v in rec["label_probs"].items() if isinstance(v, (int, float))}
        cells[method][item_index[rec["item_id"]]] = entry
    kept = sum(flag == 1 for *_, flag in demos)
    if not demos:
        note = "No method of this run showed demonstrations."
    elif kept == len(demos):
        note = "Demonstrations are whole (question, rationale and answer) from the run's selections/ store."
    else:
        note = (f"Demonstrations: their questions as records.jsonl keeps them ({cut_demos} of {len(demos)} cut at "
                f"{CUT} characters), without answers"
                + (f"; {kept} whole from the run's selections/ store." if kept else
                   ": this run folder holds no selections/ store (--selections put it elsewhere, or the folder was "
                   "published without it), and records.jsonl holds full prompts only with --log-prompts."))
    return {"items": items, "demos": demos, "methods": methods, "cells": cells, "demo_note": note}


def _record(row: dict) -> ItemRecord:
    base = {"demo_ids": [], "prompt_hash": "", "output": "", "prediction": "", "gold": "", "score": 0.0,
            "latency_s": 0.0}
    return ItemRecord(**{**base, **{k: v for k, v in row.items() if k in _RECORD_FIELDS}})


def result_rows(folder: Folder, task: str, part: int, baseline: str | None) -> list[dict]:
    """The results table's rows of one (run, task): score and interval, the paired test against the run's
    baseline (the report's: the deciding p, McNemar's for 0/1 scores, Holm over the task's methods), calls, times."""
    from reports import tables

    scored = [r for r in folder.records if r["task"] == task and r.get("score") is not None]
    tests = tables.significance([_record(r) for r in scored], baseline) if baseline else {}
    rows = []
    for run in folder.results["runs"]:
        if run.get("task") != task:
            continue
        test = tests.get((run["method"], task))
        mark = tables.mark(test)
        calls = run.get("llm_calls") or {}
        rows.append({
            "part": part, "method": run["method"], "group": run.get("group") or run.get("level") or "",
            "metric": run.get("metric_label") or run.get("metric") or "", "n": run.get("n"),
            "score": run.get("score"), "ci_low": run.get("ci_low"), "ci_high": run.get("ci_high"),
            "baseline": run["method"] == baseline,
            "delta": test.mean_diff if test else None, "p": test.deciding_p() if test else None,
            "p_holm": test.deciding_p(corrected=True) if test else None,
            "test": ("McNemar" if test.mcnemar_p is not None else "t-test") if test else "", "mark": mark,
            "calls_sel": calls.get("selection"), "calls_inf": calls.get("inference"),
            "sel_s": run.get("selection_seconds"), "inf_s": run.get("inference_seconds_per_query"),
            "budget_exhausted": bool(run.get("budget_exhausted")), "reused": run.get("selection_reused_from") or "",
            "extra": run.get("extra") or {}, "warnings": run.get("warnings") or [], "error": run.get("error") or "",
        })
    return rows


def _numeric(row: dict) -> dict:
    return {k: v for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _thin(rows: list, limit: int = ROUND_ROWS) -> list:
    if len(rows) <= limit:
        return rows
    step = len(rows) / (limit - 1)
    return [rows[int(i * step)] for i in range(limit - 1)] + [rows[-1]]


def selection_data(folder: Folder, task: str) -> list[dict]:
    """Per fit of this (run, task): its summary (calls, time, budget, scale, warnings), the summary rows of its
    trace, its rounds (a bandit's gap index, pulls and calls; a search's iterations: the numeric fields of each
    trace row), an LTR model's losses as recorded, and a per-query bandit's rounds and pulls over the test items."""
    per_query: dict[str, list[dict]] = {}
    for rec in folder.records:
        info = rec.get("select_info") or {}
        if rec["task"] == task and "rounds" in info and "pulls" in info:
            per_query.setdefault(rec["method"], []).append(info)
    out = []
    for (method, fit_task), fit in read_fits(folder.path / "fits.jsonl").items():
        if fit_task != task:
            continue
        summaries = [row for row in fit.trace if row.get("summary")]
        ltr = [row for row in fit.trace if row.get("ltr")]
        steps = [row for row in fit.trace if not row.get("summary") and not row.get("ltr")]
        kind = ("bandit" if any("gap_index" in row for row in steps) else "search" if steps else
                "trained" if ltr or any("first_loss" in row for row in summaries) else "")
        entry = {"method": method, "level": fit.level, "kind": kind, "calls": fit.selection_calls,
                 "seconds": fit.selection_seconds, "budget": fit.budget, "budget_exhausted": fit.budget_exhausted,
                 "reused_from": fit.reused_from, "scale": fit.scale, "warnings": fit.warnings, "error": fit.error,
                 "summary": summaries, "ltr": ltr, "rounds": _thin([_numeric(row) for row in steps]),
                 "rounds_total": len(steps)}
        infos = per_query.get(method)
        if infos:
            def spread(key: str) -> list:
                values = [i[key] for i in infos if isinstance(i.get(key), (int, float))]
                return [statistics.median(values), min(values), max(values)] if values else []

            stops: dict[str, int] = {}
            for info in infos:
                stops[str(info.get("stopped_by", ""))] = stops.get(str(info.get("stopped_by", "")), 0) + 1
            entry["per_query"] = {"queries": len(infos), "rounds": spread("rounds"), "pulls": spread("pulls"),
                                  "stops": stops}
        out.append(entry)
    return out


def png_block(paths: list[Path]) -> dict[str, str]:
    return {p.name: base64.b64encode(p.read_bytes()).decode("ascii") for p in paths}


def provenance(folder: Folder) -> dict:
    """What made the run: LLMs, encoder, versions, machine, times, the command and settings (results.json's meta,
    config), run_config.yaml and the folder's README.md, as the folder holds them."""
    results = folder.results
    meta = dict(results.get("meta") or {})
    options = meta.pop("options", None)
    texts = {}
    for name in ("run_config.yaml", "README.md"):
        path = folder.path / name
        if path.is_file():
            texts[name] = path.read_text(encoding="utf-8", errors="replace")
    if "run_config.yaml" not in texts and options:
        texts["options (results.json)"] = json.dumps(options, indent=1, ensure_ascii=False)
    return {"llm": results.get("llm", ""), "selection_llm": results.get("selection_llm", ""),
            "encoder": results.get("encoder", ""), "bertscore": results.get("bertscore") or {},
            "meta": meta, "config": results.get("config") or {}, "texts": texts,
            "rerun": (f"python -m bench run --config {folder.path.name}/run_config.yaml --out NEW_FOLDER"
                      if "run_config.yaml" in texts else "")}


# ---- the page -----------------------------------------------------------------------------------------------
def build(paths: list[Path]) -> tuple[dict, dict[str, object]]:
    """(the index the page starts from, the lazy blocks by element id): pages by task, parts, folders."""
    from reports import tables
    from reports.study import part_baseline

    folders, studies = run_folders(paths)
    index: dict = {"sources": [str(p) for p in paths], "pages": [], "parts": [], "folders": [],
                   "right_at": RIGHT, "cut": CUT}
    blocks: dict[str, object] = {}
    pages: dict[str, dict] = {}
    for f, folder in enumerate(folders):
        load(folder)
        config_path = folder.path / "config.json"
        task_info = {}
        if config_path.is_file():
            try:
                task_info = json.loads(config_path.read_text(encoding="utf-8")).get("task_info", {})
            except ValueError:
                task_info = {}
        runs = folder.results["runs"]
        baseline = (tables.pick_baseline(runs, part_baseline(folder.path)) if folder.study is not None
                    else tables.pick_baseline(runs, None))
        whole = whole_demos(folder.path)
        pngs = sorted(folder.path.glob("*.png"))
        if pngs:
            blocks[f"plots-{f}"] = png_block(pngs)
        index["folders"].append({"label": folder.label, "path": str(folder.path),
                                 "study": str(folder.study) if folder.study else "",
                                 "plots": [p.name for p in pngs], "provenance": provenance(folder)})
        tasks = list(dict.fromkeys([r["task"] for r in runs] + [r["task"] for r in folder.records]))
        for task in tasks:
            p = len(index["parts"])
            methods = list(dict.fromkeys(r["method"] for r in runs if r["task"] == task))
            data = part_items(folder.records, task, methods, whole)
            blocks[f"items-{p}"] = data
            blocks[f"selection-{p}"] = selection_data(folder, task)
            info = task_info.get(task, {})
            index["parts"].append({
                "folder": f, "task": task, "label": folder.label, "baseline": baseline or "",
                "methods": data["methods"], "n_items": len(data["items"]), "demo_note": data["demo_note"],
                "labels": info.get("labels") or [], "scoring": info.get("scoring", ""),
                "plots": [p.name for p in pngs if not p.stem.startswith("convergence_") or p.stem == f"convergence_{task}"]})
            page = pages.setdefault(task, {"task": task, "parts": [], "rows": [], "metrics": [], "study_plots": []})
            page["parts"].append(p)
            rows = result_rows(folder, task, p, baseline)
            page["rows"] += rows
            for row in rows:
                if row["metric"] and row["metric"] not in page["metrics"]:
                    page["metrics"].append(row["metric"])
    for s, study in enumerate(studies):  # a study's own plots: convergence_<task>.png on its task's page
        pngs = sorted(study.glob("*.png"))
        if not pngs:
            continue
        blocks[f"study-plots-{s}"] = png_block(pngs)
        for png in pngs:
            for task, page in pages.items():
                if not png.stem.startswith("convergence_") or png.stem == f"convergence_{task}":
                    page["study_plots"].append({"block": f"study-plots-{s}", "name": png.name,
                                                "study": study.name})
    index["pages"] = list(pages.values())
    index["title"] = ", ".join(p.name for p in studies) or (folders[0].label if len(folders) == 1 else
                                                            f"{len(folders)} runs")
    return index, blocks


def render_html(paths: list[Path]) -> str:
    index, blocks = build(paths)
    parts = [f'<script type="application/json" id="viewer-index">{script_json(index)}</script>']
    parts += [f'<script type="application/json" id="{name}">{script_json(value)}</script>'
              for name, value in blocks.items()]
    template = TEMPLATE.read_text(encoding="utf-8")
    title = index["title"].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return template.replace("{{TITLE}}", title).replace("<!--DATA-->", "\n".join(parts))


def write_viewer(paths: list[Path], out: Path) -> Path:
    """The viewer of `paths` (run folders, studies) as one HTML file at `out`."""
    out = Path(out)
    if out.is_dir():
        raise ConfigError(f"--out {out}: a folder; give the HTML file's name (e.g. {out / 'view.html'})")
    html = render_html(paths)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(html, encoding="utf-8")
    return out


def write_run_html(folder: Path) -> Path:
    """A run's report.html beside its report.md (the runner's, unless --no-html)."""
    return write_viewer([Path(folder)], Path(folder) / "report.html")
