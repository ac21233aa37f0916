"""The batch-job queue in the database: jobs, their documents (job items), claims and progress.

A job survives a kill because each document is a row whose status is its claim: pending -> claimed (a
worker took it) -> done (committed together with its result). A worker commits each slice in one
transaction, so a kill loses at most the slices it had claimed and not committed. Taking over a dead
worker's job puts its claims back to pending, and `complete_items` never touches a done item, so in the
end every document has exactly one result even if two workers once raced on a slice.

Mixed into `storage.repository.Store`, which provides the `_read` / `_write` sessions.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime

from sqlalchemy import func, insert, select, update

from contracts.domain import Document, Result
from storage.records import document_from_json, document_record, document_to_json, job_status, run_header
from storage.tables import DocumentRecord, JobItemRecord, JobRecord, RunRecord, utcnow
from storage.views import CORPUS_OUTPUT, UNFINISHED, JobStatus, NotFound

OwnerIsDead = Callable[[str | None, datetime | None], bool]


class JobQueue:
    # ---- the person's side: create, watch, cancel -----------------------------------------------------

    def create_job(self, documents: Sequence[Document], model: str, weights: str, batch_size: int,
                   optimizations: Sequence[str], options: dict, source_name: str, *, device: str = "auto",
                   dtype: str = "fp32", task: str | None = None, settings_snapshot: dict | None = None) -> int:
        """Queue documents for a background run. The documents are copied into the job (the input snapshot)."""
        if not documents:
            raise ValueError("a batch job needs at least one document")
        now = utcnow()
        with self._write() as s:
            job = JobRecord(created_at=now, updated_at=now, source_name=source_name, model=model, weights=str(weights),
                            device=device, dtype=dtype, task=task, batch_size=int(batch_size),
                            optimizations=list(optimizations), options=dict(options), settings=settings_snapshot,
                            status="queued", total=len(documents), done=0, wall_seconds=0.0, tokens=0)
            s.add(job)
            s.flush()
            s.execute(insert(JobItemRecord), [
                {"job_id": job.id, "position": i, "doc": document_to_json(d), "status": "pending"}
                for i, d in enumerate(documents)])
            return job.id

    def list_jobs(self, limit: int = 50) -> list[JobStatus]:
        with self._read() as s:
            return [job_status(j) for j in s.scalars(select(JobRecord).order_by(JobRecord.id.desc()).limit(limit))]

    def get_job(self, job_id: int) -> JobStatus:
        with self._read() as s:
            return job_status(_job(s, job_id))

    def unfinished_jobs(self) -> list[JobStatus]:
        """Queued or running jobs, oldest first (what `JobRunner.resume_unfinished` looks at)."""
        with self._read() as s:
            query = select(JobRecord).where(JobRecord.status.in_(UNFINISHED)).order_by(JobRecord.id)
            return [job_status(j) for j in s.scalars(query)]

    def requeue_orphans(self, owner_is_dead: OwnerIsDead) -> list[int]:
        """Running jobs whose runner is gone go back to the queue, their claims back to pending: until a runner
        takes one it shows as queued, not as running with frozen progress. Corpus jobs are left to their command."""
        with self._write() as s:
            running = s.scalars(select(JobRecord).where(JobRecord.status == "running").order_by(JobRecord.id))
            orphans = [job for job in running
                       if CORPUS_OUTPUT not in (job.options or {}) and owner_is_dead(job.owner, job.heartbeat_at)]
            for job in orphans:
                _release(s, job.id)
                job.status, job.owner, job.heartbeat_at, job.updated_at = "queued", None, None, utcnow()
            return [job.id for job in orphans]

    def cancel_job(self, job_id: int) -> bool:
        """Stop a queued or running job; its worker stops after the slice in hand. False if already finished."""
        now = utcnow()
        with self._write() as s:
            query = (update(JobRecord).where(JobRecord.id == job_id, JobRecord.status.in_(UNFINISHED))
                     .values(status="cancelled", updated_at=now, finished_at=now))
            return s.execute(query).rowcount > 0

    def requeue_job(self, job_id: int) -> bool:
        """Put a cancelled or failed job back in the queue; the documents already done stay done."""
        with self._write() as s:
            job = _job(s, job_id)
            if job.status not in ("cancelled", "failed") or CORPUS_OUTPUT in (job.options or {}):
                return False                     # a corpus job resumes by running its command again
            _release(s, job_id)
            job.status, job.error, job.owner, job.finished_at, job.updated_at = "queued", None, None, None, utcnow()
            return True

    def job_items_pending(self, job_id: int, limit: int | None = None) -> list[tuple[int, Document]]:
        """(position, document) of items nobody has claimed yet, in input order."""
        query = (select(JobItemRecord).where(JobItemRecord.job_id == job_id, JobItemRecord.status == "pending")
                 .order_by(JobItemRecord.position).limit(limit))
        with self._read() as s:
            return [(it.position, document_from_json(it.doc)) for it in s.scalars(query)]

    def job_results(self, job_id: int) -> list[tuple[Document, Result | None]]:
        """Every document of the job in input order, with its result if done (partial results of a cancelled job)."""
        query = select(JobItemRecord).where(JobItemRecord.job_id == job_id).order_by(JobItemRecord.position)
        with self._read() as s:
            return [(document_from_json(it.doc), Result.from_json(it.result) if it.status == "done" else None)
                    for it in s.scalars(query)]

    # ---- the worker's side: take, claim, complete, finish ------------------------------------------------

    def take_job(self, job_id: int, owner: str, owner_is_dead: OwnerIsDead) -> bool:
        """Become the job's one runner: a queued job, our own, or one whose runner died. Claims of the
        previous runner go back to pending, to be redone."""
        now = utcnow()
        with self._write() as s:
            job = _job(s, job_id)
            takeable = job.status == "queued" or (
                job.status == "running" and (job.owner == owner or owner_is_dead(job.owner, job.heartbeat_at)))
            if not takeable:
                return False
            _release(s, job_id)
            job.status, job.owner, job.heartbeat_at, job.updated_at = "running", owner, now, now
            job.started_at = job.started_at or now
            return True

    def heartbeat(self, job_id: int, owner: str) -> bool:
        """Say the runner is alive. False when the job is no longer ours to run (cancelled, taken over)."""
        now = utcnow()
        with self._write() as s:
            query = (update(JobRecord).where(JobRecord.id == job_id, JobRecord.owner == owner,
                                             JobRecord.status == "running").values(heartbeat_at=now))
            return s.execute(query).rowcount > 0

    def claim_items(self, job_id: int, claimer: str, limit: int,
                    owner: str | None = None) -> list[tuple[int, Document]]:
        """Atomically take the next `limit` pending items (the write lock serialises claimers). Returns nothing
        once the job is not running (or, given `owner`, no longer run by that runner): that is how a cancel
        reaches every worker, in this process or another."""
        now = utcnow()
        with self._write() as s:
            job = _job(s, job_id)
            if job.status != "running" or (owner is not None and job.owner != owner):
                return []
            query = (select(JobItemRecord).where(JobItemRecord.job_id == job_id, JobItemRecord.status == "pending")
                     .order_by(JobItemRecord.position).limit(limit))
            items = list(s.scalars(query))
            for it in items:
                it.status, it.claimed_by, it.claimed_at = "claimed", claimer, now
            return [(it.position, document_from_json(it.doc)) for it in items]

    def release_items(self, job_id: int) -> int:
        """Claimed items back to pending (a runner stopping with work in hand)."""
        with self._write() as s:
            return _release(s, job_id)

    def complete_items(self, job_id: int, completed: Iterable[tuple[int, Result]], *, seconds: float = 0.0,
                       tokens: int = 0, peak_memory_bytes: int | None = None,
                       docs_per_second: float | None = None, stages: dict[str, float] | None = None,
                       backoffs: Sequence[dict] | None = None) -> int:
        """Commit a slice's results and the job's progress in one transaction, with the slice's seconds per
        stage and out-of-memory back-offs added to the job's. Idempotent on position: an item already done
        keeps its first result. Returns how many items became done."""
        by_position = dict(completed)
        now = utcnow()
        with self._write() as s:
            job = _job(s, job_id)
            query = select(JobItemRecord).where(JobItemRecord.job_id == job_id, JobItemRecord.status != "done",
                                                JobItemRecord.position.in_(list(by_position)))
            items = list(s.scalars(query))
            for it in items:
                it.status, it.result, it.claimed_by = "done", by_position[it.position].to_json(), None
            s.flush()
            job.done = s.scalar(select(func.count(JobItemRecord.id)).where(
                JobItemRecord.job_id == job_id, JobItemRecord.status == "done"))
            job.wall_seconds += seconds
            job.tokens += tokens
            if peak_memory_bytes is not None:
                job.peak_memory_bytes = max(job.peak_memory_bytes or 0, peak_memory_bytes)
            if docs_per_second is not None:
                job.docs_per_second = docs_per_second
            if stages or backoffs:
                job.stages = added_stages(job.stages, stages or {}, backoffs or [])
            job.heartbeat_at = job.updated_at = now
            return len(items)

    def fail_job(self, job_id: int, error: str, owner: str | None = None) -> bool:
        """Mark the job failed with a message a person can act on; its claims go back to pending."""
        now = utcnow()
        with self._write() as s:
            job = _job(s, job_id)
            if owner is not None and job.owner != owner:
                return False
            _release(s, job_id)
            job.status, job.error, job.finished_at, job.updated_at = "failed", error, now, now
            return True

    def finish_job(self, job_id: int, owner: str, *, demo: bool, device: str, dtype: str, attention: str,
                   optimizations: dict[str, str]) -> int | None:
        """Record the job's Run (source 'batch') with every result in input order, then mark the job done.
        Written in short transactions: the run's row, its documents in chunks (resuming after the last one
        written, should a kill interrupt it), then the run's finish time and the job's status together.
        Returns the run id; None if the job is not ours or not complete."""
        from contracts.report import RunReport  # the engine imports torch; only the worker needs this

        with self._write() as s:
            job = _job(s, job_id)
            run = s.get(RunRecord, job.run_id) if job.run_id is not None else None
            if run is not None and run.finished_at is not None:
                return run.id
            if job.status != "running" or job.owner != owner:
                return None
            if s.scalar(select(func.count(JobItemRecord.id)).where(JobItemRecord.job_id == job_id,
                                                                   JobItemRecord.status != "done")):
                return None
            if run is None:
                measured = job.stages or {}
                report = RunReport(job.model, job.weights, demo, device, dtype, attention, dict(optimizations),
                                   job.batch_size, dict(job.options), (job.started_at or utcnow()).isoformat(),
                                   documents=job.total, wall_seconds=job.wall_seconds, tokens=job.tokens,
                                   peak_memory_bytes=job.peak_memory_bytes, stages=dict(measured.get("seconds") or {}),
                                   backoffs=list(measured.get("backoffs") or []))
                run = run_header(report, job.total, "batch", job.task, job.settings, label=job.source_name)
                s.add(run)
                s.flush()
                job.run_id = run.id
            run_id = run.id
        while self._copy_chunk(job_id, run_id):
            pass
        with self._write() as s:
            job, run = _job(s, job_id), s.get(RunRecord, run_id)
            if run is None or job.status != "running" or job.owner != owner:
                return None                                  # cancelled or deleted meanwhile: not done
            now = utcnow()
            run.finished_at = now
            job.status, job.finished_at, job.updated_at = "done", now, now
            return run_id

    def _copy_chunk(self, job_id: int, run_id: int) -> bool:
        """Copy the next job items (about CHUNK_CHARS of results) into the run. False when none was left."""
        with self._write() as s:
            last = s.scalar(select(func.max(DocumentRecord.position)).where(DocumentRecord.run_id == run_id))
            length = func.length(JobItemRecord.result) + func.length(JobItemRecord.doc)
            sizes = s.execute(select(JobItemRecord.id, length)
                              .where(JobItemRecord.job_id == job_id,
                                     JobItemRecord.position > (-1 if last is None else last))
                              .order_by(JobItemRecord.position).limit(self.CHUNK_DOCUMENTS)).all()
            if not sizes:
                return False
            ids, total = [], 0
            for item_id, size in sizes:
                if ids and total + (size or 0) > self.CHUNK_CHARS:
                    break
                ids.append(item_id)
                total += size or 0
            items = s.scalars(select(JobItemRecord).where(JobItemRecord.id.in_(ids)).order_by(JobItemRecord.position))
            s.add_all([document_record(run_id, it.position, document_from_json(it.doc), Result.from_json(it.result))
                       for it in items])
            return True

    # ---- corpus jobs: counts only; the results stay in the job's output directory --------------------

    def begin_corpus_job(self, job_id: int | None, source_name: str, output: str, model: str, weights: str, *,
                         owner: str, device: str, dtype: str, batch_size: int, optimizations: Sequence[str],
                         options: dict) -> int:
        """Mark a corpus job running under `owner`: the job of an earlier run of the same output directory
        (`job_id`, when it is still in the database), else a new one. Returns its id."""
        now = utcnow()
        with self._write() as s:
            job = s.get(JobRecord, job_id) if job_id is not None else None
            if job is None or (job.options or {}).get(CORPUS_OUTPUT) != output:
                job = JobRecord(created_at=now, source_name=source_name, model=model, weights=str(weights),
                                device=device, dtype=dtype, batch_size=int(batch_size), optimizations=list(optimizations),
                                options={**options, CORPUS_OUTPUT: output}, total=0, done=0, wall_seconds=0.0, tokens=0)
                s.add(job)
            job.status, job.owner, job.error, job.finished_at = "running", owner, None, None
            job.heartbeat_at = job.updated_at = now
            job.started_at = job.started_at or now
            s.flush()
            return job.id

    def corpus_progress(self, job_id: int, owner: str, *, total: int, done: int, wall_seconds: float,
                        docs_per_second: float | None) -> str:
        """Record a corpus job's counts; returns its status, so the runner sees a cancel from the Batch page."""
        now = utcnow()
        with self._write() as s:
            job = _job(s, job_id)
            if job.status == "running" and job.owner == owner:
                job.total, job.done, job.wall_seconds = int(total), int(done), float(wall_seconds)
                job.docs_per_second = docs_per_second
                job.heartbeat_at = job.updated_at = now
            return job.status

    def end_corpus_job(self, job_id: int, owner: str, status: str, error: str | None = None) -> bool:
        """done | cancelled | failed, with the reason a person needs (how to resume)."""
        now = utcnow()
        with self._write() as s:
            job = _job(s, job_id)
            if job.owner != owner or job.status in ("done", "failed"):
                return False
            if job.status != "cancelled" or status == "done":
                job.status = status
            job.error, job.finished_at, job.updated_at = error, now, now
            return True


MAX_BACKOFFS = 100             # a job that keeps running out of memory: the first ones say enough


def added_stages(total: dict | None, seconds: dict[str, float], backoffs: Sequence[dict]) -> dict:
    """A job's {"seconds", "backoffs"} with one slice's added (a new dict: the JSON column sees the change)."""
    total = total or {}
    summed = dict(total.get("seconds") or {})
    for stage, value in seconds.items():
        summed[stage] = round(summed.get(stage, 0.0) + value, 4)
    return {"seconds": summed, "backoffs": [*(total.get("backoffs") or []), *backoffs][:MAX_BACKOFFS]}


def _job(s, job_id: int) -> JobRecord:
    job = s.get(JobRecord, job_id)
    if job is None:
        raise NotFound(f"job {job_id} is not in the database (deleted?)")
    return job


def _release(s, job_id: int) -> int:
    query = (update(JobItemRecord).where(JobItemRecord.job_id == job_id, JobItemRecord.status == "claimed")
             .values(status="pending", claimed_by=None, claimed_at=None))
    return s.execute(query).rowcount
