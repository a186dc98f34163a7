"""scripts/study.sh across sessions: published runs are skipped, an unfinished run's finished cells are published to
partial/ and resumed from there by the next session (runs/ and the cache do not survive a session)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Stands in for `python -m bench`: logs its arguments and what --out held when it started; a run finishes
# (writes results.json) only when FINISH is set, as if the session ended before it did otherwise.
STAND_IN = """#!{python}
import json, os, sys
from pathlib import Path
args = sys.argv[3:]
if args[:1] == ["report"]:
    with open(os.environ["CALLS"] + ".reports", "a") as rendered:  # beside the study: a re-render changes nothing
        rendered.write(args[1] + "\\n")
    sys.exit(int(os.environ.get("REPORT_EXIT", "0")))
out = Path(args[args.index("--out") + 1])
with open(os.environ["CALLS"], "a") as log:
    log.write(json.dumps({{"args": args, "held": sorted(p.name for p in out.glob("*")),
                          "published": sorted(p.name for p in Path(os.environ["STUDY"]).glob("*"))}}) + "\\n")
out.mkdir(parents=True, exist_ok=True)
(out / "config.json").write_text("{{}}")
with open(out / "records.jsonl", "a") as records:
    if "--only" in args:  # every test item of each cell asked for
        for method in args[args.index("--only") + 1].split(","):
            for _ in range(int(args[args.index("--n-test") + 1])):
                records.write(json.dumps({{"method": method, "session": os.environ["SESSION"]}}) + "\\n")
    else:
        records.write(json.dumps({{"session": os.environ["SESSION"]}}) + "\\n")
(out / "fits.jsonl").write_text("")
if os.environ.get("FINISH"):
    (out / "results.json").write_text("{{}}")
if os.environ.get("HANG"):  # a long fit: only STUDY_UNTIL's SIGINT ends it, as Ctrl-C ends `python -m bench`
    import time
    try:
        time.sleep(60)
    except KeyboardInterrupt:
        sys.exit(130)
sys.exit(int(os.environ.get("EXIT", "0")))
"""


def _study(tmp_path: Path, session: str, *parts: str, finish: bool = False, **env_vars: str) -> list[dict]:
    stand_in = tmp_path / "python"
    stand_in.write_text(STAND_IN.format(python=sys.executable))
    stand_in.chmod(0o755)
    calls = tmp_path / f"calls-{session}.jsonl"
    env = {**os.environ, "STUDY_PYTHON": str(stand_in), "RUNS": str(tmp_path / f"runs-{session}"),
           "STUDY": str(tmp_path / "study"), "CALLS": str(calls), "SESSION": session, "FINISH": "1" if finish else "",
           **env_vars}
    subprocess.run(["bash", str(ROOT / "scripts" / "study.sh"), *parts], env=env, check=True, timeout=60)
    return [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []


def test_an_unfinished_run_resumes_in_the_next_session_from_its_published_cells(tmp_path):
    study = tmp_path / "study"
    (first,) = _study(tmp_path, "1", "rq1-wmt19:0", "publish")
    assert "--resume" not in first["args"] and first["held"] == [] and "--replay-from" not in first["args"]
    partial = study / "partial" / "rq1-wmt19-seed0"
    assert sorted(p.name for p in partial.iterdir()) == ["config.json", "fits.jsonl", "records.jsonl"]
    assert not (study / "rq1-wmt19-seed0").exists()  # unfinished: not a run folder of the study

    # a new session: no runs/ folder, the partial cells are restored and the run resumes from them
    (second,) = _study(tmp_path, "2", "rq1-wmt19:0", "publish", finish=True)
    assert "--resume" in second["args"]
    # every published folder's records are offered for replay (a fit another run already made is not redone)
    assert second["args"][second["args"].index("--replay-from") + 1] == str(partial)
    assert {"config.json", "records.jsonl", "fits.jsonl"} <= set(second["held"])
    published = study / "rq1-wmt19-seed0"
    rows = [json.loads(line) for line in (published / "records.jsonl").read_text().splitlines()]
    assert rows == [{"session": "1"}, {"session": "2"}]  # the first session's cells are kept
    assert (published / "results.json").exists() and not partial.exists()
    # publish re-rendered the study: once when the run ended, once for the `publish` part
    assert (tmp_path / "calls-2.jsonl.reports").read_text() == f"{study}\n" * 2

    # a third session skips the published run
    assert _study(tmp_path, "3", "rq1-wmt19:0") == []


def test_each_finished_run_is_published_before_the_next_starts(tmp_path):
    first, second = _study(tmp_path, "1", "rq1-wmt19:0,1", finish=True)  # no `publish` part
    assert first["published"] == [] and "rq1-wmt19-seed0" in second["published"]
    assert (tmp_path / "study" / "rq1-wmt19-seed1" / "results.json").exists()
    # a run that does not start (done already) publishes nothing
    assert _study(tmp_path, "2", "rq1-wmt19:0") == [] and not (tmp_path / "calls-2.jsonl.reports").exists()


def test_a_report_that_fails_to_render_neither_stops_the_study_nor_loses_a_run(tmp_path):
    first, second = _study(tmp_path, "1", "rq1-wmt19:0,1", finish=True, REPORT_EXIT="1")
    assert "rq1-wmt19-seed0" in second["published"]  # published, and the next run started
    assert all((tmp_path / "study" / f"rq1-wmt19-seed{seed}" / "results.json").exists() for seed in (0, 1))
    assert (tmp_path / "runs-1" / "times.log").read_text().count("report failed (runs published") == 2


def test_an_unknown_part_is_refused(tmp_path):
    env = {**os.environ, "RUNS": str(tmp_path / "runs"), "STUDY": str(tmp_path / "study")}
    done = subprocess.run(["bash", str(ROOT / "scripts" / "study.sh"), "rq1-mnist"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.strip() == "unknown task in part: rq1-mnist"


def test_study_until_interrupts_the_run_under_way_starts_no_other_and_still_publishes(tmp_path):
    import time

    started = time.monotonic()
    until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3))
    calls = _study(tmp_path, "1", "rq2-wmt19", "sensitivity", "publish", HANG="1", STUDY_UNTIL=until)
    assert time.monotonic() - started < 30  # interrupted at the deadline, not after the 60 s "fit"
    # case-dynamic's sensitivity runs need 10 minutes to start (they go item by item); the LTR one has no single
    # long fit and starts
    assert [call["args"][call["args"].index("--out") + 1].split("/")[-1] for call in calls] == ["sens-wmt19-ltr-all"]
    log = (tmp_path / "study" / "times.log").read_text()
    assert "not started rq2-wmt19-seed0 (STUDY_UNTIL)" in log
    assert "not started sens-wmt19-case-dynamic-5 (its fit needs ~10 min, 0 left)" in log
    assert "stopped sens-wmt19-ltr-all (STUDY_UNTIL)" in log
    assert (tmp_path / "study" / "partial" / "sens-wmt19-ltr-all" / "records.jsonl").exists()  # published to resume


def test_a_run_where_some_selector_failed_counts_as_finished_and_the_study_goes_on(tmp_path):
    calls = _study(tmp_path, "1", "rq1-wmt19:0,1", "publish", finish=True, EXIT="3")
    assert len(calls) == 2
    log = (tmp_path / "study" / "times.log").read_text()
    assert log.count("(some selector failed: its row has the error)") == 2


def test_a_run_that_errors_stops_the_study(tmp_path):
    with pytest.raises(subprocess.CalledProcessError) as failed:
        _study(tmp_path, "1", "rq1-wmt19:0,1", "publish", EXIT="2")
    assert failed.value.returncode == 2
    assert "failed rq1-wmt19-seed0 (exit 2" in (tmp_path / "runs-1" / "times.log").read_text()
    # it is published before the script stops: its finished cells in partial/, the failure in the study's log
    assert (tmp_path / "study" / "partial" / "rq1-wmt19-seed0" / "records.jsonl").exists()
    assert "failed rq1-wmt19-seed0 (exit 2" in (tmp_path / "study" / "times.log").read_text()


def test_study_until_skips_a_run_whose_long_fit_cannot_end_in_time_and_starts_a_shorter_one(tmp_path):
    import time

    until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 30 * 60 + 30))  # 30 min left
    calls = _study(tmp_path, "1", "rq1-aquarat:0", "schedule-wmt19:0", finish=True, STUDY_UNTIL=until)
    assert [call["args"][call["args"].index("--out") + 1].split("/")[-1] for call in calls] == ["schedule-wmt19-seed0"]
    log = (tmp_path / "runs-1" / "times.log").read_text()
    assert "not started rq1-aquarat-seed0 (its fit needs ~90 min, 30 left)" in log


def _rq2_minutes() -> dict[str, int]:
    """RQ2_CELLS of scripts/study.sh: each cell and the minutes it takes, in the script's order."""
    text = (ROOT / "scripts" / "study.sh").read_text()
    body = text[text.index("RQ2_CELLS=(") + len("RQ2_CELLS=("):]
    return {cell.rsplit(":", 1)[0]: int(cell.rsplit(":", 1)[1]) for cell in body[:body.index(")")].split()}


def _rq2_cells() -> list[str]:
    return list(_rq2_minutes())


def test_rq2_cells_are_every_selector_of_methods_all_with_both_ltr_data_sources():
    from bench.runner import expand_methods

    cells = _rq2_cells()
    assert len(cells) == len(set(cells)) == 38
    assert set(cells) == set(expand_methods(["all"], ("own", "dearicl")))


def test_rq2_runs_the_cells_that_fit_in_the_time_left_short_ones_together_each_long_one_alone(tmp_path):
    import time

    # an earlier session finished every cell but four (kept in partial/, 200 records each)
    kept = tmp_path / "study" / "partial" / "rq2-wmt19-seed0"
    kept.mkdir(parents=True)
    (kept / "config.json").write_text("{}")
    pending = {"knn", "mmr", "case-dynamic", "udr"}
    (kept / "records.jsonl").write_text("".join(json.dumps({"method": m}) + "\n" for m in _rq2_cells()
                                                 if m not in pending for _ in range(200)))
    (kept / "superseded" / "t").mkdir(parents=True)  # case-dynamic's 5-pull cell was set aside (RQ2_REDO)
    (kept / "superseded" / "t" / "cells.json").write_text('{"case-dynamic": {}}')
    with (kept / "records.jsonl").open("a") as records:  # knn was cut after 150 of its 200 test items
        records.write("".join(json.dumps({"method": "knn"}) + "\n" for _ in range(150)))
    left = _rq2_minutes()["udr"] - 5  # time for the short cells and case-dynamic's start, not for udr's fit
    assert left >= 20
    until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + left * 60 + 30))
    calls = _study(tmp_path, "1", "rq2-wmt19", "publish", finish=True, STUDY_UNTIL=until)
    only = [call["args"][call["args"].index("--only") + 1] for call in calls]
    assert only == ["knn,mmr", "case-dynamic"]  # the short cells together, then case-dynamic on its own
    assert all("--resume" in call["args"] and "--methods" in call["args"] for call in calls)
    # the run's identity is the same in every batch: all methods and every --method-budget, whatever runs now
    def identity(args):  # what --resume compares: the method list and every cap, not --only
        return [(a, b) for a, b in zip(args, args[1:]) if a in ("--methods", "--ltr-data", "--method-budget")]
    assert identity(calls[0]["args"]) == identity(calls[1]["args"])
    assert ("--method-budget", "lucb-static=2000") in identity(calls[0]["args"])
    assert f"not started rq2-wmt19-seed0: udr (needs ~{left + 5} min, {left} left)" in (tmp_path / "study" / "times.log").read_text()
    # published after each batch (and once more by the publish part), so a later cut loses no finished cell
    assert (tmp_path / "calls-1.jsonl.reports").read_text().count("\n") == 3
    published = tmp_path / "study" / "rq2-wmt19-seed0"
    assert (published / "results.json").exists() and not kept.exists()

    # the next session resumes from the published folder and runs the one cell left
    calls = _study(tmp_path, "2", "rq2-wmt19", finish=True)
    assert [call["args"][call["args"].index("--only") + 1] for call in calls] == ["udr"]
    assert {"config.json", "records.jsonl"} <= set(calls[0]["held"])
    assert _study(tmp_path, "3", "rq2-wmt19") == []  # every cell done


def test_study_commit_commits_what_publish_wrote_and_nothing_else(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "elsewhere.txt").write_text("not the study's\n")  # a change beside the study stays uncommitted
    study = repo / "study"
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.org", "STUDY": str(study), "STUDY_COMMIT": "1"}
    _study(tmp_path, "1", "rq1-wmt19:0", "publish", finish=True, **env)
    log = subprocess.run([*git, "log", "--name-only", "--format=%s"], capture_output=True, text=True).stdout
    assert log.startswith("Study: published ") and "end rq1-wmt19-seed0" in log.splitlines()[0]
    assert "study/rq1-wmt19-seed0/results.json" in log and "elsewhere.txt" not in log
    # nothing new to publish: no empty commit
    _study(tmp_path, "2", "publish", **env)
    assert subprocess.run([*git, "rev-list", "--count", "HEAD"], capture_output=True, text=True).stdout.strip() == "1"


def test_a_commit_that_git_refuses_is_logged_and_the_study_goes_on_to_commit_it_later(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.org", "STUDY": str(repo / "study"), "STUDY_COMMIT": "1"}
    lock = repo / ".git" / "index.lock"
    lock.write_text("")  # another git command holds the index for the whole run
    first, second = _study(tmp_path, "1", "rq1-wmt19:0,1", finish=True, **env)
    assert "rq1-wmt19-seed0" in second["published"]  # the next run started after the failed commit
    assert (tmp_path / "runs-1" / "times.log").read_text().count("commit failed (published, not committed)") == 2
    lock.unlink()
    _study(tmp_path, "2", "publish", **env)  # the next publish commits what was published
    files = subprocess.run([*git, "log", "--name-only", "--format="], capture_output=True, text=True).stdout
    assert "study/rq1-wmt19-seed1/results.json" in files and "study/rq1-wmt19-seed0/results.json" in files


def test_a_call_log_over_5_mb_is_published_gzipped_read_back_whole_and_unpacked_to_resume(tmp_path):
    from bench.llm.calllog import read_calls

    runs = tmp_path / "runs-1" / "rq1-wmt19-seed0"
    runs.mkdir(parents=True)
    (runs / "config.json").write_text("{}")
    (runs / "records.jsonl").write_text(json.dumps({"method": "knn"}) + "\n")
    line = json.dumps({"method": "case-static", "task": "wmt19", "phase": "selection", "key": "k" * 400})
    (runs / "calls.jsonl").write_text((line + "\n") * 12000)  # ~5.3 MB
    study = tmp_path / "study"
    (study / "partial" / "rq1-wmt19-seed0").mkdir(parents=True)
    (study / "partial" / "rq1-wmt19-seed0" / "calls.jsonl").write_text(line + "\n")  # an earlier, smaller copy
    _study(tmp_path, "1", "publish")
    kept = study / "partial" / "rq1-wmt19-seed0"
    assert not (kept / "calls.jsonl").exists()  # the stale plain copy is gone: one log, not two
    assert (kept / "calls.jsonl.gz").stat().st_size < 500_000
    assert len(list(read_calls(kept / "calls.jsonl"))) == 12000  # the reports read it as before
    # the next session restores it unpacked, so that the run appends to the whole log
    (first,) = _study(tmp_path, "2", "rq1-wmt19:0")
    assert "calls.jsonl" in first["held"] and "calls.jsonl.gz" not in first["held"]
    assert len((tmp_path / "runs-2" / "rq1-wmt19-seed0" / "calls.jsonl").read_text().splitlines()) == 12000


def _rq2_left(tmp_path: Path, pending: set[str]) -> None:
    """An earlier session finished every RQ2 cell but `pending` (kept in partial/, 200 records each)."""
    kept = tmp_path / "study" / "partial" / "rq2-wmt19-seed0"
    kept.mkdir(parents=True)
    (kept / "config.json").write_text("{}")
    (kept / "records.jsonl").write_text("".join(json.dumps({"method": m}) + "\n" for m in _rq2_cells()
                                                 if m not in pending for _ in range(200)))


@pytest.mark.parametrize("minutes, started", [(12.5, True), (8.5, False)])
def test_case_dynamic_goes_item_by_item_so_it_starts_whenever_ten_minutes_are_left(tmp_path, minutes, started):
    import time

    _rq2_left(tmp_path, {"case-dynamic", "udr"})
    until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + minutes * 60))
    calls = _study(tmp_path, "1", "rq2-wmt19", STUDY_UNTIL=until)  # its 30 minutes do not fit: it starts anyway
    assert [call["args"][call["args"].index("--only") + 1] for call in calls] == (["case-dynamic"] if started else [])
    log = (tmp_path / "runs-1" / "times.log").read_text()
    assert ("needs 10 min to start" in log) is not started and "not started rq2-wmt19-seed0: udr (needs ~" in log
    if started:  # with the cap for every query's own 13 pulls
        assert ("--method-budget", "case-dynamic=26000") in zip(calls[0]["args"], calls[0]["args"][1:])


def test_cells_set_aside_by_a_resume_are_published_and_restored_with_the_run(tmp_path):
    _study(tmp_path, "1", "rq1-wmt19:0")  # unfinished
    aside = tmp_path / "runs-1" / "rq1-wmt19-seed0" / "superseded" / "20261125T110000Z"
    aside.mkdir(parents=True)
    (aside / "records.jsonl").write_text('{"method": "case-dynamic"}\n')
    (aside / "calls.jsonl").write_text("x" * 5_000_001)
    _study(tmp_path, "1", "publish")
    kept = tmp_path / "study" / "partial" / "rq1-wmt19-seed0" / "superseded" / "20261125T110000Z"
    assert (kept / "records.jsonl").read_text() == '{"method": "case-dynamic"}\n'
    assert (kept / "calls.jsonl.gz").exists() and not (kept / "calls.jsonl").exists()  # a large log: gzipped
    (second,) = _study(tmp_path, "2", "rq1-wmt19:0")  # a new session restores the folder with it
    assert "superseded" in second["held"]


@pytest.mark.parametrize("set_aside", [False, True])
def test_a_cell_published_with_old_settings_runs_again_until_a_resume_has_set_it_aside(tmp_path, set_aside):
    _rq2_left(tmp_path, {"udr"})  # case-dynamic has its 200 records, from its 5-pull run
    aside = tmp_path / "study" / "partial" / "rq2-wmt19-seed0" / "superseded" / "20261125T120000Z"
    aside.mkdir(parents=True)  # another cell set aside does not count for case-dynamic
    (aside / "cells.json").write_text(json.dumps({"mmr": {}, **({"case-dynamic": {}} if set_aside else {})}))
    calls = _study(tmp_path, "1", "rq2-wmt19", finish=True)
    only = [call["args"][call["args"].index("--only") + 1] for call in calls]
    assert only == (["udr"] if set_aside else ["case-dynamic", "udr"])
