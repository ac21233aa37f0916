"""The agreement table as shown: a share with nothing to divide by reads "—", as missing values do elsewhere."""
from __future__ import annotations

from contracts.domain import Document, Result, Span
from workstation.quality.agreement import agreement
from workstation.ui.agreement_view import NOTHING, agreement_frame

TEXT = "北大西洋议会春季会议26日在西班牙巴塞罗那闭幕。"


def run(*spans: tuple[str, int, int]) -> list[tuple[Document, Result]]:
    return [(Document("1", TEXT, schema={"地理位置": None, "组织机构": None}),
             Result("1", [[Span(t, TEXT[a:b], (a, b))] for t, a, b in spans]))]


def test_a_share_with_nothing_to_divide_by_shows_a_dash_not_none():
    rows = agreement(run(("组织机构", 0, 6), ("地理位置", 14, 17)), run(("组织机构", 0, 6))).rows()
    place = next(r for r in rows if r["type"] == "地理位置")
    assert place["precision (exact)"] is None                      # B made no 地理位置 mention to measure
    styled = agreement_frame(rows)
    html = styled.to_html()
    assert NOTHING == "—" and html.count("—") == 2               # precision, exact and overlap
    assert "None" not in html and "nan" not in html.lower()
    assert "100.0%" in html and "0.0%" in html
    assert styled.data.loc[styled.data["type"] == "组织机构", "precision (exact)"].item() == 1.0   # numbers kept
