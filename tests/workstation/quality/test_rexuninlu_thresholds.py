"""Per-type thresholds on RexUniNLU's own span confidences: tuned on a gold set, applied, recorded.

The gold set is the tiny checkpoint's own output, edited so that the best threshold is known: the
lowest-confidence spans of one type are left out of the gold (wrong answers), and a span the model
did not find is added (a miss), so the tuned threshold must fall between the wrong and the right ones."""
import json

import pytest

from contracts.domain import Document
from plugins.rexuninlu.family import RexUniNLU
from storage import open_store
from workstation import cli, engine
from workstation.quality import thresholds
from workstation.run_config import RunConfig
from workstation.settings import Settings

NER = {"人物": None, "地理位置": None, "组织机构": None, "时间": None, "作品": None}
CHARS = "北大西洋议会春季会议日在西班牙巴塞罗那闭幕中央电视台和中国电视剧制作中心根据古典文学名著摄制的一部古装连续剧"


def documents() -> list[Document]:
    """Short NER texts (one window each, so no span is found twice)."""
    return [Document(str(i), "".join(CHARS[(7 * i + 3 * k) % len(CHARS)] for k in range(60 + 20 * i)), NER)
            for i in range(8)]


def edited_gold(docs, results) -> tuple[list, str, float, float]:
    """(gold outputs, the type edited, the confidence the threshold must be, the highest wrong one).

    The type with the most spans loses its lowest-confidence third from the gold; one missed span is
    added to the first document's gold. Every other type's gold is the model's output unchanged."""
    spans = [(i, s) for i, r in enumerate(results) for [s] in r.tuples]
    by_type: dict[str, list] = {}
    for i, s in spans:
        by_type.setdefault(s.type, []).append((s.confidence, i, s))
    edited = max(by_type, key=lambda t: len(by_type[t]))
    ranked = sorted(by_type[edited], key=lambda x: x[0])
    cut = next(k for k in range(max(1, len(ranked) // 3), len(ranked)) if ranked[k][0] > ranked[k - 1][0])
    wrong = {(i, s.offset) for _, i, s in ranked[:cut]}
    gold = [[[{"type": s.type, "span": s.span, "offset": list(s.offset)}] for [s] in r.tuples
             if not (s.type == edited and (i, s.offset) in wrong)] for i, r in enumerate(results)]
    taken = {tuple(t[0]["offset"]) for t in gold[0] if t[0]["type"] == edited}
    miss = next((0, b) for b in range(1, 20) if (0, b) not in taken)
    gold[0].append([{"type": edited, "span": docs[0].text[miss[0]:miss[1]], "offset": list(miss)}])
    return gold, edited, ranked[cut][0], ranked[cut - 1][0]


@pytest.fixture(scope="module")
def tuned(rex_tiny):
    model = RexUniNLU().load(rex_tiny)
    docs = documents()
    plain = engine.run(model, docs, RunConfig(batch_size=4)).results
    gold, edited, expected, highest_wrong = edited_gold(docs, plain)
    tunings = thresholds.tune([(d, g, r) for d, g, r in zip(docs, gold, plain)])
    return model, docs, plain, tunings, edited, expected, highest_wrong


def test_rexuninlu_spans_all_carry_a_confidence_to_tune_on(tuned):
    _, _, plain, tunings, edited, *_ = tuned
    spans = [s for r in plain for t in r.tuples for s in t]
    assert len(spans) > 15 and all(s.confidence is not None and s.confidence > 0.5 for s in spans)
    assert all(t.unscored == 0 for t in tunings.values())
    assert tunings[edited].threshold is not None


def test_the_tuned_threshold_falls_between_the_wrong_and_the_right_spans(tuned):
    _, _, _, tunings, edited, expected, highest_wrong = tuned
    t = tunings[edited]
    assert t.threshold == expected and expected > highest_wrong
    assert t.precision == 1.0 and t.recall < 1.0                     # the added miss is never found
    assert t.baseline.precision < 1.0 and t.f1 > t.baseline.f1       # keeping everything was worse


def test_applying_the_thresholds_keeps_spans_at_or_above_them_and_only_those(tuned):
    model, docs, plain, tunings, edited, expected, _ = tuned
    chosen = thresholds.chosen(tunings)
    report = engine.run(model, docs, RunConfig(batch_size=4, thresholds=chosen))
    assert report.thresholds == chosen
    for before, after in zip(plain, report.results):
        assert after.tuples == [t for t in before.tuples if all(s.confidence >= chosen[s.type] for s in t)]
    left_out = [s for r in plain for [s] in r.tuples if s.type == edited and s.confidence < expected]
    kept = [s for r in report.results for [s] in r.tuples if s.type == edited]
    assert left_out and all(s.confidence >= expected for s in kept)
    assert any(s.confidence == expected for s in kept)                # the threshold itself is kept


def test_the_cli_applies_saved_rexuninlu_thresholds_and_records_them(tuned, rex_tiny, tmp_path, monkeypatch):
    _, docs, plain, tunings, *_ = tuned
    chosen = thresholds.chosen(tunings)
    db = tmp_path / "runs.db"
    monkeypatch.setattr(cli, "load_settings", lambda: Settings(database=str(db)))
    store = open_store(db)
    store.save_thresholds("rexuninlu", rex_tiny, chosen, {t: tt.to_json() for t, tt in tunings.items()}, "gold")
    store.close()
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text("".join(json.dumps({"id": d.id, "text": d.text}, ensure_ascii=False) + "\n" for d in docs), "utf-8")
    code = cli.main(["extract", "--model", "rexuninlu", "--weights", str(rex_tiny), "--input", str(inp),
                     "--output", str(out), "--schema", json.dumps(NER, ensure_ascii=False), "--device", "cpu",
                     "--thresholds", "saved"])
    assert code == 0
    lines = [json.loads(line) for line in out.read_text("utf-8").splitlines()]
    written = [e for line in lines for t in line["output"] for e in t]
    assert written and all(e["confidence"] >= chosen[e["type"]] for e in written)
    assert len(written) < sum(len(r.tuples) for r in plain)
    store = open_store(db)
    [summary] = store.search_runs()
    assert store.get_run(summary.id).settings["thresholds"] == chosen
    store.close()


def test_no_threshold_at_the_decision_boundary_changes_rexuninlu_output(tuned):
    model, docs, plain, *_ = tuned
    report = engine.run(model, docs, RunConfig(batch_size=4, thresholds=dict.fromkeys(NER, 0.5)))
    assert [r.tuples for r in report.results] == [r.tuples for r in plain]

