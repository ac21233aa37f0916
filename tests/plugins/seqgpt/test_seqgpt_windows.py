"""Long texts: the coverage a prompt keeps, and the window mode (plugins/seqgpt/windows.py).

The layer tests run the windows through a stand-in for the pipeline that "extracts" every run of capital
letters (ORG) of the text it is given, at its offsets in that text, so the right answer for the whole
text is known; the end-to-end tests run the tiny SeqGPT checkpoint."""
from __future__ import annotations

import random
import re

import pytest

from contracts.domain import Document, Result, Span, unread_chars
from plugins.seqgpt import windows
from plugins.seqgpt.pipeline import Pipeline
from plugins.seqgpt.prompting import prompts_for

NAMES = re.compile(r"[A-Z]{3,}")
WORDS = ["river", "stone", "market", "window", "garden", "letter", "silver", "harbour", "candle", "meadow"]


def fake_pipeline(parts: list[Document]):
    """What the per-prompt path returns for each part: the capitalised names of the part, grounded in it."""
    for part in parts:
        spans = [Span("ORG", m.group(), (m.start(), m.end()), grounded=True) for m in NAMES.finditer(part.text)]
        yield Result(part.id, [[s] for s in spans], ["ORG: " + "，".join(s.span for s in spans)], [])


def english(sentences: int, seed: int = 0, end: str = ". ") -> str:
    rng = random.Random(seed)
    out = []
    for i in range(sentences):
        words = [rng.choice(WORDS) for _ in range(rng.randint(6, 12))]
        words.insert(rng.randrange(len(words)), "".join(rng.choice("ABCDEFGHKMNPQRSTVWXZ") for _ in range(5)))
        out.append(" ".join(words))
    return end.join(out) + end.strip()


def expected_names(text: str) -> list[tuple[str, tuple[int, int]]]:
    return [(m.group(), (m.start(), m.end())) for m in NAMES.finditer(text)]


def names_of(result: Result) -> list[tuple[str, tuple[int, int]]]:
    return [(s.span, s.offset) for t in result.tuples for s in t]


def doc(text: str, labels=("ORG",), task="ext") -> Document:
    return Document("d1", text, task=task, labels=list(labels))


# Prompt tokens in these tests, so that a few sentences already overflow (the demo tokenizer's small
# vocabulary makes an English sentence of ten words about 60 tokens); HARD: less than one sentence.
BUDGET, HARD = 300, 80


def test_sentences_end_at_chinese_and_english_punctuation():
    text = "他来了。她走了！真的吗？是的；好。The end. 1.5 stays whole\nnext line"
    starts = windows.sentence_starts(text)
    assert [text[s - 1] for s in starts] == ["。", "！", "？", "；", "。", ".", "\n"]


def test_windows_end_at_sentence_ends_fit_the_budget_and_overlap(tokenizer):
    text = english(60)
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    cut = windows.cut(text, offsets, budget=300, overlap=60)
    assert len(cut) >= 4 and cut[0].start == 0 and cut[-1].end == len(text)
    starts = [o[0] for o in offsets]
    for w, nxt in zip(cut, cut[1:]):
        assert text[:w.end].rstrip().endswith(".")                       # cut at a sentence end
        assert not (w.cut_after or nxt.cut_before)
        assert nxt.start < w.end                                          # overlapping
        assert text[:nxt.start].endswith(".")                              # the overlap starts a sentence
    for w in cut:
        tokens = sum(1 for s in starts if w.start <= s < w.end)
        assert tokens <= 300


def test_a_sentence_longer_than_the_budget_is_cut_hard_with_overlap(tokenizer):
    text = english(12, seed=3, end=" ")                                  # no sentence ends at all
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    cut = windows.cut(text, offsets, budget=50, overlap=12)
    assert len(cut) >= 3
    for w, nxt in zip(cut, cut[1:]):
        assert w.cut_after and nxt.cut_before and nxt.start < w.end


@pytest.mark.parametrize("end", [". ", "。"])
def test_a_text_n_times_the_budget_gives_each_parts_spans_at_their_offsets_once(tokenizer, end):
    text = english(60, seed=1, end=end)
    p = windows.plan(doc(text), tokenizer, "window", max_prompt_tokens=BUDGET, overlap=64)
    assert p.windows is not None and len(p.windows) >= 5
    assert not any(w.cut_after for w in p.windows)                  # every join at a sentence end
    result = next(windows.read([doc(text)], fake_pipeline, tokenizer, "window", max_prompt_tokens=BUDGET,
                               overlap=64))
    assert names_of(result) == expected_names(text)                # none lost, none twice, at whole-text offsets
    assert all(text[a:b] == s for s, (a, b) in names_of(result))
    assert unread_chars(text, result.coverage) == 0
    assert len(result.raw) == len(p.windows)


def test_spans_cut_by_a_hard_window_edge_are_replaced_by_the_whole_span(tokenizer):
    rng = random.Random(7)
    # One long sentence, names everywhere: hard cuts land inside names, whose pieces the stand-in reports.
    text = " ".join(rng.choice(WORDS) if i % 3 else "".join(rng.choice("BCDFGHKMNPRSTVWZ") for _ in range(9))
                    for i in range(300))
    result = next(windows.read([doc(text)], fake_pipeline, tokenizer, "window", max_prompt_tokens=HARD,
                               overlap=24))
    p = windows.plan(doc(text), tokenizer, "window", max_prompt_tokens=HARD, overlap=24)
    assert any(w.cut_after for w in p.windows)
    pieces = [s for part in fake_pipeline(p.parts) for t in part.tuples for s in t]
    assert any(len(s.span) < 9 for s in pieces)                      # the test does exercise cut names
    assert names_of(result) == expected_names(text)


def test_every_window_prompt_fits_and_the_windows_read_everything(tokenizer):
    text = "。".join("北大西洋议会春季会议26日在西班牙巴塞罗那闭幕" for _ in range(30)) + "。"
    document = doc(text, labels=["人物", "地理位置", "组织机构", "时间", "事件", "数量", "职位"])
    p = windows.plan(document, tokenizer, "window", max_prompt_tokens=HARD, overlap=24)
    for part in p.parts:
        assert all(len(tokenizer(q.text)["input_ids"]) <= BUDGET for q in prompts_for(part))
    result = windows.merge(p, list(fake_pipeline(p.parts)))
    assert unread_chars(text, result.coverage) == 0


def test_truncate_mode_reports_the_kept_end_of_the_text(tokenizer):
    text = english(30, seed=2)
    result = next(windows.read([doc(text)], fake_pipeline, tokenizer, "truncate", max_prompt_tokens=BUDGET))
    (start, end), = result.coverage
    assert 0 < start < end == len(text)
    assert unread_chars(text, result.coverage) > 0
    # the kept range is what the last BUDGET tokens of the prompt decode to
    prompt = prompts_for(doc(text))[0].text
    kept = tokenizer.decode(tokenizer(prompt)["input_ids"][-BUDGET:])
    assert kept.lstrip().startswith(text[start:start + 10].lstrip())


def test_classification_in_windows_takes_the_labels_any_window_chose(tokenizer):
    text = english(40, seed=4)

    def choose(parts):
        for i, part in enumerate(parts):
            label = "first" if i == 0 else "later"
            yield Result(part.id, [[Span(label, label, None)]], [label], [])
    result = next(windows.read([doc(text, ["first", "later"], "cls")], choose, tokenizer, "window",
                               max_prompt_tokens=BUDGET, overlap=64))
    assert [t[0].type for t in result.tuples] == ["first", "later"]


def test_the_pipeline_stream_is_run_to_its_end_so_it_can_count_its_tokens(tokenizer):
    # The pipeline counts a run's tokens after its last result; a stream left suspended there recorded 0 tokens
    # (issue #28), depending on whether the last result came before or after the device loop ended.
    ended = []

    def pipeline(parts):
        yield from fake_pipeline(parts)
        ended.append(True)
    results = list(windows.read([doc(english(5)), doc(english(6, seed=3))], pipeline, tokenizer, "truncate"))
    assert len(results) == 2 and ended == [True]


def test_a_sentence_pair_is_never_split(tokenizer):
    text = english(20) + "\t" + english(20, seed=9)
    p = windows.plan(doc(text, ["entailment", "neutral"], "nli"), tokenizer, "window", max_prompt_tokens=BUDGET)
    assert p.windows is None and "sentence pair" in p.notes[0]


def test_an_unknown_mode_is_an_input_error(tokenizer):
    from contracts.domain import InputError
    with pytest.raises(InputError, match="long-text mode"):
        next(windows.read([doc("x")], fake_pipeline, tokenizer, "chunks"))


# ---- the tiny checkpoint, end to end --------------------------------------------------------------------

SHORT = [Document("a", "北大西洋议会春季会议26日在西班牙巴塞罗那闭幕。", task="ext", labels=["人物", "地理位置", "组织机构"]),
         Document("b", "I want my checking balance.", task="cls", labels=["CheckBalance", "TransferMoney"]),
         Document("c", "李老板卖鱼，卖了三十框鱼\t李老板赚翻了", task="nli", labels=["entailment", "contradiction"]),
         Document("d", "   ", task="ext", labels=["LOC"])]
FAST = dict(num_beams=2, max_new_tokens=6)


def test_short_texts_are_identical_in_both_modes_and_to_the_pipeline(loaded):
    truncate = [r.to_json() for r in loaded.extract(SHORT, batch_size=4, **FAST)]
    window = [r.to_json() for r in loaded.extract(SHORT, batch_size=4, long_text="window", **FAST)]
    assert window == truncate
    settings, _ = loaded.settings(FAST)
    plain = [r.to_json() for r in Pipeline(loaded.network, loaded.tokenizer).run(SHORT, 4, settings)]
    assert [{k: v for k, v in r.items() if k != "coverage"} for r in truncate] == plain
    assert [r["coverage"] for r in truncate] == [[[0, len(d.text)]] for d in SHORT[:3]] + [[]]


def test_a_long_text_is_read_whole_in_window_mode_and_cut_in_truncate_mode(loaded):
    text = english(160, seed=5)
    document = Document("long", text, task="ext", labels=["LOC", "PER"])
    assert len(loaded.tokenizer(text)["input_ids"]) > 2 * 1024
    cut, = loaded.extract([document], **FAST)
    whole, = loaded.extract([document], long_text="window", **FAST)
    assert unread_chars(text, cut.coverage) > 0 and any("was cut" in w for w in cut.warnings)
    assert unread_chars(text, whole.coverage) == 0 and not any("was cut" in w for w in whole.warnings)
    assert len(whole.raw) >= 3
    for span in (s for t in whole.tuples for s in t if s.offset is not None):
        assert text[span.offset[0]:span.offset[1]] == span.span
