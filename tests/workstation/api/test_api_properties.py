"""Property-based (hypothesis): arbitrary JSON values and Unicode (lone surrogates, control characters, huge
numbers, NaN, deep nesting, invalid UTF-8) given to /v1/extract, /v1/jobs and the CLI's line parser. Never
a 5xx, never a traceback in the log, and a refused request leaves the history (runs and jobs) as it was.
Bounded and derandomized: a few seconds on a busy 2-core machine."""
from __future__ import annotations

import io
import json
import logging
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contracts.domain import InputError
from workstation.inputs import parse_documents

ODD = ["\ud800", "\udfff", "\ud83d", "\x00", "\x1b", "\u202e", "\ufeff", "\u2028", "😀", "人", "\r", "\n", '"', "\\"]
text = st.text(st.one_of(st.characters(), st.sampled_from(ODD)), max_size=12)
numbers = st.one_of(st.integers(min_value=-10**40, max_value=10**40), st.floats(allow_nan=True, allow_infinity=True))
scalars = st.one_of(st.none(), st.booleans(), numbers, text)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(text, inner, max_size=3)), max_leaves=8)


class Deep:
    """A value nested `depth` levels deep, kept as a number until it is encoded: neither json.dumps nor
    hypothesis's printer recurse through it."""

    def __init__(self, depth: int, array: bool):
        self.depth, self.array = depth, array

    def json(self) -> str:
        return "[" * self.depth + "1" + "]" * self.depth if self.array else '{"a": ' * self.depth + "1" + "}" * self.depth

    def __repr__(self):
        return f"Deep({self.depth}, array={self.array})"


deep = st.builds(Deep, st.integers(min_value=10, max_value=5000), st.booleans())
field = st.one_of(values, deep, st.sampled_from([{"人物": None}, {"x": {"y": None}}, "rexuninlu", 1, True]))
document = st.fixed_dictionaries({}, optional={"id": field, "text": st.one_of(text, field), "schema": field,
                                               "task": field, "labels": field, "extra": field})
# Near-valid bodies reach the engine and the history: odd text, odd schema keys, odd ids.
odd_text = st.builds(lambda a, odd, b: a + odd + b, text, st.sampled_from(ODD), text)    # one odd char at least
schemas = st.one_of(st.dictionaries(odd_text, st.none(), min_size=1, max_size=3), st.just({"人物": None}))
near_valid = st.fixed_dictionaries({
    "model": st.just("rexuninlu"), "optimizations": st.just([]),
    "documents": st.lists(st.fixed_dictionaries({"text": odd_text, "schema": schemas},
                                                optional={"id": st.one_of(odd_text, numbers, st.booleans())}),
                          min_size=1, max_size=2)})
bodies = st.one_of(
    near_valid, values, deep,
    st.fixed_dictionaries({"model": st.one_of(st.just("rexuninlu"), field),
                           "documents": st.one_of(st.lists(document, min_size=1, max_size=3), field)},
                          optional={"schema": field, "optimizations": st.one_of(st.just([]), field),
                                    "options": field, "batch_size": field, "dtype": field, "device": field}))


def encoded(body, raw_surrogates: bool) -> bytes:
    """JSON bytes as a client might send them: escaped (\\ud800), or with a surrogate as raw (invalid) UTF-8."""
    deep: list[Deep] = []

    def marker(value):
        deep.append(value)
        return f"@@deep{len(deep) - 1}@@"
    text = json.dumps(body, ensure_ascii=not raw_surrogates, default=marker)
    text = re.sub(r'"@@deep(\d+)@@"', lambda m: deep[int(m[1])].json(), text)
    return text.encode("utf-8", "surrogatepass")


def history(client) -> tuple[int, int]:
    """The runs requests made and the jobs they queued (a job's own run comes later, so jobs are not waited
    for between examples: an accepted job finishing must not look like a refused request's doing)."""
    store = client.app.state.api.store
    return store.count_runs("", source="api"), len(store.list_jobs(500))


@pytest.fixture
def client(client):
    yield client
    client.app.state.api.jobs.wait(timeout=120)           # accepted jobs end before the database goes


PROPERTY = settings(max_examples=30, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@PROPERTY
@given(body=bodies, raw_surrogates=st.booleans(), path=st.sampled_from(["/v1/extract", "/v1/jobs"]))
def test_any_json_body_is_answered_below_500_and_a_refusal_changes_no_history(client, caplog, body, raw_surrogates,
                                                                               path):
    caplog.clear()
    before = history(client)
    with caplog.at_level(logging.ERROR):
        got = client.post(path, content=encoded(body, raw_surrogates), headers={"content-type": "application/json"})
    assert got.status_code < 500, got.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    answer = got.json()
    if got.status_code >= 400:
        assert set(answer) == {"error"} and answer["error"]["message"]
        assert history(client) == before


@PROPERTY
@given(line=st.one_of(values, deep, bodies), raw_surrogates=st.booleans(), bom=st.booleans())
def test_the_cli_line_parser_gives_documents_or_a_line_numbered_input_error(line, raw_surrogates, bom):
    from plugins.rexuninlu.family import RexUniNLU
    data = ("\ufeff".encode() if bom else b"") + encoded(line, raw_surrogates) + b"\n"
    try:
        documents, _ = parse_documents(io.BytesIO(data), ".jsonl", "in.jsonl")
        for doc in documents:
            RexUniNLU().check(doc)
            # What the CLI writes (output lines, the history) must be UTF-8 text.
            json.dumps([doc.id, doc.text, doc.schema], ensure_ascii=False).encode("utf-8")
    except InputError as e:
        assert "\n" not in str(e) and (e.line == 1 or "in.jsonl" in str(e)), str(e)


@settings(PROPERTY, max_examples=20)               # an accepted upload runs a job: fewer examples
@given(line=st.one_of(near_valid.map(lambda b: b["documents"][0]), values, deep), schema=st.one_of(schemas, field),
       raw_surrogates=st.booleans(), name=st.sampled_from(["in.jsonl", "in.txt", "in.csv"]))
def test_any_upload_is_answered_below_500_and_a_refusal_changes_no_history(client, caplog, line, schema,
                                                                            raw_surrogates, name):
    caplog.clear()
    before = history(client)
    data = encoded(line, raw_surrogates) + b"\n"
    with caplog.at_level(logging.ERROR):
        got = client.post("/v1/jobs", files={"file": (name, b"text\n" + data if name == "in.csv" else data)},
                          data={"model": "rexuninlu", "schema": encoded(schema, False).decode()},
                          headers={"X-IEW-Request": "1"})
    assert got.status_code < 500, got.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    if got.status_code >= 400:
        assert got.json()["error"]["message"] and history(client) == before
