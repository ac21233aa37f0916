import json
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from contracts.domain import InputError
from plugins.rexuninlu.prompting import Prompter, Vocabulary, allowed, legal_paths, validate_schema, validate_text


@pytest.fixture(scope="module")
def prompter(rex_model):
    return rex_model.prompter


def test_types_are_sorted_by_codepoint_in_one_hint(prompter):
    hints = prompter.hints({(): {"组织机构": None, "人物": None, "地理位置": None}})
    assert [h.text for h in hints] == ["[PREFIX][TYPE]人物[TYPE]地理位置[TYPE]组织机构"]
    assert hints[0].type_chars == {((), "人物"): 8, ((), "地理位置"): 16, ((), "组织机构"): 26}


def test_prefixes_pack_into_one_hint_in_discovery_order(prompter):
    p1 = (("组织机构", "中央电视台", (0, 5)),)
    p2 = (("组织机构", "央视", (7, 9)),)
    hints = prompter.hints({p1: {"成立日期(时间)": None}, p2: {"成立日期(时间)": None}})
    assert hints[0].text == ("[PREFIX]组织机构: 中央电视台[TYPE]成立日期(时间)"
                             "[PREFIX]组织机构: 央视[TYPE]成立日期(时间)")


def test_large_schema_splits_into_hints_of_at_most_256_tokens(prompter, rex_tiny):
    from plugins.rexuninlu.loading import load_tokenizer
    tok = load_tokenizer(rex_tiny)
    schema = {f"很长的实体类型名称第{i}号": None for i in range(80)}
    hints = prompter.hints({(): schema})
    assert len(hints) > 1
    assert all(h.text.startswith("[PREFIX]") for h in hints)
    for h in hints:
        assert len(tok(h.text)["input_ids"]) <= 256
    assert sum(len(h.type_chars) for h in hints) == 80


def test_position_ids_restart_per_group_and_type(prompter):
    hint = prompter.hints({(): {"组织机构": None, "人物": None, "地理位置": None}})[0]
    enc = prompter.encode(hint.text, "西班牙巴塞罗那", "no_cls")
    pos, grp, typ = prompter.layout(enc.ids[0])
    assert pos == [0, 1, 2, 3, 4, 2, 3, 4, 5, 6, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]
    assert grp[:2] == [-1, 0] and grp[-9:] == [-1] * 9
    assert typ[1:15] == [0, 1, 1, 1, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3]


def reference_mask(ids, prefix_id, type_id, sep_id):
    """The reference's loop construction (docs/models/rexuninlu.md §2.6), written out for the test."""
    n = len(ids)
    groups = []
    for i, t in enumerate(ids[1:], start=1):
        if t == prefix_id:
            groups.append({"start": i, "types": []})
        elif t == type_id:
            groups[-1]["types"].append([i, i])
        elif t == sep_id:
            break
        elif groups[-1]["types"]:
            groups[-1]["types"][-1][1] = i
    m = [[1] * n for _ in range(n)]
    for gi in groups:
        for gj in groups:
            if gi is not gj:
                for a in range(gi["start"], gi["types"][-1][1] + 1):
                    for b in range(gj["start"], gj["types"][-1][1] + 1):
                        m[a][b] = 0
        for ti in gi["types"]:
            for tj in gi["types"]:
                if ti is not tj:
                    for a in range(ti[0], ti[1] + 1):
                        for b in range(tj[0], tj[1] + 1):
                            m[a][b] = 0
    return m


def test_isolation_mask_closed_form_equals_reference_construction(prompter):
    p1, p2 = (("组织机构", "中央电视台", (0, 5)),), (("人物", "张三", (7, 9)),)
    hint = prompter.hints({p1: {"创始人(人物)": None, "简称": None}, p2: {"毕业院校": None, "国籍": None}})[0]
    ids = prompter.encode(hint.text, "中央电视台由张三创办", "no_cls").ids[0]
    _, grp, typ = prompter.layout(ids)
    closed = [[int(allowed(grp[q], typ[q], grp[k], typ[k])) for k in range(len(ids))] for q in range(len(ids))]
    assert closed == reference_mask(ids, prompter.prefix_id, prompter.type_id, prompter.sep_id)


def test_legal_paths_are_root_to_leaf():
    assert legal_paths({"组织机构": {"创始人(人物)": None, "简称": {}}, "人物": None}) == {
        ("组织机构", "创始人(人物)"), ("组织机构", "简称"), ("人物",)}


@pytest.mark.parametrize("schema, message", [
    (["人物"], "must be a JSON object"),
    ("人物", "must be a JSON object"),
    ({}, "is empty"),
    ({"": None}, "blank"),
    ({"  ": None}, "blank"),
    ({"人物": {"": None}}, "blank"),
    ({"人物": ["x"]}, "must be a JSON object"),
    ({"[TYPE]人物": None}, "reserved token [TYPE]"),
    ({"人物": {"[PREFIX]": None}}, "reserved token [PREFIX]"),
    ({"[CLASSIFY]好": None}, "reserved token [CLASSIFY]"),
    ({"[MULTICLASSIFY]": None}, "reserved token [MULTICLASSIFY]"),
])
def test_bad_schemas_are_rejected_with_the_line(schema, message):
    with pytest.raises(InputError, match=rf"line 7: .*{message.replace('[', '.').replace(']', '.')}"):
        validate_schema(schema, line=7)


@pytest.mark.parametrize("text", ["a[TYPE]b", "[PREFIX]x", "[CLASSIFY][MULTICLASSIFY]x", 5])
def test_bad_texts_are_rejected(text):
    with pytest.raises(InputError, match="line 3"):
        validate_text(text, line=3)


def test_whitespace_only_text_still_runs_a_window_like_the_reference(rex_model):
    from plugins.rexuninlu.pipeline import document_run
    windows = document_run(rex_model.prompter, "\t\t", {"人物": None}).send(None)
    assert len(windows) == 1 and windows[0].ids[-2:] == [rex_model.prompter.sep_id] * 2



def test_sep_inside_a_hint_follows_the_reference_segment_layout(prompter):
    # Schema key "a[SEP]b": the reference sends the [SEP] and the tokens after it (until the next
    # [TYPE]) to the text segment, lists positions segment by segment, and blanks index ranges.
    a, b, c, t1, t2 = (prompter.vocabulary.rust.token_to_id(x) for x in "甲乙丙丁戊")
    cls, pre, typ, sep = prompter.cls_id, prompter.prefix_id, prompter.type_id, prompter.sep_id
    ids = [cls, pre, typ, a, sep, b, typ, c, sep, t1, t2, sep]
    pos, grp, types = prompter.layout(ids)
    assert pos == [0, 1, 2, 3, 2, 3, 4, 5, 6, 7, 8, 9]
    assert grp == [-1, 0, 0, 0, 0, 0, 0, 0, -1, -1, -1, -1]
    assert types == [0, 0, 1, 1, 0, 0, 2, 2, 0, 0, 0, 0]


def test_schema_key_holding_sep_runs_through_the_reference_layout(rex_model, monkeypatch):
    from contracts.domain import Document
    calls = []
    original = Prompter.reference_layout
    monkeypatch.setattr(Prompter, "reference_layout", lambda self, ids: calls.append(ids) or original(self, ids))
    result = next(rex_model.extract([Document("1", "张三在北京工作。", {"人物[SEP]地点": None, "组织": None})]))
    assert calls and result.document_id == "1"


VARIED_TEXTS = ["", " ", "\t\n", "Hello world, this is English.", "mixed 中文 and English 123 😀 emoji 🎉",
                "😀" * 300, "\u3000全角\u3000", "e\u0301 combining", "[CLASSIFY]很满意", "x[PREFIX]y[TYPE]z",
                "北大西洋议会春季会议26日在西班牙巴塞罗那闭幕。" * 200]


@pytest.fixture
def tokenizer(rex_tiny):
    from plugins.rexuninlu.loading import load_tokenizer
    return load_tokenizer(rex_tiny)


def transformers_pieces(tok, texts):
    enc = tok(texts, add_special_tokens=False, return_offsets_mapping=True)
    return [(ids, [tuple(o) for o in offs]) for ids, offs in zip(enc["input_ids"], enc["offset_mapping"])]


def test_direct_rust_tokenizing_equals_the_transformers_call(tokenizer):
    p = Prompter(Vocabulary.of(tokenizer))                               # sharing the tokenizer's Rust backend
    expected = transformers_pieces(tokenizer, VARIED_TEXTS)
    tokenizer("a long text to truncate", truncation=True, max_length=3)  # leaves truncation switched on
    assert [p._tokenize(t) for t in VARIED_TEXTS] == expected
    assert [p.token_count(t) for t in VARIED_TEXTS] == [len(tokenizer(t)["input_ids"]) - 1 for t in VARIED_TEXTS]
    p.prefetch(VARIED_TEXTS)
    assert [p.pieces(t) for t in VARIED_TEXTS] == expected


def test_a_pickled_vocabulary_prompts_as_the_tokenizer_does_without_transformers(tokenizer):
    """What a host worker gets (workers.py): its own copy of the Rust backend and the ids, nothing of transformers."""
    copy = pickle.loads(pickle.dumps(Vocabulary.of(tokenizer)))
    assert copy.rust is not tokenizer.backend_tokenizer and "transformers" not in type(copy.rust).__module__
    here, there = Prompter(Vocabulary.of(tokenizer)), Prompter(copy)
    schema = {"人物": None, "地理位置": None, "组织机构": {"创始人(人物)": None}}
    for text in VARIED_TEXTS:
        assert [p.token_count(text) for p in (here, there)] == [len(tokenizer(text)["input_ids"]) - 1] * 2
        assert here.pieces(text) == there.pieces(text)
        hint = here.hints({(): schema})[0].text
        a, b = here.encode(hint, text, "no_cls"), there.encode(hint, text, "no_cls")
        assert (a.n_hint, a.ids, a.offsets) == (b.n_hint, b.ids, b.offsets)


@pytest.mark.parametrize("schema", [{"人物": None, "地理位置": None}, {"正向": None, "负向": None},
                                    {"人物[SEP]地点": None, "组织": None}])
@pytest.mark.parametrize("text", VARIED_TEXTS[1:] + ["[CLASSIFY]" + "这个手机很好用，" * 120])
def test_windows_cut_from_the_hint_layout_equal_layout_of_their_ids(prompter, text, schema):
    from plugins.rexuninlu.pipeline import document_run
    for window in document_run(prompter, text, schema).send(None):
        assert [list(a) for a in (window.positions, window.groups, window.types)] == list(prompter.layout(window.ids))
        assert window.n_hint == window.ids.index(prompter.sep_id) + 1 or "[SEP]" in window.hint.text


CACHED_PROMPTER = """
import json, sys
from pathlib import Path
from plugins.rexuninlu.loading import load_vocabulary
from plugins.rexuninlu.prompting import Prompter
p = Prompter(load_vocabulary(Path(sys.argv[1])))
texts = json.loads(sys.stdin.read())
print(json.dumps(["transformers" in sys.modules, [p.pieces(t) for t in texts], [p.token_count(t) for t in texts]]))
"""


def test_a_second_process_takes_the_tokenizer_from_the_cache_folder_without_transformers(rex_tiny, tokenizer,
                                                                                       tmp_path, monkeypatch):
    """Importing transformers to build the tokenizer was about 2 s of every `extract` (docs/benchmarks.md): the first
    process keeps what it built in the cache folder, and the next loads that, and prompts exactly as the first."""
    from plugins.rexuninlu.loading import kept_tokenizer_at, load_vocabulary
    monkeypatch.setenv("IEW_CACHE_DIR", str(tmp_path))
    built = Prompter(load_vocabulary(rex_tiny))
    [entry] = (tmp_path / "tokenizers").iterdir()

    def second_process() -> list:
        done = subprocess.run([sys.executable, "-c", CACHED_PROMPTER, str(rex_tiny)], input=json.dumps(VARIED_TEXTS),
                              capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parents[3])
        return json.loads(done.stdout)

    imported, pieces, counts = second_process()
    assert not imported
    assert pieces == json.loads(json.dumps([built.pieces(t) for t in VARIED_TEXTS]))
    assert counts == [built.token_count(t) for t in VARIED_TEXTS] == [len(tokenizer(t)["input_ids"]) - 1
                                                                       for t in VARIED_TEXTS]
    entry.write_text('{"tokenizer": "not one"}', "utf-8")                 # a broken entry is built again
    imported, pieces_again, _ = second_process()
    assert imported and pieces_again == pieces and json.loads(entry.read_text("utf-8"))["ids"]["type_id"] == built.type_id
    copy = tmp_path / "other"
    shutil.copytree(rex_tiny, copy)
    (copy / "vocab.txt").write_text((rex_tiny / "vocab.txt").read_text("utf-8") + "extra\n", "utf-8")
    assert kept_tokenizer_at(copy) != kept_tokenizer_at(rex_tiny)       # another vocabulary: another entry
