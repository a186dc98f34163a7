"""Recorded reward tables: every (arm, item) reward of the paper's bandit setting, recorded once with a real LLM,
so that bandits replay against exact truth (`bench simulate --env table:FILE`) at no LLM cost.

`python -m bench table build --task T --llm M [--arms 100 --k 5 --n-val 50 --n-test 200 --samples 3] --out F.npz`
builds the arms exactly as the bandit selectors do (KMeans on the pool's question + output embeddings, one example
per cluster, `dearicl.arms.build_arms`, same seed), then answers every validation and test item after every arm's
demonstrations: shared-prefix pulls through the harness's LLM client (cached, so a killed build resumes without
repeating a call), one bar with an ETA. Per (arm, item) it stores:
- `rewards` [arms, items, samples]: the selection reward the harness would give (Task.configure: BERTScore F1 of
  the output against the gold output on the paper's tasks, correctness on classification), one per seeded sample
  at the run's temperature (ranked labels are deterministic: one sample);
- `metric` [arms, items, samples]: the task's metric of the same answers (exact match, accuracy, BERTScore);
- `loglik` [arms, items]: exp of the gold output's mean per-token log-probability after the prompt (the geometric
  mean probability of its tokens, in (0, 1]): a reward with signal where exact match is 0;
- `extra_<name>` [arms, items, samples]: the task's secondary metrics of the same answers (WMT19: `extra_chrf`);
- `item_ids`, `split` ("validation" / "test") [items]; `arm_demo_ids` [arms, k];
- `meta`: a JSON string (task, answering settings, model id, decoding, the prompt template's hash, k, seed,
  samples, the code version, when and how long it took to build).
- with `--rewards` (`groups`), a table records only some groups of columns, and `meta.groups` names the ones it
  holds (the others are NaN and any read of them is a ConfigError): `generation` (the above: sampled answers,
  their rewards and metric, and the gold log-likelihood), `loglik` (the gold log-likelihood alone: one
  teacher-forced pass per (arm, item), which a CPU affords where generation needs a GPU), `options` (a multiple-
  choice task's options ranked by log-likelihood, Task.option_ranking: `extra_option_correct`, 0/1, and
  `extra_option_prob`, the gold option's probability over the options). `merge` joins two tables of the same arms
  and items that hold different columns (a GPU's generation columns into a CPU's log-likelihood table).
The file is NumPy's compressed `.npz` (no pickles: `np.load(F, allow_pickle=False)` reads it).

Recording on another machine (a GPU box with neither the data nor the encoder): `build --plan P.json` writes the
arms' demonstrations and the items whole, `bench table calls P.json --cache C` makes every call there, and
`build --cache C --answers-from C.recorded.json` builds the table here from that cache, after checking the plan's
id and that every call is in it (`meta.answers_recorded` says what answered: device, versions, sampler).
"""
from __future__ import annotations

import hashlib
import json
import random
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from bench.answering import answer, ask, rewards as reward_of
from bench.errors import ConfigError, DataError
from bench.items import Item
from bench.llm import CallScope, LLMClient
from bench.log import LOG, Progress
from dearicl.confidence import snap_rounding

FORMAT = "icl-select-bench reward table v1"
COLUMN_GROUPS = ("generation", "loglik", "options")
OPTION_COLUMNS = ("option_correct", "option_prob")


@dataclass
class RewardTable:
    rewards: np.ndarray  # [arms, items, samples]
    metric: np.ndarray  # [arms, items, samples]
    loglik: np.ndarray  # [arms, items]
    item_ids: np.ndarray  # [items] str
    split: np.ndarray  # [items] "validation" | "test"
    arm_demo_ids: np.ndarray  # [arms, k] str
    meta: dict
    extras: dict = field(default_factory=dict)  # name -> [arms, items, samples]: the task's secondary metrics (chrF)

    @property
    def columns(self) -> list[str]:
        """The recorded columns, from the groups `meta.groups` names (a table built before `--rewards` holds the
        generation group): rewards, metric and loglik for generation, loglik alone for loglik; then the extras."""
        groups = self.meta.get("groups") or ["generation"]
        base = ["rewards", "metric", "loglik"] if "generation" in groups else ["loglik"] * ("loglik" in groups)
        return base + list(self.extras)

    @property
    def default_reward(self) -> str:
        """What a pull returns unless asked otherwise: the selection reward if recorded, else the gold
        log-likelihood."""
        return "rewards" if "rewards" in self.columns else "loglik"

    def arm_slice(self, lo: int, hi: int) -> "RewardTable":
        """Arms lo..hi-1 of the table, every item and column (the slice a `--shard` build records)."""
        return replace(self, rewards=self.rewards[lo:hi], metric=self.metric[lo:hi], loglik=self.loglik[lo:hi],
                       arm_demo_ids=self.arm_demo_ids[lo:hi], extras={n: v[lo:hi] for n, v in self.extras.items()})

    def values(self, what: str) -> np.ndarray:
        """rewards, metric, loglik or a secondary metric by name: [arms, items, samples] ([arms, items] for loglik)."""
        if what == "auto":
            what = self.default_reward
        if what not in self.columns:
            raise ConfigError(f"the table holds no '{what}' (it holds {', '.join(self.columns)})")
        return getattr(self, what) if what in ("rewards", "metric", "loglik") else self.extras[what]

    @property
    def validation(self) -> np.ndarray:
        return np.flatnonzero(self.split == "validation")

    @property
    def test(self) -> np.ndarray:
        return np.flatnonzero(self.split == "test")

    def item_scores(self, what: str) -> np.ndarray:
        """Each arm's score on each item, [arms, items]: the mean over the recorded samples (a log-likelihood column
        has none to average)."""
        values = self.values(what)
        return values.reshape(len(values), len(self.item_ids), -1).mean(axis=2)

    def true_means(self, what: str = "rewards", split: str = "validation") -> np.ndarray:
        """Each arm's exact mean over the split's items (and samples): the truth a replay is judged by."""
        cols = self.validation if split == "validation" else self.test
        values = snap_rounding(self.values(what))  # as the confidence sequences see them, averaged in float64
        return values[:, cols].reshape(len(values), -1).astype(np.float64).mean(axis=1)

    def summary(self) -> str:
        """What the table holds and how much its arms differ (validation means of each reward)."""
        m = self.meta
        lines = [f"reward table: task {m['task']}, model {m['model']}, {len(self.rewards)} arms of k={m['k']}, "
                 f"{len(self.validation)} validation + {held_test_items(m)}, {self.rewards.shape[2]} sample(s); "
                 f"built {m['built_at']} in {m['build_seconds']:.0f} s; columns {', '.join(self.columns)}"]
        for what in self.columns:
            means = self.true_means(what)
            top = np.sort(means)[::-1]
            signal = self.arm_signal(what)
            spread = f" (sd {means.std(ddof=1):.3f})" if len(means) > 1 else ""
            tests = (f"arms differ: Friedman p {signal['friedman_p']:.2g}; validation-test r {signal['val_test_r']:.2f}"
                     if len(means) >= 3 else "too few arms to test whether they differ")
            lines.append(f"  {what:>8}: arm means {means.min():.3f}-{means.max():.3f}{spread}; "
                         f"best {top[0]:.3f}, 10th best {top[min(9, len(top) - 1)]:.3f}; {tests}")
        return "\n".join(lines)

    def arm_signal(self, what: str = "rewards") -> dict:
        """Whether the arms differ on `what`: Friedman's randomised-block test over arms x validation items (each
        item a block; the arms' mean over samples), and the Pearson correlation of the arms' validation and test
        means (do arms that look good on validation stay good?)."""
        from scipy import stats

        values = snap_rounding(self.values(what))
        per_item = values.reshape(len(values), len(self.item_ids), -1).astype(np.float64).mean(axis=2)
        blocks = per_item[:, self.validation]
        if len(blocks) < 3:  # Friedman's test needs three arms (a shard may hold fewer): no test, no correlation
            return {"friedman_p": float("nan"), "val_test_r": float("nan")}
        p = float(stats.friedmanchisquare(*blocks).pvalue) if np.ptp(blocks) > 0 else 1.0
        val, test = self.true_means(what), self.true_means(what, "test")
        r = float(stats.pearsonr(val, test).statistic) if np.ptp(val) > 0 and np.ptp(test) > 0 else float("nan")
        return {"friedman_p": p, "val_test_r": r}

    def save(self, path: Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(path, rewards=self.rewards.astype(np.float32), metric=self.metric.astype(np.float32),
                            loglik=self.loglik.astype(np.float32), item_ids=self.item_ids.astype(str),
                            split=self.split.astype(str), arm_demo_ids=self.arm_demo_ids.astype(str),
                            meta=np.array(json.dumps({"format": FORMAT, **self.meta}, sort_keys=True)),
                            **{f"extra_{name}": v.astype(np.float32) for name, v in self.extras.items()})

    @classmethod
    def load(cls, path: Path) -> "RewardTable":
        path = Path(path)
        if not path.is_file():
            raise DataError(f"no reward table at {path}")
        try:
            with np.load(path, allow_pickle=False) as data:
                meta = json.loads(str(data["meta"]))
                if meta.get("format") != FORMAT:
                    raise DataError(f"{path}: not a reward table ({meta.get('format')!r})")
                extras = {key[len("extra_"):]: data[key] for key in data.files if key.startswith("extra_")}
                return cls(data["rewards"], data["metric"], data["loglik"], data["item_ids"], data["split"],
                           data["arm_demo_ids"], meta, extras)
        except (OSError, ValueError, KeyError) as exc:
            raise DataError(f"{path}: not a readable reward table ({exc})") from None

    def merge(self, other: "RewardTable") -> "RewardTable":
        """This table with `other`'s columns added: the same task, model, arms and items, recorded apart (a CPU's
        log-likelihoods and a GPU's generations); a column both hold must agree (to float32 rounding)."""
        for key in ("task", "model", "k", "seed", "template_hash", "answering"):
            if self.meta.get(key) != other.meta.get(key):
                raise ConfigError(f"the tables differ in {key} ({self.meta.get(key)!r} vs {other.meta.get(key)!r})")
        if (not np.array_equal(self.item_ids, other.item_ids) or not np.array_equal(self.split, other.split)
                or not np.array_equal(self.arm_demo_ids, other.arm_demo_ids)):
            raise ConfigError("the tables hold other arms or items: only tables of the same build settings merge")
        mine, theirs = set(self.columns), set(other.columns)
        for name in mine & theirs:
            a, b = self.values(name), other.values(name)
            if a.shape != b.shape or not np.allclose(a, b, rtol=1e-4, atol=1e-5):
                raise ConfigError(f"both tables hold '{name}' and their values differ")
        take = lambda name: other if name in theirs and name not in mine else self  # noqa: E731
        extras = {name: take(name).extras[name] for name in self.columns + other.columns
                  if name not in ("rewards", "metric", "loglik")}
        groups = set(self.meta.get("groups") or ["generation"]) | set(other.meta.get("groups") or ["generation"])
        meta = {**self.meta, "groups": [g for g in COLUMN_GROUPS if g in groups], "extras": sorted(extras),
                "merged_from": [_provenance(self.meta), _provenance(other.meta)]}
        if "generation" in other.meta.get("groups", ["generation"]) and "rewards" in theirs:
            meta.update({k: other.meta[k] for k in ("samples", "decoding", "metric", "bertscore", "answers_recorded")
                         if k in other.meta})
        return RewardTable(take("rewards").rewards, take("metric").metric, take("loglik").loglik, self.item_ids,
                           self.split, self.arm_demo_ids, meta, extras)


def held_test_items(meta: dict) -> str:
    """The test items a table holds: a staged build records some of its n_test (`build --record-test`)."""
    held = meta.get("n_test_recorded")
    return f"{held} test items (of {meta['n_test']}: a staged table)" if held else f"{meta['n_test']} test items"


def _provenance(meta: dict) -> dict:
    return {k: meta.get(k) for k in ("groups", "extras", "code", "built_at", "build_seconds", "calls_answered",
                                     "answers_recorded", "extends") if meta.get(k) is not None}


# what an extended table must share with the build that extends it (the arms and items are checked apart)
EXTEND_KEYS = ("task", "answering", "model", "k", "seed", "n_arms", "n_validation", "n_test", "pool_size", "groups",
               "samples", "decoding", "template_hash", "options_template_hash", "bertscore", "shard")


def extend_check(table: RewardTable, want: dict, path="the table") -> None:
    """Before any model loads: `table` is an earlier stage of the build `want` (meta keys) describes."""
    want = json.loads(json.dumps(want))  # as the table's meta reads back (tuples become lists)
    differ = [k for k in EXTEND_KEYS if k in want and table.meta.get(k) != want[k]]
    if differ:
        k = differ[0]
        raise ConfigError(f"--extend {path}: it was built with another {k} ({table.meta.get(k)!r}, this build "
                          f"{want[k]!r}); only a staged build of the same settings grows")


def extendable(table: RewardTable, arm_demos, items, want: dict) -> dict:
    """{item id: its column in `table`}: the cells a build of `arm_demos` x `items` (and the meta `want`) keeps
    from an earlier stage."""
    extend_check(table, want)
    if table.arm_demo_ids.tolist() != [[d.id for d in demos] for demos in arm_demos]:
        raise ConfigError("--extend: the table holds other arms than this build draws (another pool or encoder)")
    ids = {it.id for it in items}
    stray = [str(i) for i in table.item_ids if str(i) not in ids]
    if stray:
        raise ConfigError(f"--extend: the table holds {len(stray)} item(s) this build does not draw ({stray[0]}, ...)")
    return {str(i): c for c, i in enumerate(table.item_ids)}


def table_splits(table: RewardTable, data_dir, path="the table"):
    """The task, splits and arms (pool indices [arms, k]) a table was built on, re-derived from the data folder
    as the build drew them; an error when the folder's items are not the table's."""
    from bench.tasks import make_task

    meta = table.meta
    task = make_task(meta["task"])
    splits = task.load_splits(data_dir, n_test=meta["n_test"], n_val=meta["n_validation"],
                              pool_size=meta["pool_size"], seed=meta["seed"])
    items = {it.id for it in splits.validation + splits.test}
    index = {it.id: i for i, it in enumerate(splits.pool)}
    if any(it not in items for it in table.item_ids) or any(d not in index for d in table.arm_demo_ids.ravel()):
        raise DataError(f"{path}: its items are not those of task '{meta['task']}' in this data folder")
    return task, splits, np.array([[index[d] for d in row] for row in table.arm_demo_ids])


def recorded_test(test: list, n: int | None, seed: int) -> list:
    """n of the test items, a seeded subsample kept in order (all when n is None): a build of the whole test set
    later finds their calls in its cache, so a long CPU build lands in stages. The subsamples are nested (the
    draw's first n of a larger n' are its n), so a build with more items extends one with fewer (`extend`)."""
    if n is None or n >= len(test):
        return list(test)
    keep = sorted(random.Random(f"recorded-test/{seed}").sample(range(len(test)), n))
    return [test[i] for i in keep]


def template_hash(task) -> str:
    """A hash of how the task renders a prompt (instruction, demonstration and query templates)."""
    probe = [Item("probe/d", "DEMO INPUT", "DEMO ANSWER", "DEMO RATIONALE")]
    return hashlib.sha256(task.render(probe, Item("probe/q", "QUERY INPUT", "")).encode()).hexdigest()[:16]


def gold_loglik(client: LLMClient, task, demos, items, scope) -> np.ndarray:
    """exp(mean per-token log-probability of each item's gold output after its prompt), in (0, 1]: one call per
    item, the demonstrations' prefix prefilled once; none where the gold output is a label word the ranked answer
    already scored (the same log-likelihood, read from that call)."""
    golds = [task.reward_reference(it) for it in items]
    words = task.choice_words() if task.scoring == "rank" else []
    if all(g in words for g in golds):  # ranked labels: the answers' own call scored every label word (cached)
        totals = np.array([row[words.index(g)] for row, g in zip(client.classify(task, demos, items, scope=scope)[0],
                                                                 golds)])
    else:
        totals = np.array([row[0] for row in
                           client.classify(task, demos, items, scope=scope, words=[[g] for g in golds])[0]])
    tokenizer = getattr(client.backend, "tokenizer", None)
    counts = np.array([max(1, len(tokenizer(" " + g, add_special_tokens=False)["input_ids"]) if tokenizer is not None
                           else len(g.split())) for g in golds])
    return np.exp(totals / counts)


def option_ranks(client: LLMClient, task, demos, items, scope) -> tuple[np.ndarray, np.ndarray]:
    """A multiple-choice task's options ranked by log-likelihood after the arm's demonstrations
    (Task.option_ranking): per item, 1 when the gold option scores strictly highest (a tie is wrong), and the gold
    option's probability, the scores normalised over the options. One call per item, the prefix shared."""
    from scipy.special import softmax

    ranker = task.option_ranking()
    scores = np.array(client.classify(ranker, demos, items, scope=scope,
                                      words=[ranker.option_words(it) for it in items])[0], dtype=np.float64)
    gold = np.array(["ABCDE".index(it.answer) for it in items])
    rows = np.arange(len(items))
    others = np.where(np.arange(scores.shape[1])[None, :] == gold[:, None], -np.inf, scores)
    return (scores[rows, gold] > others.max(axis=1)).astype(np.float64), softmax(scores, axis=1)[rows, gold]


def check_columns(task, groups) -> tuple[str, ...]:
    """The column groups a build records, in a fixed order; an unknown group, none, or options for a task that has
    none is a ConfigError (before any model loads)."""
    unknown = sorted(set(groups) - set(COLUMN_GROUPS))
    groups = tuple(g for g in COLUMN_GROUPS if g in set(groups))
    if unknown or not groups:
        raise ConfigError(f"--rewards takes a comma list of {', '.join(COLUMN_GROUPS)}, got "
                          f"{','.join(unknown) or 'none'}")
    if "options" in groups and task.option_ranking() is None:
        raise ConfigError(f"--rewards options ranks a multiple-choice task's options; task '{task.name}' has none")
    return groups


def table_arms(task, splits, encoder, n_arms: int, k: int, seed: int) -> list[list[Item]]:
    """The arms' demonstrations, built as the bandit selectors build them (same encoder input, same seed)."""
    from dearicl.arms import build_arms

    if k > len(splits.pool):
        raise ConfigError(f"k={k} is larger than the pool of task '{task.name}' ({len(splits.pool)} items)")
    arms = build_arms(encoder.encode_items(splits.pool, with_output=True), n_arms, k, seed)
    return [[splits.pool[i] for i in members] for members in arms.members]


def record(client: LLMClient, task, arm_demos, items, samples: int, *, score: bool = True, progress: bool = True,
           groups: tuple[str, ...] = ("generation",)):
    """Pull every arm on every item: per arm, a dict of what `groups` asks for: "answers" (the Answers of its
    samples, the items in order within each sample, or with `score` False only the calls), "loglik" [items], and
    "options" ((correct, probability) [items] each). All samples of an arm are one shared-prefix call."""
    scope = CallScope("reward-table", task.name, "selection")
    params = client.params_for(task)
    tiled = list(items) * samples
    indices = [s for s in range(samples) for _ in items]
    generate = "generation" in groups
    per_arm = len(items) * ((samples if generate else 0) + (generate or "loglik" in groups) + ("options" in groups))
    bar = Progress(len(arm_demos) * per_arm, f"table {task.name}", progress, unit="calls")
    try:
        for demos in arm_demos:
            got = {}
            if generate:
                how = answer if score else ask
                got["answers"] = how(client, task, [demos] * len(tiled), tiled, scope=scope, params=params,
                                     sample_indices=indices)
                bar.update(len(tiled))
            if generate or "loglik" in groups:
                got["loglik"] = gold_loglik(client, task, demos, items, scope)
                bar.update(len(items))
            if "options" in groups:
                got["options"] = option_ranks(client, task, demos, items, scope)
                bar.update(len(items))
            yield got
    finally:
        bar.close()


def shard_arms(n_arms: int, shard: tuple[int, int]) -> tuple[int, int]:
    """Shard i of n (0-based): the arms [lo, hi) it records, contiguous slices as even as they come."""
    index, count = shard
    if not 0 <= index < count or count > n_arms:
        raise ConfigError(f"--shard {index}/{count}: wants 0 <= i < n <= {n_arms} (the arms)")
    bounds = np.linspace(0, n_arms, count + 1).round().astype(int)
    return int(bounds[index]), int(bounds[index + 1])


def join_shards(tables: list[RewardTable]) -> RewardTable:
    """The shards of one build (`build --shard i/n`, every i once) joined into the table an unsharded build
    records: the arms in order, every array as that build's."""
    shards = [t.meta.get("shard") for t in tables]
    if any(s is None for s in shards):
        raise ConfigError("table merge: join the shards of one build (`table build --shard i/n`); a table that is "
                          "not a shard merges its columns with one other table")
    count = shards[0]["of"]
    order = sorted(range(len(tables)), key=lambda i: shards[i]["index"])
    if sorted(s["index"] for s in shards) != list(range(count)) or any(s["of"] != count for s in shards):
        have = sorted(s["index"] for s in shards)
        raise ConfigError(f"table merge: shards {have} of {count}: every shard 0..{count - 1} once is needed")
    tables = [tables[i] for i in order]
    first = tables[0]
    own = ("shard", "built_at", "build_seconds", "calls_answered")
    same = {k: v for k, v in first.meta.items() if k not in own}
    for t in tables[1:]:
        differ = sorted(k for k in set(same) | set(t.meta) if k not in own and same.get(k) != t.meta.get(k))
        if differ:
            raise ConfigError(f"table merge: the shards differ in {', '.join(differ)}: they are not one build's")
        if not np.array_equal(t.item_ids, first.item_ids) or not np.array_equal(t.split, first.split):
            raise ConfigError("table merge: the shards hold other items: they are not one build's")
    if [t.meta["shard"]["arms"] for t in tables] != [list(shard_arms(first.meta["n_arms"], (i, count)))
                                                     for i in range(count)]:
        raise ConfigError("table merge: the shards' arms do not cover the build's arms in order")
    cat = lambda arrays: np.concatenate(arrays, axis=0)  # noqa: E731
    meta = {**same, "built_at": max(t.meta["built_at"] for t in tables),
            "build_seconds": round(sum(t.meta["build_seconds"] for t in tables), 1), "joined_shards": count,
            "shard_seconds": [t.meta["build_seconds"] for t in tables]}  # each process's own, for a stage's report
    if all("calls_answered" in t.meta for t in tables):
        meta["calls_answered"] = {k: sum(t.meta["calls_answered"][k] for t in tables) for k in ("here", "cache")}
    return RewardTable(cat([t.rewards for t in tables]), cat([t.metric for t in tables]),
                       cat([t.loglik for t in tables]), first.item_ids, first.split,
                       cat([t.arm_demo_ids for t in tables]), meta,
                       {name: cat([t.extras[name] for t in tables]) for name in first.extras})


def build(task, splits, client: LLMClient, encoder, bertscore, *, n_arms: int, k: int, seed: int, samples: int,
          progress: bool = True, answers_from: dict | None = None,
          groups: tuple[str, ...] = ("generation",), test_recorded: int | None = None,
          shard: tuple[int, int] | None = None, extend: RewardTable | None = None) -> RewardTable:
    """The table of every arm, or with `shard` (i, n) of the i-th of n slices of the arms (the arms are built
    whole, as always, so the slices of n builds join into this build's table: `join_shards`). With `extend`, an
    earlier table of the same build (a staged build with fewer test items), its cells are kept and only the items
    it lacks are answered: a staged build grows on another machine, without the cache that recorded it."""
    groups = check_columns(task, groups)
    generate = "generation" in groups
    samples = 1 if task.scoring == "rank" or client.params.greedy or not generate else samples  # deterministic
    arm_demos = table_arms(task, splits, encoder, n_arms, k, seed)
    all_arms = len(arm_demos)
    if shard is not None:
        lo, hi = shard_arms(all_arms, shard)
        arm_demos = arm_demos[lo:hi]
        if extend is not None and len(extend.arm_demo_ids) == all_arms:  # a shard grows its slice of the table
            extend = extend.arm_slice(lo, hi)
    test = recorded_test(splits.test, test_recorded, seed)
    items = list(splits.validation) + test
    if answers_from is not None:
        check_recorded(client, task, arm_demos, items, samples, answers_from)
    n = len(items)
    params = client.params_for(task)
    decoding = {"temperature": params.temperature, "max_new_tokens": params.max_new_tokens,
                "stop": list(params.stop)} if generate else None
    kept = {} if extend is None else extendable(extend, arm_demos, items, {
        "groups": list(groups), "samples": samples, "model": client.backend.model_id, "decoding": decoding})
    todo = [i for i, it in enumerate(items) if it.id not in kept]  # the columns this build answers
    shape = (len(arm_demos), n, samples)
    rewards, metric = np.full(shape, np.nan), np.full(shape, np.nan)  # NaN where not recorded (meta.columns)
    loglik = np.full((len(arm_demos), n), np.nan)
    extras: dict[str, np.ndarray] = {}
    from bench.provenance import environment

    code = environment().get("git_commit", "")  # the code that runs the build (HEAD may move during an hour's build)
    began = time.perf_counter()
    asked = [items[i] for i in todo]
    answered = record(client, task, arm_demos, asked, samples, progress=progress, groups=groups) if asked else []
    for a, got in enumerate(answered):
        if generate:
            answers = got["answers"]
            rewards[a, todo] = reward_of(task, answers, asked * samples, bertscore).reshape(samples, len(todo)).T
            metric[a, todo] = np.reshape(answers.scores, (samples, len(todo))).T
            for name, values in answers.extras.items():
                extras.setdefault(name, np.full(shape, np.nan))[a, todo] = np.reshape(values, (samples, len(todo))).T
        if "loglik" in got:
            loglik[a, todo] = got["loglik"]
        if "options" in got:
            for name, values in zip(OPTION_COLUMNS, got["options"]):
                extras.setdefault(name, np.full((len(arm_demos), n, 1), np.nan))[a, todo, 0] = values
    seconds = time.perf_counter() - began
    if kept:  # the earlier table's cells, column by column
        mine = [i for i, it in enumerate(items) if it.id in kept]
        theirs = [kept[items[i].id] for i in mine]
        rewards[:, mine], metric[:, mine], loglik[:, mine] = (extend.rewards[:, theirs], extend.metric[:, theirs],
                                                              extend.loglik[:, theirs])
        for name, values in extend.extras.items():
            extras.setdefault(name, np.full(values.shape[:1] + (n,) + values.shape[2:], np.nan))[:, mine] = \
                values[:, theirs]
    LOG.info("reward table %s (%s): %d arms x %d items x %d samples in %.0f s", task.name, ",".join(groups),
             len(arm_demos), n, samples, seconds)
    meta = {"task": task.name, "answering": task.settings(), "model": client.backend.model_id,
            "metric": task.metric_name, "extras": sorted(extras), "groups": list(groups),
            "decoding": decoding,
            "template_hash": template_hash(task), "k": k, "n_arms": all_arms, "seed": seed, "samples": samples,
            "n_validation": len(splits.validation), "n_test": len(splits.test), "pool_size": len(splits.pool),
            "code": code, "built_at": datetime.now(timezone.utc).isoformat(
                timespec="seconds"), "build_seconds": round(seconds, 1),
            # a resumed build's seconds cover only the calls it answered; the rest came from an earlier process
            "calls_answered": dict(client.answered)}
    if len(test) < len(splits.test):  # the splits re-derive from n_test; these are the items recorded of it
        meta["n_test_recorded"] = len(test)
    if "options" in groups:
        meta["options_template_hash"] = template_hash(task.option_ranking())
    if generate and task.reward == "bertscore" and bertscore is not None:  # which scorer, and whether rescaled
        meta["bertscore"] = bertscore.description(task.lang)
    if answers_from is not None:  # the answers came from another machine's run of `table calls`
        meta["answers_recorded"] = answers_from
    if shard is not None:
        meta["shard"] = {"index": shard[0], "of": shard[1], "arms": [lo, hi]}
    if kept:  # build_seconds and calls_answered above are this stage's; the kept cells' are the earlier stage's
        meta["extends"] = {**_provenance(extend.meta), "items_kept": len(kept)}
    return RewardTable(rewards, metric, loglik, np.array([it.id for it in items]),
                       np.array([it.split or ("validation" if i < len(splits.validation) else "test")
                                 for i, it in enumerate(items)]),
                       np.array([[d.id for d in demos] for demos in arm_demos]), meta, extras)


# ---- recording on another machine: a plan of the calls, answered there into a cache, built from it here ----------
PLAN_FORMAT = "icl-select-bench table calls v1"


def plan_id(task, arm_demos, items, samples: int, model_id: str, params) -> str:
    """A hash of everything that fixes a table's calls: the cache a plan filled is checked against it."""
    blob = json.dumps({"task": task.name, "answering": task.settings(), "model": model_id, "samples": samples,
                       "params": asdict(params), "template": template_hash(task), "items": [it.id for it in items],
                       "arms": [[d.id for d in demos] for demos in arm_demos]}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def write_plan(path: Path, task, splits, client: LLMClient, encoder, *, llm: str, n_arms: int, k: int, seed: int,
               samples: int) -> dict:
    """The calls of a table as a JSON file (arms' demonstrations and the items, whole): `bench table calls` answers
    them on a machine with neither the data nor the encoder (a GPU box), into a cache `build --answers-from` reads."""
    samples = 1 if task.scoring == "rank" or client.params.greedy else samples
    arm_demos = table_arms(task, splits, encoder, n_arms, k, seed)
    items = list(splits.validation) + list(splits.test)
    plan = {"format": PLAN_FORMAT, "task": task.name, "answering": task.settings(), "llm": llm,
            "model": client.backend.model_id, "params": asdict(client.params), "samples": samples,
            "plan": plan_id(task, arm_demos, items, samples, client.backend.model_id, client.params),
            "arms": [[asdict(d) for d in demos] for demos in arm_demos], "items": [asdict(it) for it in items]}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(plan, ensure_ascii=False))
    return plan


def read_plan(path: Path) -> dict:
    try:
        plan = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: not a readable plan of table calls ({exc})") from None
    if not isinstance(plan, dict) or plan.get("format") != PLAN_FORMAT:
        raise DataError(f"{path}: not a plan of table calls (written by `bench table build --plan`)")
    return plan


def _item(row: dict) -> Item:
    return Item(**{**row, "options": tuple(row.get("options", ()))})


def plan_parts(plan: dict):
    """A plan's task (configured as recorded), decoding, arms' demonstrations and items, as Python objects."""
    from bench.llm.base import GenerationParams
    from bench.tasks import make_task

    task = make_task(plan["task"]).configure(**plan["answering"])
    params = GenerationParams(**{**plan["params"], "stop": tuple(plan["params"]["stop"])})
    arm_demos = [[_item(d) for d in demos] for demos in plan["arms"]]
    return task, params, arm_demos, [_item(it) for it in plan["items"]]


def answer_plan(plan: dict, client: LLMClient, *, progress: bool = True, check: bool = True) -> dict:
    """Make every call of a plan through `client` (its cache keeps them); what ran, for the table's meta. First,
    unless `check` is off, the batched paths are checked against one call at a time (check_batching)."""
    import platform

    if client.backend.model_id != plan["model"]:
        raise ConfigError(f"the plan was made for model {plan['model']}, this backend is {client.backend.model_id}")
    task, _, arm_demos, items = plan_parts(plan)
    if plan_id(task, arm_demos, items, plan["samples"], plan["model"], client.params) != plan["plan"]:
        raise ConfigError("the plan's calls do not match its id (task, items, arms or decoding changed)")
    checked = check_batching(client, task, arm_demos[0], items) if check else None
    began = time.perf_counter()
    for _ in record(client, task, arm_demos, items, plan["samples"], score=False, progress=progress):
        pass
    seconds = time.perf_counter() - began
    backend = client.backend
    device = getattr(backend, "device", None)
    recorded = {"plan": plan["plan"], "seconds": round(seconds, 1), "host": platform.node(),
                "device": str(device) if device is not None else "n/a"}
    if getattr(device, "type", "") == "cuda":
        import torch
        import transformers

        recorded.update(gpu=torch.cuda.get_device_name(device), torch=torch.__version__,
                        transformers=transformers.__version__)
    if checked is not None:
        recorded["batching_check"] = checked
    if hasattr(backend, "sampler_class") and not client.params.greedy and task.scoring != "rank":
        recorded["sampler"] = backend.sampler_class().__name__
    return recorded


def check_batching(client: LLMClient, task, demos, items, *, tolerance: float = 0.01, new_tokens: int = 4) -> dict:
    """The backend's batched shared-prefix paths, run on a whole arm as the recording runs them, against one call
    at a time on one item of each suffix length (in tokens): log-likelihoods within `tolerance` nats (float noise
    between the paths is ~1e-3 on a CPU), the first `new_tokens` greedy tokens equal (later ones may flip on a
    near-tie). Why: SST-2's table answered on an H200 had every row of one suffix length wrong in the batched path
    (7 of 250 items in each of 95 arms) while the CPU gave the right numbers; nothing noticed until the answers
    were compared. A disagreement is an LLMError before any call is recorded."""
    from bench.llm.base import Backend, GenerationParams

    backend = client.backend
    golds = [[task.reward_reference(it)] for it in items]
    prefix, suffixes, choices, _ = client.classify_keys(task, demos, items,
                                                        words=None if task.scoring == "rank" else golds)
    tokenizer = getattr(backend, "tokenizer", None)
    length = (lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])) if tokenizer else len
    first_of_length = {}
    for i, suffix in enumerate(suffixes):
        first_of_length.setdefault(length(suffix), i)
    probe = sorted(first_of_length.values())
    batched = backend.choice_logliks(prefix, suffixes, choices)
    worst, wrong = 0.0, []
    for i in probe:
        alone = Backend.choice_logliks(backend, prefix, [suffixes[i]], [choices[i]])[0]
        gap = max(abs(a - b) for a, b in zip(batched[i].logliks, alone.logliks))
        worst = max(worst, gap)
        if gap > tolerance:
            wrong.append(i)
    out = {"items": len(probe), "suffix_lengths": len(first_of_length), "max_loglik_gap": worst}
    if task.scoring != "rank":
        greedy = GenerationParams(max_new_tokens=new_tokens, temperature=0.0, stop=tuple(task.stop))
        prefix_g, suffixes_g, _ = client.evaluate_keys(task, demos, items, greedy, [0] * len(items))
        together = backend.generate_with_prefix(prefix_g, suffixes_g, greedy, [0] * len(items))
        differ = [i for i in probe if Backend.generate_with_prefix(backend, prefix_g, [suffixes_g[i]], greedy, [0])[0].text
                  != together[i].text]
        wrong = sorted(set(wrong) | set(differ))
        out["greedy_outputs_differ"] = len(differ)
    if wrong:
        from bench.errors import LLMError

        raise LLMError(f"the backend's batched path disagrees with one call at a time on {len(wrong)} of {len(probe)} "
                       f"probed items (items {wrong[:8]}; largest log-likelihood gap {worst:.3g}): its answers would "
                       "be wrong, so nothing is recorded (--no-check skips this check)")
    return out


def check_recorded(client: LLMClient, task, arm_demos, items, samples: int, recorded: dict) -> None:
    """Before a build from another machine's answers: they are for these calls, and the cache holds every one."""
    from bench.answering import answer_keys

    want = plan_id(task, arm_demos, items, samples, client.backend.model_id, client.params)
    if recorded.get("plan") != want:
        raise ConfigError(f"the answers were recorded for plan {recorded.get('plan')}, this build's is {want} "
                          "(arms, items, model or decoding differ)")
    params = client.params_for(task)
    indices = [s for s in range(samples) for _ in items]
    golds = [task.reward_reference(it) for it in items]
    gold_calls = task.scoring != "rank" or not all(g in task.choice_words() for g in golds)  # as gold_loglik asks
    keys = []
    for demos in arm_demos:
        keys += answer_keys(client, task, demos, list(items) * samples, params, indices)
        if gold_calls:
            keys += client.classify_keys(task, demos, items, words=[[g] for g in golds])[3]
    missing = len(set(keys)) - len(client.cache.get_many(sorted(set(keys))))
    if missing:
        raise ConfigError(f"{missing} of {len(set(keys))} calls of this table are not in the cache "
                          f"{client.cache.path}: it is not the one `table calls` filled")
