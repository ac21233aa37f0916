"""Runs with awkward content for the store and exporter tests: Chinese, emoji, relations, ungrounded spans,
text that looks like a spreadsheet formula."""
from __future__ import annotations

from typing import TYPE_CHECKING

from contracts.domain import Document, Result, Span

if TYPE_CHECKING:
    from contracts.report import RunReport


def make_report(results: list[Result], model: str = "rexuninlu", weights: str = "", started_at: str | None = None,
                wall_seconds: float = 2.0, peak: int | None = None, **kw) -> RunReport:
    from contracts.report import RunReport  # imported late: child processes avoid torch
    return RunReport(model=model, weights=weights, demo=kw.pop("demo", True), device=kw.pop("device", "cpu"),
                     dtype=kw.pop("dtype", "fp32"), attention=kw.pop("attention", "eager"),
                     optimizations=kw.pop("optimizations", {}), batch_size=kw.pop("batch_size", 8),
                     options=kw.pop("options", {}), started_at=started_at or "2026-03-01T10:00:00+00:00",
                     documents=len(results), wall_seconds=wall_seconds, tokens=kw.pop("tokens", 123),
                     peak_memory_bytes=peak, results=results)


def ner_run() -> tuple[list[Document], list[Result]]:
    """Chinese, emoji, a relation tuple, an ungrounded generated span, and formula-looking text."""
    t0 = "张三出生于北京。🙂 他在阿里巴巴工作"
    t1 = "=SUM(A1:A9) +1 -5 @cmd\tTab"
    docs = [Document("d0", t0, {"人物": {"出生地": None}, "组织": None}),
            Document("d1", t1, None, "ext", ["公式", "数字"])]
    results = [
        Result("d0", [[Span("人物", "张三", (0, 2), 0.98), Span("出生地", "北京", (5, 7), 0.91)],
                      [Span("组织", "阿里巴巴", (12, 16), 0.88)]]),
        Result("d1", [[Span("公式", "=SUM(A1:A9)", (0, 11), None, True)],
                      [Span("数字", "-5", (15, 17), None, True), Span("数字", "七", None, None, False)]],
               raw=["公式: =SUM(A1:A9)\n数字: -5; 七"], warnings=["generated span '七' is not in the text"]),
    ]
    assert docs[0].text[12:16] == "阿里巴巴" and docs[1].text[15:17] == "-5"
    return docs, results
