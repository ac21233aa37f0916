"""How a host worker's Results cross to the run's process: written as JSON once, in the worker, and not parsed again.

Dense outputs hold hundreds of spans per document. Pickling them as Spans costs seconds per 1,000 documents, and the
run's process, which feeds the device, would then build every Span again and write it out as JSON. So a worker writes
each Result's output as its JSON bytes (`Result.output_json`), and the run's process gets a `WrittenResult`: a Result
that holds those bytes, hands them to whoever writes it (the CLI, the API, History, a corpus shard) as they are, and
parses its tuples only when something reads them (the UI, confidence thresholds, the tuple cap).

The bytes go through a file (`spool`), not the pipe: reading a pipe costs the run's process about 0.8 ms per MB (64 KiB
at a time, each chunk copied twice), and 1,000 dense documents make about 193 MB (docs/benchmarks.md). A file is read
in one call per Result. Where no file can be written (a full disk), they go through the pipe.
"""
from __future__ import annotations

import contextlib
import os

from contracts.domain import Result, Span, read_output

# What crosses the pipe for one Result: all but its output (document id, tuple count, raw, warnings, coverage).
Header = tuple[str, int, list[str] | None, list[str], list[tuple[int, int]] | None]


class WrittenResult(Result):
    """A Result whose output arrived as its JSON (UTF-8 bytes): parsed into tuples the first time they are read,
    and from then on a plain Result (setting its tuples, or reading them, lets the bytes go, so they never go stale)."""

    __slots__ = ("_written", "_count", "_tuples")

    @classmethod
    def arrived(cls, header: Header, written: bytes) -> "WrittenResult":
        document_id, count, raw, warnings, coverage = header
        result = cls(document_id, [], raw, warnings, coverage)
        result._tuples, result._written, result._count = None, written, count
        return result

    @property
    def tuples(self) -> list[list[Span]]:
        if self._tuples is None:
            self._tuples, self._written = read_output(self._written), None
        return self._tuples

    @tuples.setter
    def tuples(self, value: list[list[Span]]) -> None:
        self._tuples, self._written = value, None

    @property
    def tuple_count(self) -> int:
        return self._count if self._tuples is None else len(self._tuples)

    def without_empty_spans(self) -> Result:
        # The worker dropped them before it wrote the bytes.
        return self if self._tuples is None else Result.without_empty_spans(self)

    def output_json(self) -> bytes:
        return self._written if self._tuples is None else Result.output_json(self)

    def __reduce__(self):
        # Pickled as it stands (bytes or tuples), without parsing: slots would be read through the tuples property.
        if self._tuples is None:
            return WrittenResult.arrived, (header(self), self._written)
        return Result, (self.document_id, self._tuples, self.raw, self.warnings, self.coverage)


def header(result: Result) -> Header:
    return result.document_id, result.tuple_count, result.raw, result.warnings, result.coverage


def spool(results: list[Result], folder: str, k: int) -> tuple[list[Header], tuple[str, list[int]] | list[bytes]]:
    """In a worker: a group's Results (empty spans already dropped) as they cross to the run's process, their headers
    through the pipe and their outputs' JSON in one file in `folder`, named for this process and group `k`: (headers,
    (path, sizes)). With no folder, or where the file cannot be written, (headers, the JSON of each) for the pipe."""
    headers, outputs = [header(r) for r in results], [r.output_json() for r in results]
    if not folder:
        return headers, outputs
    path = os.path.join(folder, f"{os.getpid()}-{k}")
    try:
        with open(path, "wb") as f:
            f.writelines(outputs)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(path)
        return headers, outputs
    return headers, (path, [len(output) for output in outputs])


def unspool(headers: list[Header], outputs: tuple[str, list[int]] | list[bytes]) -> list[WrittenResult]:
    """spool's other half, in the run's process: the Results, each holding its output's JSON; the file is removed."""
    if isinstance(outputs, tuple):
        path, sizes = outputs
        try:
            with open(path, "rb") as f:
                outputs = [f.read(n) for n in sizes]
        finally:
            with contextlib.suppress(OSError):
                os.unlink(path)
        if [len(o) for o in outputs] != sizes:
            raise RuntimeError(f"a host worker's results file {path} was cut short")
    return [WrittenResult.arrived(h, o) for h, o in zip(headers, outputs)]
