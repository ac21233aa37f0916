"""The plugin kit's floor: `RuleModel` (a model with no weights and no GPU) and `FlatSchema` (a flat schema
with aliases), exercised by a model written here in a few lines, as a plugin author writes one."""
from __future__ import annotations

import pytest

from contracts import Document, FlatSchema, InputError, ModelFamily, RuleModel, SchemaType, Span

WORDS = FlatSchema([SchemaType("word", ("词",)), SchemaType("number", ("数字",)),
                    SchemaType("token", ("词元",), frozenset({"word", "number"}))], example='{"词": null}')


class Splitter(ModelFamily):
    name, title, tasks, needs_weights = "splitter", "Splits on spaces", {}, False
    options = {"upper": False}

    def validate(self, document):
        WORDS.check_shape(document)

    def load(self, weights, device="cpu", dtype="fp32"):
        return LoadedSplitter(self, weights)


class LoadedSplitter(RuleModel):
    def check_slice(self, documents):
        for document in documents:
            WORDS.select(document)

    def find(self, document, upper):
        found, at = [], 0
        for piece in document.text.split(" "):
            kind = "number" if piece.isdigit() else "word"
            for key, selects in WORDS.select(document):
                if kind in selects:
                    found.append([Span(key, piece.upper() if upper else piece, (at, at + len(piece)))])
            at += len(piece) + 1
        return found


def test_a_rule_model_runs_on_the_cpu_in_fp32_with_nothing_to_switch(tmp_path):
    model = Splitter().load(tmp_path / "nowhere", device="cuda:1")
    assert (model.device, model.is_demo, model.knobs.dtype, model.knobs.attention) == ("cpu", False, "fp32", "none")
    assert (model.attention_backends, model.capabilities, model.attention_kernel()) == ((), frozenset(), "none")
    assert model.weights == tmp_path / "nowhere"
    model.set_dtype("fp32")
    with pytest.raises(InputError, match="splitter computes no floating-point numbers, so dtype 'bf16'"):
        model.set_dtype("bf16")


def test_extract_gives_find_the_option_defaults_and_says_the_whole_text_was_read():
    model = Splitter().load("nowhere")
    docs = [Document("a", "tea 42", {"word": None}), Document("b", "x 7", {"数字": None, "TOKEN": None})]
    seen = []
    results = list(model.extract(docs, on_progress=seen.append))
    assert [[s.to_json() for t in r.tuples for s in t] for r in results] == [
        [{"type": "word", "span": "tea", "offset": [0, 3]}],
        [{"type": "TOKEN", "span": "x", "offset": [0, 1]}, {"type": "数字", "span": "7", "offset": [2, 3]},
         {"type": "TOKEN", "span": "7", "offset": [2, 3]}]]
    assert [r.coverage for r in results] == [[(0, 6)], [(0, 3)]] and seen == [1, 2]
    upper = next(model.extract([docs[0]], upper=True))
    assert upper.tuples[0][0].span == "TEA"


def test_an_undeclared_option_is_refused_naming_what_the_model_takes():
    with pytest.raises(InputError, match=r"splitter has no option\(s\) num_beams; it takes upper=False"):
        next(Splitter().load("nowhere").extract([Document("a", "x", {"word": None})], num_beams=2))


def test_every_schema_of_a_slice_is_checked_before_the_first_result():
    docs = [Document("a", "x", {"word": None}), Document("b", "y", {"person": None, "人物": None}, line=2)]
    results = Splitter().load("nowhere").extract(docs)
    with pytest.raises(InputError, match=r"line 2: unknown type\(s\) 'person', '人物' in the schema of document "
                                         r"'b'; known: 词/word, 数字/number, 词元/token"):
        next(results)


@pytest.mark.parametrize("schema, message", [
    (None, 'no schema: give "schema"'), ({}, "non-empty JSON object of types, such as {\"词\": null}"),
    ({"word": {"x": None}}, "'word' has a nested value: this model reads a flat schema"), ({" ": None}, "not a name"),
])
def test_a_schema_of_the_wrong_shape_is_refused_with_its_line(schema, message):
    with pytest.raises(InputError, match=f"line 4: .*{message}"):
        Splitter().check(Document("d", "text", schema, line=4))


def test_names_match_in_any_case_and_the_first_type_keeps_a_shared_name():
    schema = WORDS.extended([SchemaType("Word"), SchemaType("公司", ("company",))])
    assert schema.find(" WORD ").id == "word" and schema.find("Company").id == "公司"
    assert WORDS.find("company") is None                     # the original is left as it was
    assert schema.select(Document("d", "t", {"词元": None})) == [("词元", frozenset({"word", "number"}))]
