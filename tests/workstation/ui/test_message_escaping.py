"""Every Streamlit message in the UI code escapes what it interpolates.

Streamlit renders the text of st.error/warning/info/success/markdown/caption/write/toast (and titles)
as Markdown, so user text there (a label, a dataset or file name, an error that quotes either) could
become a live link or an image. The scan reads the UI's source: the text given to such a call must be
a constant, or built (f-string, +, join, a conditional) only from constants, from `render.md_text` /
`render.md_code`, from numbers (an interpolation with a numeric format spec, `len(...)`, `int(...)`) and
from the expressions allowed below, each of which is a number or a name the code itself chose.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

UI = Path(__file__).resolve().parents[3] / "workstation" / "ui"
MESSAGES = {"error", "warning", "info", "success", "markdown", "caption", "write", "toast", "title", "header",
            "subheader", "exception"}
ESCAPES = {"md_text", "md_code"}
NUMERIC_CALLS = {"len", "int", "float", "round", "sum"}
# contracts.words: a count (formatted as a number) and nouns or verbs the code wrote, when they are constants.
COUNTED_WORDS = {"plural", "agree"}
# By their source text: numbers (ids, counts), the class name of an exception, and text the code or a
# plugin's author wrote (titles, descriptions, statuses, a verdict's reason), never a user.
NUMBERS = {"run_id", "job_id", "new_id", "example_id", "a", "b", "last", "j + 1", "job.id", "run.id", "ex.id",
           "gpu.index", "view[1]", "dataset.examples", "os.getpid()", "total"}
CODE_TEXT = {"type(e).__name__", "DEMO_NOTICE", "fam.name", "fam.title", "fams[name].title", "preset.description",
             "opt.title", "opt.description", "opt.switch", "reason", "plugins.ENTRY_POINT_GROUP",
             "SWITCH_NOTE.get(opt.switch, '')", "STATUS_ICONS.get(run.status, '')", "job.status", "run.status",
             "side", "caveat"}
ALLOWED = NUMBERS | CODE_TEXT


def safe(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) or ast.unparse(node) in ALLOWED:
        return True
    if isinstance(node, ast.JoinedStr):
        return all(safe(v) for v in node.values)
    if isinstance(node, ast.FormattedValue):
        spec = ast.unparse(node.format_spec) if node.format_spec else ""
        numeric = any(c in spec for c in ",.dfg%") and node.conversion == -1
        return numeric or safe(node.value)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        if any(isinstance(side, ast.Constant) and type(side.value) is int for side in (node.left, node.right)):
            return True                      # `position + 1`: arithmetic on a number is a number
        return safe(node.left) and safe(node.right)
    if isinstance(node, ast.IfExp):
        return safe(node.body) and safe(node.orelse)
    if isinstance(node, ast.Call):
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name in ESCAPES or name in NUMERIC_CALLS:
            return True
        if name in COUNTED_WORDS:
            return all(isinstance(arg, ast.Constant) for arg in node.args[1:]) and not node.keywords
        if name == "join" and isinstance(node.func.value, ast.Constant) and len(node.args) == 1:
            items = node.args[0]
            if isinstance(items, (ast.GeneratorExp, ast.ListComp)):
                return safe(items.elt)
            return False
    return ast.unparse(node) in ALLOWED


def message_calls():
    for path in sorted(UI.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MESSAGES
                    and node.args):
                yield f"{path.relative_to(UI)}:{node.lineno}", node.args[0]


def test_the_scan_finds_the_ui_messages():
    assert len(list(message_calls())) > 50


def test_every_interpolation_in_a_ui_message_is_escaped_or_a_number():
    unsafe = [f"{where}: {ast.unparse(arg)[:120]}" for where, arg in message_calls() if not safe(arg)]
    assert not unsafe, "user text reaches Markdown unescaped (wrap it in render.md_text):\n" + "\n".join(unsafe)


@pytest.mark.parametrize("source, ok", [
    ('st.error(f"run {run_id} failed: {render.md_text(str(e))}")', True),
    ('st.error(f"{len(rows):,} rows")', True),
    ('st.error(str(e))', False),
    ('st.error(f"label {label} is bad")', False),
    ('st.success(f"Saved in dataset {name!r}.")', False),
    ('cols[0].caption("in: " + ", ".join(f"{render.md_text(n)} ({ex.id})" for n in names))', True),
    ('cols[0].caption("in: " + ", ".join(names))', False),
    ('st.caption(f"#{position + 1} of {plural(n, \'document\')}")', True),
    ('st.caption(f"{plural(n, noun)}")', False),
    ('st.caption(f"{name + suffix}")', False),
])
def test_the_scan_tells_escaped_from_unescaped(source, ok):
    call = ast.parse(source).body[0].value
    assert safe(call.args[0]) is ok
