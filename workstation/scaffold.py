"""`launcher.py new-plugin NAME`: a plugin distribution that installs and passes its tests as written.

The skeleton is the smallest honest example of each kind (docs/plugins.md explains every part):

  NAME/pyproject.toml          the entry point in the group ie_workstation; `pip install -e NAME` finds it
  NAME/MODULE/__init__.py      a model that needs no weights (contracts.RuleModel with a contracts.FlatSchema:
                               numbers and capitalised names, by regular expressions), or an export format
                               (the spans of runs as a Markdown table)
  NAME/tests/test_MODULE.py    its tests, with contracts.testing: the model run through the host's checks and
                               through the real host in a child process; the exporter on a run built in memory

Templates are filled with str.replace on a few upper-case markers, so the braces of the code stay as written.
"""
from __future__ import annotations

import re
from pathlib import Path

from contracts.domain import InputError
from workstation import plugins

NAME = re.compile(r"[A-Za-z][A-Za-z0-9._-]*[A-Za-z0-9]")

PYPROJECT = '''\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "DIST"
version = "0.1.0"
description = "An IE Workstation plugin: WHAT."
requires-python = ">=3.11"
dependencies = ["ie-workstation"]          # provides `contracts`, the only part of the workstation a plugin imports

[project.optional-dependencies]
test = ["pytest"]

# The line the workstation looks for: group ie_workstation, a plugin name = the module to import.
[project.entry-points.ie_workstation]
PLUGIN = "MODULE"

[tool.setuptools]
packages = ["MODULE"]
'''

MODEL = '''\
"""DIST: an IE Workstation model plugin that needs no weights (written by `launcher.py new-plugin`).

It finds numbers and capitalised names by regular expressions, selected by a flat schema such as
{"number": null} or {"数字": null}; each span carries the key as the schema wrote it. Put your own rules
in `find` and your types in TYPES; docs/plugins.md explains every part.
"""
import re

from contracts import FlatSchema, ModelFamily, Reads, RuleModel, SchemaType, Span, TaskPreset, hookimpl

__version__ = "0.1.0"

TYPES = FlatSchema([SchemaType("number", ("数字",)), SchemaType("name", ("名称",))], example='{"number": null}')
PATTERNS = {"number": re.compile(r"\\d+(?:\\.\\d+)?"), "name": re.compile(r"\\b[A-Z][a-z]+\\b")}


class CLASS(ModelFamily):
    name = "PLUGIN"
    title = "PLUGIN: numbers and capitalised names (rules, no weights)"
    tasks = {"numbers": TaskPreset("numbers", "Numbers and names", "Alice paid 42.5 euros to Bob.",
                                   {"number": None, "name": None})}
    reads = Reads.SCHEMA
    needs_weights = False
    options = {"min_length": 1}          # extract() options and their defaults: the UI draws a widget for each

    def validate(self, document):
        TYPES.check_shape(document)

    def load(self, weights, device="cpu", dtype="fp32"):
        model = LoadedCLASS(self, weights)
        model.set_dtype(dtype)
        return model


class LoadedCLASS(RuleModel):
    def check_slice(self, documents):
        for document in documents:           # every schema's names, before the first result
            TYPES.select(document)

    def find(self, document, min_length):
        found = []
        for key, selects in TYPES.select(document):
            for type_id in sorted(selects):
                for match in PATTERNS[type_id].finditer(document.text):
                    if len(match.group()) >= min_length:
                        found.append([Span(key, match.group(), match.span())])
        return found


@hookimpl
def register_models(register):
    register(CLASS())
'''

MODEL_TEST = '''\
"""DIST's tests: the model through the host's checks, then through the real workstation in a child process."""
import pytest

from contracts import Document, InputError
from contracts.testing import Workstation, run_model
from MODULE import CLASS


def test_numbers_and_names_are_found_with_their_offsets_under_the_schema_s_own_keys():
    [result] = run_model(CLASS(), [Document("1", "Alice paid 42.5 euros to Bob.", {"数字": None, "name": None})])
    assert [(s.type, s.span, s.offset) for t in result.tuples for s in t] == [
        ("数字", "42.5", (11, 15)), ("name", "Alice", (0, 5)), ("name", "Bob", (25, 28))]


def test_an_option_changes_what_is_found():
    [result] = run_model(CLASS(), [Document("1", "7 and 42", {"number": None})], min_length=2)
    assert [s.span for t in result.tuples for s in t] == ["42"]


def test_an_unknown_type_is_refused_naming_the_known_ones():
    with pytest.raises(InputError, match="unknown type.*'person'.*数字/number"):
        run_model(CLASS(), [Document("1", "text", {"person": None})])


def test_the_workstation_runs_it_and_records_the_run(tmp_path):
    workstation = Workstation(tmp_path, plugins="DIST")
    [line] = workstation.extract("PLUGIN", [{"id": "1", "text": "Bob is 7.", "schema": {"number": None}}])
    assert line["output"] == [[{"type": "number", "span": "7", "offset": [7, 8]}]]
    [(document, result)] = workstation.read_run()
    assert document.text == "Bob is 7." and result.to_json()["output"] == line["output"]
'''

EXPORTER = '''\
"""DIST: an IE Workstation export format (written by `launcher.py new-plugin`).

The spans of any runs as a Markdown table, one row per span. Write your own format in `write_table`;
docs/plugins.md explains every part (offsets checked, counts in the report, cells a spreadsheet reads).
"""
from pathlib import Path

from contracts import Exporter, ExportReport, hookimpl

__version__ = "0.1.0"


def cell(value) -> str:
    """One table cell: no line breaks, and a | inside does not end the cell."""
    return " ".join(str("" if value is None else value).split()).replace("|", "\\\\|")


def write_table(runs, path):
    report = ExportReport()
    rows = ["| run | document | type | span | start | end |", "|---|---|---|---|---|---|"]
    for run in runs:
        for document, result in run.items:
            report.documents += 1
            for spans in result.tuples:
                if any(s.offset is not None and document.text[s.offset[0]:s.offset[1]] != s.span for s in spans):
                    report.invalid += 1                  # offsets that are not a span of the text: left out
                    continue
                for s in spans:
                    start, end = s.offset if s.offset is not None else (None, None)
                    rows.append("| " + " | ".join(cell(v) for v in (run.id, document.id, s.type, s.span, start, end))
                                + " |")
                    report.spans += 1
    Path(path).write_text("\\n".join(rows) + "\\n", encoding="utf-8")
    return report


@hookimpl
def register_exporters(register):
    register(Exporter("PLUGIN", ".md", write_table, "Markdown table, one row per span", "text/markdown"))
'''

EXPORTER_TEST = '''\
"""DIST's tests: the format on a run built in memory, and the workstation listing it."""
import json

from contracts import Document, Result, Span
from contracts.testing import Workstation, recorded_run
from MODULE import write_table


def test_each_placed_span_is_a_row_and_a_misplaced_tuple_is_counted(tmp_path):
    text = "Alice met Bob | Carol"
    run = recorded_run([(Document("1", text), Result("1", [[Span("name", "Alice", (0, 5))],
                                                            [Span("name", "Bob", (0, 3))],
                                                            [Span("name", "Bob | Carol", (10, 21))]]))])
    report = write_table([run], tmp_path / "runs.md")
    assert (report.documents, report.spans, report.invalid) == (1, 2, 1)
    assert (tmp_path / "runs.md").read_text("utf-8").splitlines()[2:] == [
        "| 1 | 1 | name | Alice | 0 | 5 |", "| 1 | 1 | name | Bob \\\\| Carol | 10 | 21 |"]


def test_the_workstation_lists_the_format(tmp_path):
    listed = Workstation(tmp_path, plugins="DIST").command("plugins", "--json").stdout
    [row] = [r for r in map(json.loads, listed.splitlines()) if r["distribution"] == "DIST"]
    assert row["registered"] == {"exporters": ["PLUGIN"]}
'''


def write_plugin(name: str, kind: str, parent: Path) -> Path:
    """Write the distribution `name` (a model or an exporter) into parent/name and return that folder."""
    if not NAME.fullmatch(name):
        raise InputError(f"new-plugin {name!r}: a distribution name is letters, digits, '-', '_' and '.', "
                         "starting with a letter, such as iew-lexicon")
    folder = Path(parent) / name
    if folder.exists():
        raise InputError(f"new-plugin: {folder} already exists; choose another name or --dir")
    module = re.sub(r"[-.]", "_", name).lower()
    plugin = re.sub(r"^iew[-_.]", "", name.lower()) or name.lower()
    taken = plugins.model_families() if kind == "model" else plugins.exporters()
    if plugin in taken:
        raise InputError(f"new-plugin {name!r}: a {kind} named {plugin!r} is already registered; choose another name")
    fill = {"DIST": name, "MODULE": module, "PLUGIN": plugin,
            "CLASS": "".join(p.capitalize() for p in re.split(r"[-_.]", plugin)),
            "WHAT": "a model that needs no weights" if kind == "model" else "an export format"}
    files = {"pyproject.toml": PYPROJECT, f"{module}/__init__.py": MODEL if kind == "model" else EXPORTER,
             f"tests/test_{module}.py": MODEL_TEST if kind == "model" else EXPORTER_TEST}
    for relative, template in files.items():
        for marker, value in fill.items():
            template = template.replace(marker, value)
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(template, encoding="utf-8")
    return folder
