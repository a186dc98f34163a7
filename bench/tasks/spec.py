"""Tasks defined in a YAML file (`--task-file FILE.yaml`), the way lm-evaluation-harness users write tasks.

A spec names its data (files under the data folder, files beside the spec, or files of a Hugging Face dataset
repository at a pinned revision), which fields hold the input and the answer, the prompt template, how an answer
is read from a generation, the metric and, for classification, the label words. The bundled SST-2, TREC and
AG News tasks are such specs (bench/tasks/specs/). Every field is checked when the file is read, before any
model loads; a bad spec is one line naming the file and the field.

    name: sst2                       # [a-z0-9_-]+, the --tasks name
    description: ...                 # one line for `bench list`
    source: ...                      # where the prompt format comes from (paper, repository)
    data:
      folder: sst2                   # under --data-dir; or `path: DIR` (relative to the spec file), or
      # hub: {dataset: OWNER/NAME, revision: COMMIT}: the files below are paths in that dataset repository
      pool: train.jsonl              # JSON Lines (any other suffix) or CSV with a header line (.csv)
      validation: null               # null: 30% of the pool file (a fixed seed) is set aside as validation
      test: dev.jsonl
    fields:
      input: text                    # a field name, or a template over the row's fields: "{title}. {description}"
      answer: label
      rationale: null                # optional: shown in demonstrations as {rationale}
      id: id                         # optional: the row's id field (default: file and line)
    instruction: ""                  # text before the demonstrations
    template:
      demo: "Review: {input}\nSentiment: {answer}"
      query: "Review: {input}\nSentiment:"
    labels:                          # classification: gold value -> label word, or [word, alias, ...]
      negative: Negative
      positive: Positive
    answer: label                    # how a generation is read: label | number | text | regex
    pattern: null                    # answer: regex -> the pattern whose group 1 is the answer
    metric: accuracy                 # accuracy (needs labels) | exact_match | numeric | chrf | bertscore_f1
    stop: ["\n"]
    max_new_tokens: 8
    lang: en
"""
from __future__ import annotations

import os
import re
import shutil
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from bench.errors import ConfigError, DataError
from bench.items import Item
from bench.metrics import ChrF, numbers_equal
from bench.tasks.base import SplitSpec, Task, normalise_text
from bench.tasks.classification import ClassificationTask
from bench.tasks.gsm8k import extract_number

METRICS = ("accuracy", "exact_match", "numeric", "chrf", "bertscore_f1")
METRIC_LABELS = {"accuracy": "Acc", "exact_match": "EM", "numeric": "EM", "chrf": "chrF",
                 "bertscore_f1": "BERTScore F1"}
ANSWERS = ("label", "number", "text", "regex")
TOP_KEYS = {"name", "description", "source", "data", "fields", "instruction", "template", "labels", "answer",
            "pattern", "metric", "stop", "max_new_tokens", "lang"}
NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


@dataclass(frozen=True)
class HubFiles:
    """Files of a Hugging Face dataset repository at a pinned revision (fetched with huggingface_hub)."""

    dataset: str
    revision: str


@dataclass(frozen=True)
class TaskSpec:
    name: str
    path: Path  # the spec file
    split: SplitSpec
    input: str
    answer_field: str
    template_demo: str
    template_query: str
    description: str = ""
    source: str = ""
    data_path: Path | None = None  # data beside the spec (data.path), instead of --data-dir
    hub: HubFiles | None = None
    rationale_field: str | None = None
    id_field: str | None = None
    instruction: str = ""
    labels: dict[str, tuple[str, ...]] = field(default_factory=dict)  # gold value -> words (first: the answer)
    answer: str = "text"
    pattern: str | None = None
    metric: str = "exact_match"
    stop: tuple[str, ...] = ("\n",)
    max_new_tokens: int | None = None
    lang: str = "en"


class _Checker:
    """Reads one spec mapping; every complaint is one line naming the file and the field."""

    def __init__(self, path: Path, data: dict):
        self.path, self.data = path, data

    def fail(self, key: str, why: str):
        raise ConfigError(f"task spec {self.path}: field '{key}' {why}")

    def get(self, mapping: dict, key: str, where: str, kind, required: bool = False, default=None):
        full = f"{where}.{key}" if where else key
        if key not in mapping or mapping[key] is None:
            if required:
                self.fail(full, "is required")
            return default
        value = mapping[key]
        if kind is str and isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, kind):
            self.fail(full, f"must be {_kind_name(kind)}, got {type(value).__name__}")
        return value

    def section(self, key: str, allowed: set[str], required: bool = True) -> dict:
        value = self.get(self.data, key, "", dict, required=required, default={})
        unknown = sorted(set(map(str, value)) - allowed)
        if unknown:
            self.fail(f"{key}.{unknown[0]}", f"is unknown; {key} takes {', '.join(sorted(allowed))}")
        return value


def _kind_name(kind) -> str:
    return {str: "a string", dict: "a mapping", list: "a list", int: "an integer"}.get(kind, kind.__name__)


def _placeholders(template: str) -> set[str]:
    try:
        return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as exc:
        raise ValueError(str(exc)) from None


def load_spec(path: Path) -> TaskSpec:
    """Read and check a task spec; ConfigError (one line, naming the field) on anything wrong."""
    from bench.yamlfile import read_mapping

    path = Path(path)
    data = read_mapping(path, "task spec")
    check = _Checker(path, data)
    unknown = sorted(set(map(str, data)) - TOP_KEYS)
    if unknown:
        check.fail(unknown[0], f"is unknown; a task spec takes {', '.join(sorted(TOP_KEYS))}")
    name = check.get(data, "name", "", str, required=True)
    if not NAME.match(name):
        check.fail("name", f"must be lower-case letters, digits, '-' or '_', got {name!r}")

    data_section = check.section("data", {"folder", "path", "hub", "pool", "validation", "test"})
    where = [k for k in ("folder", "path", "hub") if data_section.get(k) is not None]
    if len(where) != 1:
        check.fail("data", "needs exactly one of folder (under --data-dir), path (beside the spec) or hub")
    files = {k: check.get(data_section, k, "data", str, required=k != "validation") for k in ("pool", "validation", "test")}
    hub = None
    if "hub" in where:
        hub_section = check.get(data_section, "hub", "data", dict)
        extra = sorted(set(map(str, hub_section)) - {"dataset", "revision"})
        if extra:
            check.fail(f"data.hub.{extra[0]}", "is unknown; data.hub takes dataset and revision")
        hub = HubFiles(check.get(hub_section, "dataset", "data.hub", str, required=True),
                       check.get(hub_section, "revision", "data.hub", str, required=True))
    folder = check.get(data_section, "folder", "data", str, default="")
    data_path = None
    if "path" in where:
        data_path = (path.parent / check.get(data_section, "path", "data", str)).resolve()

    fields = check.section("fields", {"input", "answer", "rationale", "id"})
    input_field = check.get(fields, "input", "fields", str, required=True)
    answer_field = check.get(fields, "answer", "fields", str, required=True)
    template = check.section("template", {"demo", "query"})
    demo = check.get(template, "demo", "template", str, required=True)
    query = check.get(template, "query", "template", str, required=True)
    for key, text, needs in (("template.demo", demo, {"input", "answer"}), ("template.query", query, {"input"})):
        try:
            names = _placeholders(text)
        except ValueError as exc:
            check.fail(key, f"is not a valid template ({exc})")
        allowed = {"input", "answer", "rationale"} if key == "template.demo" else {"input"}
        if names - allowed:
            check.fail(key, f"may use {{{'}, {'.join(sorted(allowed))}}} only, not {{{sorted(names - allowed)[0]}}}")
        if not needs <= names:
            check.fail(key, f"must contain {{{sorted(needs - names)[0]}}}")
    if fields.get("rationale") is None and "rationale" in _placeholders(demo):
        check.fail("template.demo", "uses {rationale} but fields.rationale is not set")
    try:
        _placeholders(input_field)
    except ValueError as exc:
        check.fail("fields.input", f"is not a valid template ({exc})")

    labels: dict[str, tuple[str, ...]] = {}
    raw_labels = check.get(data, "labels", "", dict, default={})
    for value, words in raw_labels.items():
        words = [words] if isinstance(words, str) else words
        if not isinstance(words, list) or not words or not all(isinstance(w, str) and w.strip() for w in words):
            check.fail(f"labels.{value}", "must be a label word or a list of words")
        labels[str(value)] = tuple(w.strip() for w in words)
    all_words = [w.lower() for ws in labels.values() for w in ws]
    if len(set(all_words)) != len(all_words):
        check.fail("labels", "names one word for two labels")
    if raw_labels and len(labels) < 2:
        check.fail("labels", "needs at least two labels")

    answer = check.get(data, "answer", "", str, default="label" if labels else "text")
    if answer not in ANSWERS:
        check.fail("answer", f"must be one of {', '.join(ANSWERS)}, got {answer!r}")
    if answer == "label" and not labels:
        check.fail("answer", "is 'label' but the spec has no labels")
    pattern = check.get(data, "pattern", "", str)
    if answer == "regex":
        if pattern is None:
            check.fail("pattern", "is required when answer is 'regex'")
        try:
            if re.compile(pattern).groups < 1:
                check.fail("pattern", "needs a group: group 1 is the answer")
        except re.error as exc:
            check.fail("pattern", f"is not a valid regular expression ({exc})")
    metric = check.get(data, "metric", "", str, default="accuracy" if labels else "exact_match")
    if metric not in METRICS:
        check.fail("metric", f"must be one of {', '.join(METRICS)}, got {metric!r}")
    if metric == "accuracy" and not labels:
        check.fail("metric", "is 'accuracy' (of labels) but the spec has no labels; use exact_match")
    if labels and metric != "accuracy":
        check.fail("metric", f"must be accuracy for a spec with labels, got {metric!r}")
    stop = check.get(data, "stop", "", list, default=["\n"])
    if not all(isinstance(s, str) and s for s in stop):
        check.fail("stop", "must be a list of non-empty strings")
    max_new = check.get(data, "max_new_tokens", "", int)
    if max_new is not None and max_new <= 0:
        check.fail("max_new_tokens", f"must be positive, got {max_new}")
    return TaskSpec(
        name=name, path=path, split=SplitSpec(folder, files["pool"], files["validation"], files["test"]),
        input=input_field, answer_field=answer_field, template_demo=demo, template_query=query,
        description=check.get(data, "description", "", str, default=""), source=check.get(data, "source", "", str, default=""),
        data_path=data_path, hub=hub, rationale_field=check.get(fields, "rationale", "fields", str),
        id_field=check.get(fields, "id", "fields", str), instruction=check.get(data, "instruction", "", str, default=""),
        labels=labels, answer=answer, pattern=pattern, metric=metric, stop=tuple(stop), max_new_tokens=max_new,
        lang=check.get(data, "lang", "", str, default="en"))


class SpecTask(Task):
    """What every spec task shares: reading rows by the spec's fields, and its prompt templates."""

    task_spec: TaskSpec

    def data_folder(self, data_dir: Path | None, source: str = "local") -> Path:
        spec = self.task_spec
        if spec.hub is not None:
            return hub_folder(spec)
        if spec.data_path is not None:
            if not spec.data_path.is_dir():
                raise DataError(f"data folder of task '{self.name}' not found: {spec.data_path} (data.path in {spec.path})")
            return spec.data_path
        return super().data_folder(data_dir, source)

    def parse_row(self, row: dict, row_id: str) -> Item:
        spec = self.task_spec
        text = _field(row, spec.input).strip()
        if not text:
            raise ValueError(f"the input ({spec.input}) is empty")
        gold = _field(row, spec.answer_field).strip()
        rationale = _field(row, spec.rationale_field).strip() if spec.rationale_field else ""
        if spec.labels:
            if gold not in spec.labels:
                raise ValueError(f"label {gold!r} is not one of the spec's labels ({', '.join(spec.labels)})")
            meta = {"label": gold}
            gold = spec.labels[gold][0]
        else:
            meta = {}
        item_id = f"{self.name}/{_field(row, spec.id_field)}" if spec.id_field else f"{self.name}/{row_id}"
        return Item(id=item_id, question=text, answer=gold, rationale=rationale, meta=meta)

    def format_demo(self, item: Item) -> str:
        return self.task_spec.template_demo.format(input=item.question, answer=item.answer, rationale=item.rationale)

    def format_query(self, item: Item) -> str:
        return self.task_spec.template_query.format(input=item.question)


def _field(row: dict, name: str) -> str:
    """A field of a row, or a template over its fields ("{title}. {description}")."""
    if "{" in name:
        try:
            return name.format(**{k: "" if v is None else v for k, v in row.items()})
        except KeyError as exc:
            raise KeyError(f"missing field {exc}") from None
    if name not in row:
        raise KeyError(f"missing field '{name}'")
    value = row[name]
    if value is None or isinstance(value, (dict, list)):
        raise ValueError(f"field '{name}' must be text or a number")
    return str(value)


class SpecClassification(SpecTask, ClassificationTask):
    """A spec with labels."""


class SpecGeneration(SpecTask):
    """A spec without labels: answers are read from generations by the spec's `answer` rule."""

    def extract(self, output: str) -> str:
        spec = self.task_spec
        if spec.answer == "number":
            return extract_number(output)
        if spec.answer == "regex":
            found = re.search(spec.pattern, output)
            return found.group(1).strip() if found else ""
        return output.strip()

    def score(self, predictions: Sequence[str], items: Sequence[Item], outputs: Sequence[str]) -> list[float]:
        metric = self.task_spec.metric
        if metric == "numeric":
            return [float(numbers_equal(p, it.answer)) for p, it in zip(predictions, items)]
        if metric == "chrf":
            chrf = ChrF()
            return [chrf.sentence(p, it.answer) for p, it in zip(predictions, items)]
        if metric == "bertscore_f1":
            if self.bertscore is None:
                raise ConfigError(f"task '{self.name}': bertscore_f1 needs a BERTScore scorer")
            return self.bertscore.f1(list(predictions), [it.answer for it in items], lang=self.lang)
        return [float(normalise_text(p) == normalise_text(it.answer)) for p, it in zip(predictions, items)]


def spec_task_class(spec: TaskSpec) -> type[Task]:
    """A Task class for a spec (the registry holds classes)."""
    base = SpecClassification if spec.labels else SpecGeneration
    attrs: dict[str, Any] = {
        "task_spec": spec, "name": spec.name, "metric_name": spec.metric, "metric_label": METRIC_LABELS[spec.metric],
        "spec": spec.split, "instruction": spec.instruction, "lang": spec.lang, "stop": spec.stop,
        "description": spec.description or f"from {spec.path.name}", "__module__": __name__,
    }
    if spec.max_new_tokens is not None:  # else the base's: a label's few tokens, or no cap for generation
        attrs["max_new_tokens"] = spec.max_new_tokens
    if spec.labels:
        attrs["labels"] = tuple(words[0] for words in spec.labels.values())
        attrs["aliases"] = {words[0]: words for words in spec.labels.values()}
    return type(f"SpecTask_{spec.name.replace('-', '_')}", (base,), attrs)


def hub_folder(spec: TaskSpec) -> Path:
    """The spec's files from its Hugging Face dataset repository at the pinned revision (huggingface_hub's
    cache; HF_ENDPOINT points it at a mirror), as one local folder."""
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise DataError("data.hub needs the package huggingface_hub") from None
    hub = spec.hub
    paths = {}
    for name in (spec.split.pool, spec.split.validation, spec.split.test):
        if name is None:
            continue
        try:
            paths[name] = Path(hf_hub_download(hub.dataset, name, repo_type="dataset", revision=hub.revision,
                                               endpoint=os.environ.get("HF_ENDPOINT")))
        except Exception as exc:  # offline, a missing file or revision: one line
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise DataError(f"task '{spec.name}': could not fetch {name} from dataset {hub.dataset}@{hub.revision} "
                            f"({reason})") from None
    # one folder with the three files, copied out of the hub cache's snapshot folders
    folder = Path(os.environ.get("BENCH_CACHE_DIR", Path.home() / ".cache" / "icl-bench")) / "hub-tasks" / \
        f"{hub.dataset.replace('/', '--')}@{hub.revision}"
    for name, source in paths.items():
        target = folder / name
        if not target.is_file() or target.stat().st_size != source.stat().st_size:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
    return folder
