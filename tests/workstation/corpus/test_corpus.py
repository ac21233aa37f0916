"""`launcher.py corpus` on a local Ray runtime (2 CPUs, started once for the module) with tiny weights.

Every run is compared with `launcher.py extract` on the same files: the `output` column of each row must be
the exact line the CLI writes, and every input entry (a document or a bad line) must be there exactly once.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import ray  # a test dependency: requirements-corpus.txt

from workstation.cli import main as cli_main
from workstation.corpus import runner, runtime
from workstation.settings import ROOT

NER = {"人物": None, "地理位置": None, "组织机构": None}
SENTIMENT = {"正向": None, "负向": None}
TEXTS = ["北大西洋议会春季会议26日在西班牙巴塞罗那闭幕。", "张三在北京见到了李四", "今天天气很好"]


@pytest.fixture(scope="module")
def local_ray():
    started = runner.connect(None, num_cpus=2)
    yield ray.get_runtime_context().gcs_address
    if started:
        runner.disconnect()


def jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in rows),
                    "utf-8")
    return path


def documents(n: int, prefix: str) -> list[dict]:
    """Classification lines (the tiny model gives them spans) between NER lines (mostly empty outputs)."""
    return [{"id": f"{prefix}{i}", "text": f"[CLASSIFY]{TEXTS[i % 3]}{i}", "schema": SENTIMENT} if i % 2 else
            {"id": f"{prefix}{i}", "text": TEXTS[i % 3][: 4 + i % 9], "schema": NER} for i in range(n)]


def mixed_inputs(folder: Path) -> list[Path]:
    folder.mkdir()
    bad = ['{"id": "x", "text": ', {"id": "no-text", "schema": NER}, {"id": "empty-schema", "text": "x", "schema": {}}]
    jsonl(folder / "a.jsonl", documents(5, "a")[:3] + bad[:1] + documents(5, "a")[3:] + bad[1:])
    (folder / "b.csv").write_text("id,text\nc1,张三在北京\nc2,[CLASSIFY]很好看\n", "utf-8")
    (folder / "c.txt").write_text("李四去上海\n\n[CLASSIFY]不好看\n", "utf-8")
    table = pa.Table.from_pylist([{"id": d["id"], "text": d["text"], "schema": json.dumps(d["schema"])}
                                  for d in documents(4, "p")])
    pq.write_table(table, folder / "d.parquet")
    (folder / "e.jsonl").write_text("", "utf-8")                 # an empty shard completes too
    (folder / "f.txt").write_bytes(b"ok\n\xff\xfe broken\n")       # not UTF-8: one error row for the file
    return sorted(folder.iterdir())


def cli_lines(tmp_path: Path, weights: Path, inp: Path, schema=None) -> list[str]:
    out = tmp_path / f"cli-{inp.name}.jsonl"
    args = ["extract", "--model", "rexuninlu", "--weights", str(weights), "--input", str(inp), "--output", str(out),
            "--device", "cpu", "--batch-size", "3", "--skip-invalid", "--no-record", "--optimizations", "none"]
    assert cli_main(args + (["--schema", json.dumps(schema)] if schema else [])) == 0
    return out.read_text("utf-8").splitlines()


def part_rows(out: Path) -> dict[str, list[dict]]:
    """Rows of every part, by input path; parquet and jsonl parts read alike."""
    rows: dict[str, list[dict]] = {}
    for part in sorted(out.glob("part-*")):
        got = pq.read_table(part).to_pylist() if part.suffix == ".parquet" else \
            [json.loads(line) for line in part.read_text("utf-8").splitlines()]
        assert len({r["shard"] for r in got}) <= 1
        for r in got:
            rows.setdefault(r["shard"], []).append(r)
    return rows


def assert_matches_cli(rows: list[dict], expected: list[str]) -> None:
    """The good rows are the CLI's lines, in order; the others say why they failed."""
    good = [r for r in rows if r["error"] is None]
    assert [r["output"] for r in good] == expected
    assert [r["id"] for r in good] == [json.loads(line)["id"] for line in expected]
    assert [r["line"] for r in rows] == sorted(r["line"] for r in rows)


def test_outputs_equal_extract_bad_lines_are_error_rows_and_the_job_is_in_the_store(
        local_ray, tmp_path, rex_tiny, monkeypatch):
    from storage import open_store
    from workstation import settings
    (tmp_path / "settings.toml").write_text(f'[storage]\ndatabase = "{tmp_path / "runs.db"}"\n', "utf-8")
    monkeypatch.setattr(settings, "DEFAULT_PATH", tmp_path / "settings.toml")
    files = mixed_inputs(tmp_path / "in")
    assert cli_main(["corpus", "--model", "rexuninlu", "--weights", str(rex_tiny), "--input", str(tmp_path / "in" / "*"),
                     "--output", str(tmp_path / "out"), "--schema", json.dumps(NER), "--batch-size", "3",
                     "--optimizations", "none"]) == 0
    manifest = json.loads((tmp_path / "out" / "_manifest.json").read_text("utf-8"))
    store = open_store(tmp_path / "runs.db")

    rows = part_rows(tmp_path / "out")
    by_name = {Path(path).name: got for path, got in rows.items()}
    for f in files[:-2]:
        assert_matches_cli(by_name[f.name], cli_lines(tmp_path, rex_tiny, f, NER))
    assert any(json.loads(r["output"])["output"] for r in by_name["a.jsonl"] if r["output"])   # not all empty
    errors = {r["line"]: r["error"] for r in by_name["a.jsonl"] if r["error"]}
    assert list(errors) == [4, 7, 8] and "malformed JSON" in errors[4] and 'missing "text"' in errors[7] \
        and "schema is empty" in errors[8]
    assert "e.jsonl" not in by_name                                     # an empty input: an empty part
    assert [(r["id"], r["line"]) for r in by_name["f.txt"]] == [(None, 0)] and "not UTF-8" in by_name["f.txt"][0]["error"]
    assert manifest["counts"] == {"shards": 6, "shards_done": 6, "documents": 8 + 2 + 2 + 4 + 1, "errors": 4}  # c.txt: a blank line is no document
    assert manifest["status"] == "done"
    assert not list((tmp_path / "out" / "_staging").glob("shard=*"))

    job_status = store.get_job(manifest["store_job"])
    assert (job_status.status, job_status.done, job_status.total) == ("done", 17, 17)
    assert job_status.corpus_output == str((tmp_path / "out").resolve())
    store.close()
    again = runner.run(runner.CorpusJob("rexuninlu", rex_tiny, str(tmp_path / "in" / "*"), tmp_path / "out",
                                        schema=NER, progress=False))   # nothing left to do: no Ray job at all
    assert again["timings"]["runs"] == manifest["timings"]["runs"] and part_rows(tmp_path / "out") == rows


def test_a_worker_killed_mid_run_is_replaced_and_every_document_is_written_once(local_ray, tmp_path, rex_tiny):
    (tmp_path / "in").mkdir()
    files = [jsonl(tmp_path / "in" / f"s{i}.jsonl", documents(12, f"s{i}-")) for i in range(2)]
    job = runner.CorpusJob("rexuninlu", rex_tiny, str(tmp_path / "in" / "*.jsonl"), tmp_path / "out",
                           batch_size=2, progress=False, rows_per_call=2, format="jsonl")
    killed, earlier = [], set(ray.util.list_named_actors())

    def kill_the_worker_after_its_first_batch():
        """The job's progress tally names each worker host:pid; SIGKILL the first that has done a batch."""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            for name in ray.util.list_named_actors():
                if name.startswith(runner.TALLY_PREFIX) and name not in earlier:
                    workers = ray.get(ray.get_actor(name).snapshot.remote())["workers"]
                    busy = [w for w, counts in workers.items() if counts["documents"]]
                    if busy:
                        pid = int(busy[0].rsplit(":", 1)[1])
                        os.kill(pid, signal.SIGKILL)
                        killed.append((pid, workers[busy[0]]["documents"]))
            time.sleep(0.02)

    killer = threading.Thread(target=kill_the_worker_after_its_first_batch, daemon=True)
    killer.start()
    manifest = runner.run(job)
    killer.join()

    assert killed and killed[0][1] < 24, f"no worker was killed mid-run: {killed}"
    assert len(manifest["timings"]["runs"][-1]["workers"]) == 2      # the killed worker and its replacement
    rows = part_rows(tmp_path / "out")
    for f in files:
        assert_matches_cli(rows[str(f.resolve())], cli_lines(tmp_path, rex_tiny, f))
    assert manifest["counts"]["documents"] == 24 and manifest["counts"]["errors"] == 0


def test_a_rerun_after_a_cancel_skips_finished_work_and_writes_each_document_once(local_ray, tmp_path, rex_tiny,
                                                                                 store):
    """Cancel on the Batch page stops the command as Ctrl-C does (KeyboardInterrupt); the rerun finishes."""
    PER_FILE = 40      # with 20 a file, a loaded 2-core machine once finished the run before its watcher's poll
    (tmp_path / "in").mkdir()
    files = [jsonl(tmp_path / "in" / f"s{i}.jsonl", [dict(d, text=d["text"] * 8) for d in documents(PER_FILE, f"s{i}-")])
             for i in range(3)]
    out = tmp_path / "out"
    job = runner.CorpusJob("rexuninlu", rex_tiny, str(tmp_path / "in" / "*.jsonl"), out, batch_size=1,
                           progress=False, rows_per_call=1, store=store.path)
    cancelled = []

    def cancel_once_results_are_staged():
        # Cancel as soon as the job runs: waiting for staged files raced with the end of the run on a
        # loaded machine (the watcher polls every 0.5 s), so the cancel sometimes came after the last poll.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not cancelled:
            jobs = store.list_jobs()
            if jobs and jobs[0].status == "running":
                cancelled.append(store.cancel_job(jobs[0].id))
            time.sleep(0.02)

    canceller = threading.Thread(target=cancel_once_results_are_staged, daemon=True)
    canceller.start()
    with pytest.raises(KeyboardInterrupt):
        runner.run(job)
    canceller.join()
    first = json.loads((out / "_manifest.json").read_text("utf-8"))
    assert first["status"] == "cancelled"
    staged_before = sum(pq.read_metadata(f).num_rows for f in (out / "_staging").rglob("*.parquet"))
    # Usually the cancel lands mid-run; on a loaded 2-core machine it has come after the last row was staged.
    # Either way the run stops as cancelled and the rerun below must write each document once.
    assert staged_before + first["counts"]["documents"] <= 3 * PER_FILE
    stopped = store.get_job(first["store_job"])
    assert stopped.status == "cancelled" and "run the same corpus command again" in stopped.error

    job.rows_per_call, job.batch_size = 8, 4                # how a rerun batches does not change its results
    manifest = runner.run(job)
    rerun = manifest["timings"]["runs"][-1]
    if staged_before < 3 * PER_FILE:        # else every row was staged before the stop: the rerun only finalises
        assert rerun["status"] == "done" and rerun["documents"] <= 3 * PER_FILE - staged_before
    rows = part_rows(out)
    for f in files:
        assert_matches_cli(rows[str(f.resolve())], cli_lines(tmp_path, rex_tiny, f))
    assert manifest["counts"]["documents"] == 3 * PER_FILE
    assert manifest["store_job"] == first["store_job"]
    assert store.get_job(first["store_job"]).status == "done"


def test_a_rerun_that_only_finalises_ends_the_stores_job_done(local_ray, tmp_path, rex_tiny, store, monkeypatch):
    """A stop after every row was staged (a late cancel, or Ctrl-C) leaves nothing to extract: the rerun
    only writes the parts, and the Batch page's job, stopped by that run, must end done all the same."""
    (tmp_path / "in").mkdir()
    files = [jsonl(tmp_path / "in" / f"s{i}.jsonl", documents(3, f"s{i}-")) for i in range(2)]
    out = tmp_path / "out"
    job = runner.CorpusJob("rexuninlu", rex_tiny, str(tmp_path / "in" / "*.jsonl"), out, progress=False,
                           store=store.path)

    def stopped(*args):
        raise KeyboardInterrupt
    monkeypatch.setattr(runner, "_finalise", stopped)
    with pytest.raises(KeyboardInterrupt):
        runner.run(job)
    first = json.loads((out / "_manifest.json").read_text("utf-8"))
    assert first["status"] == "interrupted" and store.get_job(first["store_job"]).status == "cancelled"
    assert sum(pq.read_metadata(f).num_rows for f in (out / "_staging").rglob("*.parquet")) == 6
    monkeypatch.undo()

    manifest = runner.run(job)
    assert manifest["status"] == "done" and manifest["counts"]["documents"] == 6
    stopped_run, parts_run = manifest["timings"]["runs"]               # one entry per run, each document once
    assert (stopped_run["status"], stopped_run["documents"]) == ("interrupted", 6)
    assert (parts_run["status"], parts_run["documents"], parts_run["parts"]) == ("done", 0, 2)
    ended = store.get_job(first["store_job"])
    assert (ended.status, ended.done, ended.total, ended.error) == ("done", 6, 6, None)
    rows = part_rows(out)
    for f in files:
        assert_matches_cli(rows[str(f.resolve())], cli_lines(tmp_path, rex_tiny, f))


def test_a_changed_configuration_is_refused_rather_than_mixed(tmp_path, rex_tiny):
    from contracts.domain import InputError
    jsonl(tmp_path / "a.jsonl", documents(2, "a"))
    job = runner.CorpusJob("rexuninlu", rex_tiny, str(tmp_path / "a.jsonl"), tmp_path / "out", progress=False)
    out = runner.OutputDir(job.output)
    out.write_manifest(runner.reconcile(out, job, runner.plan_shards(job.input, job.output)))
    job.schema = NER
    with pytest.raises(InputError, match="another schema"):
        runner.run(job)


def corpus_args(weights: Path, inp: Path, out: Path, *more: str) -> list[str]:
    return ["corpus", "--model", "rexuninlu", "--weights", str(weights), "--input", str(inp), "--output", str(out),
            "--optimizations", "none", "--no-record", *more]


def test_two_workers_on_two_cpus_finish_and_the_run_counts_each_document_once(local_ray, tmp_path, rex_tiny):
    """Each CPU worker used to reserve every CPU, so the file-reading task never started: 0 documents until
    Ray Data's 30-minute no-progress limit. And the run's documents came from the workers' reports, where a
    batch retried after its worker died counts twice (here a dead worker's report, sent to the tally)."""
    (tmp_path / "in").mkdir()
    files = [jsonl(tmp_path / "in" / f"s{i}.jsonl", documents(4, f"s{i}-")) for i in range(2)]
    earlier, codes = set(ray.util.list_named_actors()), []
    args = corpus_args(rex_tiny, tmp_path / "in" / "*.jsonl", tmp_path / "out", "--workers", "2", "--batch-size", "2",
                       "--format", "jsonl")
    driver = threading.Thread(target=lambda: codes.append(cli_main(args)), daemon=True)
    driver.start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and driver.is_alive():
        tallies = [n for n in ray.util.list_named_actors() if n.startswith(runner.TALLY_PREFIX) and n not in earlier]
        if tallies:
            ray.get(ray.get_actor(tallies[0]).record.remote("batch", "dead-worker:0", "cpu", 5, 0, 0.1))
            break
        time.sleep(0.05)
    driver.join(timeout=240)
    assert codes == [0], "corpus --workers 2 did not finish on a 2-CPU Ray runtime"

    manifest = json.loads((tmp_path / "out" / "_manifest.json").read_text("utf-8"))
    run = manifest["timings"]["runs"][-1]
    assert run["worker_count"] == 2 and "dead-worker:0" in run["workers"]       # its 5 documents were reported
    assert run["documents"] == manifest["counts"]["documents"] == 8
    rows = part_rows(tmp_path / "out")
    for f in files:
        assert_matches_cli(rows[str(f.resolve())], cli_lines(tmp_path, rex_tiny, f))


@pytest.mark.parametrize("cpus, workers, each", [(2, 2, 0.5), (2, 1, 1.0), (2, 4, 0.25), (16, 3, 5.0), (3, 4, 0.5),
                                                 (1, 2, 0.25), (8, 3, 2.0)])
def test_cpu_workers_share_what_reading_and_writing_leave(monkeypatch, cpus, workers, each):
    monkeypatch.setattr(runner.ray, "cluster_resources", lambda: {"CPU": float(cpus)})
    job = runner.CorpusJob("rexuninlu", Path("w"), "x", Path("o"), workers=workers)
    assert runner.workers_and_gpus(job, local=True) == (workers, 0.0, each)
    assert cpus - workers * each >= min(runner.READING_CPUS, cpus / 2)


def test_a_worker_count_the_machine_cannot_hold_is_refused_with_what_it_can(monkeypatch):
    from contracts.domain import InputError
    monkeypatch.setattr(runner.ray, "cluster_resources", lambda: {"CPU": 2.0, "GPU": 1.0})
    job = runner.CorpusJob("rexuninlu", Path("w"), "x", Path("o"), workers=5, gpus_per_worker=0.0)
    with pytest.raises(InputError, match="--workers 5 is more than 2 CPU.* use at most 4"):
        runner.workers_and_gpus(job, local=True)
    job.workers, job.gpus_per_worker = 2, 1.0
    with pytest.raises(InputError, match="need 2 GPU.*this machine has 1"):
        runner.workers_and_gpus(job, local=True)
    job.gpus_per_worker = 0.5                              # two on one GPU: one CPU for reading, half each
    assert runner.workers_and_gpus(job, local=True) == (2, 0.5, 0.5)


def test_a_refused_worker_count_leaves_a_manifest_that_says_so(tmp_path, rex_tiny, monkeypatch):
    from contracts.domain import InputError
    monkeypatch.setattr(runner, "connect", lambda address: False)          # a runtime of 2 CPUs, already there
    monkeypatch.setattr(runner.ray, "cluster_resources", lambda: {"CPU": 2.0})
    jsonl(tmp_path / "a.jsonl", documents(2, "a"))
    job = runner.CorpusJob("rexuninlu", rex_tiny, str(tmp_path / "a.jsonl"), tmp_path / "out", workers=5, progress=False)
    with pytest.raises(InputError, match="use at most 4"):
        runner.run(job)
    manifest = json.loads((tmp_path / "out" / "_manifest.json").read_text("utf-8"))
    assert manifest["status"] == "refused" and manifest["timings"]["runs"] == []


def read_only(folder: Path) -> Path:
    """A folder this process cannot write into: mode 0555, and immutable where we are root (who ignores modes)."""
    folder.mkdir()
    folder.chmod(0o555)
    if os.access(folder, os.W_OK) and subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode:
        folder.chmod(0o755)
        pytest.skip("no way to make a read-only folder here (root, without chattr)")
    return folder


@pytest.mark.parametrize("where", ["a file", "a folder inside a file", "a read-only folder"])
def test_an_output_that_cannot_be_a_writable_folder_is_one_line_and_exit_2(tmp_path, rex_tiny, capsys, where):
    jsonl(tmp_path / "a.jsonl", documents(2, "a"))
    (tmp_path / "notes.txt").write_text("keep me", "utf-8")
    output = {"a file": lambda: tmp_path / "notes.txt", "a folder inside a file": lambda: tmp_path / "notes.txt" / "out",
              "a read-only folder": lambda: read_only(tmp_path / "ro")}[where]()
    try:
        code = cli_main(corpus_args(rex_tiny, tmp_path / "a.jsonl", output))
    finally:
        if where == "a read-only folder":
            subprocess.run(["chattr", "-i", str(output)], capture_output=True)
            output.chmod(0o755)
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"error: --output {output}") and err.count("\n") == 1, err
    assert (tmp_path / "notes.txt").read_text("utf-8") == "keep me"
    assert where != "a read-only folder" or not list(output.iterdir())


def test_a_glob_that_matches_nothing_creates_no_output_folder(tmp_path, rex_tiny, capsys):
    code = cli_main(corpus_args(rex_tiny, tmp_path / "*.jsonl", tmp_path / "out"))
    assert code == 2 and "matches no file" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_run_killed_before_it_recorded_itself_gets_the_documents_no_other_run_counted():
    manifest = {"timings": {"runs": [{"status": "interrupted", "documents": 3},
                                     {"status": "running", "started_at": "t"}]}}
    runner.account_for_killed_runs(manifest, present=10)
    assert [(r["status"], r["documents"]) for r in manifest["timings"]["runs"]] == [("interrupted", 3), ("killed", 7)]


# ---- the local Ray runtime ends with its driver ------------------------------------------------------------

CLI = "import sys; from workstation.cli import main; sys.exit(main())"


def start_driver(code: str, args: list[str], log: Path) -> tuple[subprocess.Popen, dict]:
    """`python -c CODE ARGS` in a process of its own, once it has started a local Ray runtime; (it, the note)."""
    with open(log, "wb") as f:
        driver = subprocess.Popen([sys.executable, "-c", code, *args], cwd=ROOT, stdout=f, stderr=subprocess.STDOUT,
                                  env={**os.environ, "PYTHONPATH": str(ROOT)})
    note = runtime.note_path(driver.pid)
    assert wait_for(lambda: note.is_file() or driver.poll() is not None, 180) and note.is_file(), \
        f"the driver noted no runtime; its output: {log.read_text('utf-8', 'replace')[-2000:]}"
    return driver, json.loads(note.read_text("utf-8"))


def wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.1)
    return bool(condition())


def agents(session: str) -> list[int]:
    """The raylet's agents (ray::DashboardAgent, ray::RuntimeEnvAgent): they outlived a killed driver."""
    def is_agent(pid: int) -> bool:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
        return cmdline.startswith(b"ray::") and b"Agent" in cmdline
    return [p for p in runtime.session_processes(session) if is_agent(p)]


def manifest_of(out: Path) -> dict | None:
    try:
        return runner.OutputDir(out).read_manifest()
    except Exception:            # noqa: BLE001 - read while the driver replaces it
        return None


def test_a_corpus_driver_killed_with_sigkill_leaves_no_ray_process_and_its_rerun_counts_it(local_ray, tmp_path,
                                                                                          rex_tiny):
    (tmp_path / "in").mkdir()
    for i in range(2):
        jsonl(tmp_path / "in" / f"s{i}.jsonl", documents(6, f"s{i}-"))
    out = tmp_path / "out"
    args = corpus_args(rex_tiny, tmp_path / "in" / "*.jsonl", out, "--batch-size", "1", "--format", "jsonl")
    driver, note = start_driver(CLI, args, tmp_path / "driver.log")
    session = note["session"]
    assert wait_for(lambda: (manifest_of(out) or {}).get("timings", {}).get("runs") and agents(session), 120), \
        "the corpus run did not start"
    driver.kill()
    driver.wait()
    assert wait_for(lambda: not runtime.session_processes(session), 30), \
        f"still running 30 s after the driver was killed: {runtime.session_processes(session)}"

    manifest = runner.run(runner.CorpusJob("rexuninlu", rex_tiny, str(tmp_path / "in" / "*.jsonl"), out,
                                           batch_size=1, format="jsonl", progress=False))
    killed, rerun = manifest["timings"]["runs"]
    assert (killed["status"], rerun["status"]) == ("killed", "done")
    assert killed["documents"] + rerun["documents"] == manifest["counts"]["documents"] == 12


def test_the_next_start_stops_the_ray_processes_of_a_driver_killed_with_its_watchdog(tmp_path):
    code = "import time; from workstation.corpus import runner; runner.connect(None, num_cpus=1); time.sleep(300)"
    driver, note = start_driver(code, [], tmp_path / "driver.log")
    session = note["session"]
    assert wait_for(lambda: agents(session), 60), "the runtime's agents did not start"
    os.kill(note["watchdog"][0], signal.SIGKILL)          # both at once, as a kill of their process groups would
    driver.kill()
    driver.wait()
    assert wait_for(lambda: not runtime._alive(note["watchdog"][0]), 10)
    left = agents(session)
    assert left, "nothing outlived the driver: this test no longer shows anything"

    stopped = runtime.clean_stale()                      # what the next local start does first
    assert set(left) <= set(stopped) and not runtime.session_processes(session)
    assert not runtime.note_path(driver.pid).exists()
