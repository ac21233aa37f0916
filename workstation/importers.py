"""Read gold datasets from files: our gold JSONL, Label Studio JSON exports, doccano JSONL exports.

`parse(data, name)` reads a file into `GoldDraft`s (text + gold tuples) without touching the database;
`prepare` fills in the schema (RexUniNLU) or task + labels (SeqGPT) where a file has none and has the
model family validate every example; `import_dataset` does both and writes all examples in one
transaction — a broken file imports nothing, and the error names the line or task.

Annotation tools store regions (typed spans) and relations between them, not tuples. The reading is
the inverse of `plugins.exporters._place`, so exporting a run and importing the file gives back the
run's tuples:
- a relation head -> tail labelled R becomes the tuple [head, tail typed R]; when the tail region's own
  label is not R (a tool project with entity labels and relation labels), the tail is typed "R(label)",
  the RexUniNLU relation style ("创始人(人物)"), or just R with `relation_style="label"` (event roles);
- a region that heads no relation becomes a one-span tuple, unless its label is only the relation
  label it is the tail of (how our exporter writes relation tails);
- tuples of three or more spans (a schema nested three deep) are exported as relations from the first
  span, so they come back as pairs.
Spans without a position (class labels, ungrounded generations) are not in these formats, except
Label Studio "choices" and doccano classification labels, which become labels without an offset.

Offsets are Python string indices. Some Label Studio versions count UTF-16 code units (an emoji is
two); when a region's stored text does not match the Python slice but does match the UTF-16 one, the
offsets are converted.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contracts.domain import Document, InputError
from contracts.names import Reads
from contracts.words import plural
from workstation.inputs import json_line, json_problem, loads, require_file

FORMATS = ("jsonl", "label-studio", "doccano")
FORMAT_TITLES = {"jsonl": "Gold JSONL (id, text, schema | task + labels, output)",
                 "label-studio": "Label Studio JSON export", "doccano": "doccano JSONL export"}
RELATION_STYLES = ("typed", "label")        # "R(tail label)" | "R"

Validate = Callable[[Document, list], Any]


@dataclass
class GoldDraft:
    """One example as read from a file, before a schema is settled and the model has checked it."""

    doc_id: str
    text: str
    output: list[list[dict[str, Any]]]
    where: str                                # "line 3", "task 2 (id 17)": for error messages
    schema: dict[str, Any] | None = None
    task: str | None = None
    labels: list[str] | None = None
    line: int | None = None


@dataclass
class ParsedDataset:
    format: str
    examples: list[GoldDraft]
    notes: list[str] = field(default_factory=list)     # what a person should know: skipped tasks, predictions used
    annotations_used: int = 0                           # Label Studio: tasks read from annotations / predictions
    predictions_used: int = 0

    def suggested_schema(self) -> dict[str, Any]:
        """A RexUniNLU schema covering every tuple: types nest as the tuples do ({head: {relation: None}})."""
        return schema_from_outputs(e.output for e in self.examples if e.schema is None) or \
            schema_from_outputs(e.output for e in self.examples)

    def suggested_labels(self) -> list[str]:
        return labels_from_outputs(e.output for e in self.examples)

    def suggested_task(self) -> str:
        has_offsets = any(s.get("offset") is not None for e in self.examples for t in e.output for s in t)
        return "ext" if has_offsets or not self.examples else "cls"

    def needs_schema(self) -> bool:
        return any(e.schema is None for e in self.examples)

    def needs_labels(self) -> bool:
        return any(e.labels is None for e in self.examples)

    def summary(self) -> str:
        tuples = sum(len(e.output) for e in self.examples)
        text = f"{plural(len(self.examples), 'example')}, {plural(tuples, 'gold tuple')} ({FORMAT_TITLES[self.format]})"
        if self.predictions_used:
            text += (f"; {self.annotations_used} tasks from annotations, {self.predictions_used} from predictions "
                     "(no annotation)")
        elif self.annotations_used:
            text += "; read from annotations"
        return text


# ---- schema and labels from tuples ------------------------------------------------------------------------

def schema_from_outputs(outputs: Iterable[list]) -> dict[str, Any]:
    """{type: None} per one-span type; a tuple [A, B, C] nests as {A: {B: {C: None}}}."""
    tree: dict[str, Any] = {}
    for output in outputs:
        for tup in output:
            node = tree
            for element in tup:
                node = node.setdefault(element["type"], {})
    return _leaves_to_none(tree)


def _leaves_to_none(tree: dict[str, Any]) -> dict[str, Any]:
    return {k: (_leaves_to_none(v) if v else None) for k, v in tree.items()}


def labels_from_outputs(outputs: Iterable[list]) -> list[str]:
    seen: dict[str, None] = {}
    for output in outputs:
        for tup in output:
            for element in tup:
                seen.setdefault(element["type"], None)
    return list(seen)


def schema_paths(schema: Any) -> set[tuple[str, ...]]:
    """Every type path the schema allows, at any depth: ("人物",), ("人物", "创始人(人物)"), ..."""
    paths: set[tuple[str, ...]] = set()
    stack = [(schema, ())]                  # a loop: a nested function calling itself is a reference cycle
    while stack:
        node, prefix = stack.pop()
        if isinstance(node, dict):
            for key, sub in node.items():
                paths.add((*prefix, key))
                stack.append((sub, (*prefix, key)))
    return paths


# ---- reading files ---------------------------------------------------------------------------------------

def detect_format(text: str, name: str = "") -> str:
    """Label Studio exports are one JSON array (or object); JSONL lines with "output" are ours; the rest doccano."""
    stripped = text.lstrip("\ufeff \t\r\n")
    if stripped.startswith("["):
        return "label-studio"
    first = next((line for line in stripped.splitlines() if line.strip()), "")
    try:
        obj = json.loads(first)
    except json.JSONDecodeError:
        try:
            obj = json.loads(stripped)              # a pretty-printed single Label Studio task
        except json.JSONDecodeError:
            raise InputError(f"{name or 'the file'} is neither JSON nor JSONL: cannot tell its format") from None
        return "label-studio"
    if isinstance(obj, dict) and "output" in obj:
        return "jsonl"
    if isinstance(obj, dict) and isinstance(obj.get("data"), dict):
        return "label-studio"
    return "doccano"


def parse(data: bytes | str, name: str = "", fmt: str | None = None, relation_style: str = "typed") -> ParsedDataset:
    """Read a dataset file (bytes or text) in `fmt`, detected when None. InputError names the line or task."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise InputError(f"{name or 'the file'} is not UTF-8 text (byte {e.start})") from None
    data = data.lstrip("\ufeff")
    if not data.strip():
        raise InputError(f"{name or 'the file'} is empty")
    fmt = fmt or detect_format(data, name)
    if fmt not in FORMATS:
        raise InputError(f"unknown dataset format {fmt!r}; use one of {', '.join(FORMATS)}")
    if relation_style not in RELATION_STYLES:
        raise InputError(f"relation_style must be one of {', '.join(RELATION_STYLES)}")
    reader = {"jsonl": read_jsonl, "label-studio": read_label_studio, "doccano": read_doccano}[fmt]
    parsed = reader(data, relation_style) if fmt != "jsonl" else reader(data)
    if not parsed.examples:
        raise InputError(f"{name or 'the file'} holds no examples" + (f" ({'; '.join(parsed.notes)})" if parsed.notes
                                                                      else ""))
    return parsed


def _lines(text: str) -> Iterable[tuple[int, dict]]:
    # "\n" only: str.splitlines would also break at U+2028/U+0085, which JSON strings may hold.
    for n, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        obj = json_line(raw, n)
        if not isinstance(obj, dict):
            raise InputError(f"each line must be a JSON object, got {type(obj).__name__}", n)
        yield n, obj


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise InputError(f"{where}: the text must be a string, got {type(value).__name__}")
    return value


def _offset(value: Any, text: str, where: str) -> list[int] | None:
    if value is None:
        return None
    if (not isinstance(value, (list, tuple)) or len(value) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in value)):
        raise InputError(f"{where}: an offset is [start, end] (two integers), got {value!r}")
    start, end = value
    if end <= start:
        raise InputError(f"{where}: offset [{start}, {end}] is an empty or reversed span (end must be after start)")
    if not 0 <= start < end <= len(text):
        raise InputError(f"{where}: offset [{start}, {end}] is not inside the text ({plural(len(text), 'character')})")
    return [start, end]


def read_jsonl(text: str) -> ParsedDataset:
    """Our gold format: {"id", "text", "schema", "output"} or {"id", "text", "task", "labels", "output"}."""
    parsed = ParsedDataset("jsonl", [])
    for n, obj in _lines(text):
        where = f"line {n}"
        if "text" not in obj or "output" not in obj:
            raise InputError("each line needs \"text\" and \"output\" (and \"schema\", or \"task\" and \"labels\")", n)
        doc_text = _text(obj["text"], where)
        output = obj["output"]
        if not isinstance(output, list):
            raise InputError("\"output\" must be a list of tuples (lists of {type, span, offset})", n)
        tuples = []
        for t, tup in enumerate(output, start=1):
            if not isinstance(tup, list) or not tup:
                raise InputError(f"output tuple {t} must be a non-empty list of {{type, span, offset}}", n)
            elements = []
            for e in tup:
                if not isinstance(e, dict) or not isinstance(e.get("type"), str) or "span" not in e:
                    raise InputError(f"output tuple {t} has an element without \"type\" and \"span\": {e!r}", n)
                offset = _offset(e.get("offset"), doc_text, f"{where}, output tuple {t}")
                if offset is not None and doc_text[offset[0]:offset[1]] != str(e["span"]):
                    raise InputError(f"output tuple {t}: offset {offset} covers {doc_text[offset[0]:offset[1]]!r}, "
                                     f"not the span {str(e['span'])!r}", n)
                elements.append({"type": e["type"], "span": str(e["span"]), "offset": offset})
            tuples.append(elements)
        labels = obj.get("labels")
        if labels is not None and (not isinstance(labels, list) or not all(isinstance(x, str) for x in labels)):
            raise InputError("\"labels\" must be a list of strings", n)
        schema = obj.get("schema")
        if schema is not None and not isinstance(schema, dict):
            raise InputError("\"schema\" must be a JSON object", n)
        parsed.examples.append(GoldDraft(str(obj.get("id", n)), doc_text, tuples, where, schema,
                                         obj.get("task"), labels, line=n))
    return parsed


@dataclass
class _Region:
    key: Any                                   # the tool's region id
    label: str
    start: int | None
    end: int | None


def _tail_type(relation: str | None, tail_label: str, style: str) -> str:
    if not relation or relation == tail_label:
        return tail_label
    if style == "label" or relation.endswith(f"({tail_label})"):
        return relation
    return f"{relation}({tail_label})"


def _assemble(text: str, regions: list[_Region], links: list[tuple[Any, Any, str | None]], where: str,
              style: str) -> list[list[dict[str, Any]]]:
    """Regions + relations -> tuples (see the module docstring)."""
    by_key: dict[Any, _Region] = {}
    for r in regions:
        by_key.setdefault(r.key, r)
    heads: dict[Any, list[tuple[_Region, str]]] = {}
    role_only: set[Any] = set()
    for head, tail, label in links:
        for end, name in ((head, "from"), (tail, "to")):
            if end not in by_key:
                raise InputError(f"{where}: a relation's {name} region {end!r} is not among the labelled spans")
        t = by_key[tail]
        heads.setdefault(head, []).append((t, _tail_type(label, t.label, style)))
        if not label or label == t.label:
            role_only.add(tail)

    def element(r: _Region, type_name: str) -> dict[str, Any]:
        offset = [r.start, r.end] if r.start is not None else None
        return {"type": type_name, "span": text[r.start:r.end] if offset else r.label, "offset": offset}

    tuples: list[list[dict[str, Any]]] = []
    seen: set[str] = set()
    for r in regions:
        if r.key in heads:
            if r.key in seen:
                continue
            seen.add(r.key)
            for tail, type_name in heads[r.key]:
                tuples.append([element(r, r.label), element(tail, type_name)])
        elif r.key not in role_only:
            tuples.append([element(r, r.label)])
    unique: dict[str, list] = {}
    for tup in tuples:                          # a tool may hold the same span twice
        unique.setdefault(json.dumps(tup, ensure_ascii=False, sort_keys=True), tup)
    return list(unique.values())


def _utf16_index(text: str, units: int) -> int | None:
    """The str index at `units` UTF-16 code units (None if that falls inside a surrogate pair or past the end)."""
    count = 0
    for i, ch in enumerate(text):
        if count == units:
            return i
        count += 2 if ord(ch) > 0xFFFF else 1
    return len(text) if count == units else None


def _ls_span(text: str, value: dict, where: str) -> tuple[int, int]:
    start, end = value.get("start"), value.get("end")
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in (start, end)):
        raise InputError(f"{where}: \"start\" and \"end\" must be integer character offsets, got {start!r}, {end!r}")
    said = value.get("text")
    if isinstance(said, str) and text[start:end] != said:
        a, b = _utf16_index(text, start), _utf16_index(text, end)
        if a is not None and b is not None and text[a:b] == said:
            return a, b                          # offsets counted in UTF-16 code units
        raise InputError(f"{where}: offsets [{start}, {end}) cover {text[start:end]!r} but the region says {said!r}")
    if end <= start:
        raise InputError(f"{where}: offsets [{start}, {end}) are an empty or reversed span (end must be after start)")
    if not 0 <= start < end <= len(text):
        raise InputError(f"{where}: offsets [{start}, {end}) are not inside the text ({plural(len(text), 'character')})")
    return start, end


def read_label_studio(text: str, relation_style: str = "typed") -> ParsedDataset:
    """A Label Studio JSON export: tasks with data.text and annotations[].result (or predictions[].result)."""
    try:
        tasks = loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"not a Label Studio JSON export: {json_problem(e)}") from None
    if isinstance(tasks, dict):
        tasks = [tasks]
    if not isinstance(tasks, list):
        raise InputError("a Label Studio export is a JSON list of tasks")
    parsed = ParsedDataset("label-studio", [])
    skipped, several, ignored = 0, 0, set()
    for n, task in enumerate(tasks, start=1):
        if not isinstance(task, dict):
            raise InputError(f"task {n}: a task is a JSON object, got {type(task).__name__}")
        where = f"task {n}" + (f" (id {task['id']})" if "id" in task else "")
        data = task.get("data")
        if not isinstance(data, dict) or "text" not in data:
            raise InputError(f"{where}: no data.text (this importer reads text tasks: <Text value=\"$text\"/>)")
        doc_text = _text(data["text"], where)
        annotations = [a for a in task.get("annotations") or [] if isinstance(a, dict) and not a.get("was_cancelled")]
        predictions = [p for p in task.get("predictions") or [] if isinstance(p, dict)]
        if annotations:
            chosen, parsed.annotations_used = annotations[0], parsed.annotations_used + 1
            several += len(annotations) > 1
        elif predictions:
            chosen, parsed.predictions_used = predictions[0], parsed.predictions_used + 1
        else:
            skipped += 1
            continue
        result = chosen.get("result")
        if not isinstance(result, list):
            raise InputError(f"{where}: \"result\" must be a list of regions and relations")
        regions, links = [], []
        for k, item in enumerate(result, start=1):
            if not isinstance(item, dict):
                raise InputError(f"{where}, result {k}: a result item is a JSON object")
            kind = item.get("type")
            item_where = f"{where}, result {k}" + (f" (id {item['id']})" if "id" in item else "")
            if kind == "labels":
                value = item.get("value")
                labels = value.get("labels") if isinstance(value, dict) else None
                if not labels or not all(isinstance(x, str) for x in labels):
                    raise InputError(f"{item_where}: a \"labels\" region needs value.labels (a list of names)")
                start, end = _ls_span(doc_text, value, item_where)
                key = item.get("id", f"#{k}")
                regions.append(_Region(key, labels[0], start, end))
                regions += [_Region(f"{key}\0{x}", x, start, end) for x in labels[1:]]   # more labels: more spans
            elif kind == "choices":
                value = item.get("value")
                choices = value.get("choices") if isinstance(value, dict) else None
                if not choices or not all(isinstance(x, str) for x in choices):
                    raise InputError(f"{item_where}: a \"choices\" result needs value.choices (a list of names)")
                regions += [_Region(f"#{k}:{c}", c, None, None) for c in choices]
            elif kind == "relation":
                head, tail = item.get("from_id"), item.get("to_id")
                if head is None or tail is None:
                    raise InputError(f"{item_where}: a relation needs from_id and to_id")
                if item.get("direction") == "left":
                    head, tail = tail, head
                label = (item.get("labels") or [None])[0]
                links.append((head, tail, label))
            else:
                ignored.add(str(kind))
        doc_id = data.get("doc_id", task.get("id", n))
        parsed.examples.append(GoldDraft(str(doc_id), doc_text, _assemble(doc_text, regions, links, where,
                                                                          relation_style), where))
    if parsed.predictions_used:
        parsed.notes.append(f"{parsed.predictions_used} task(s) had no annotation: their predictions were used")
    if several:
        parsed.notes.append(f"{several} task(s) have several annotations: the first of each was used")
    if skipped:
        parsed.notes.append(f"{skipped} task(s) without annotations or predictions were skipped")
    if ignored:
        parsed.notes.append(f"result types not read: {', '.join(sorted(ignored))}")
    return parsed


def read_doccano(text: str, relation_style: str = "typed") -> ParsedDataset:
    """A doccano JSONL export: sequence labelling ("label": [[start, end, "TYPE"], ...]), relations
    ("entities" with start_offset/end_offset/label, "relations" with from_id/to_id/type), or
    classification ("label": ["name", ...])."""
    parsed = ParsedDataset("doccano", [])
    for n, obj in _lines(text):
        where = f"line {n}"
        doc_text = _text(obj.get("text", obj.get("data")), where)
        regions, links = [], []
        if "entities" in obj:
            entities, relations = obj.get("entities") or [], obj.get("relations") or []
            if not isinstance(entities, list) or not isinstance(relations, list):
                raise InputError("\"entities\" and \"relations\" must be lists", n)
            for k, e in enumerate(entities, start=1):
                if not isinstance(e, dict) or not isinstance(e.get("label"), str):
                    raise InputError(f"entity {k} needs a \"label\"", n)
                start, end = _offset([e.get("start_offset"), e.get("end_offset")], doc_text, f"{where}, entity {k}")
                regions.append(_Region(e.get("id", f"#{k}"), e["label"], start, end))
            for k, r in enumerate(relations, start=1):
                if not isinstance(r, dict) or "from_id" not in r or "to_id" not in r:
                    raise InputError(f"relation {k} needs from_id and to_id", n)
                links.append((r["from_id"], r["to_id"], r.get("type")))
        else:
            labels = obj.get("label", obj.get("labels", []))
            if not isinstance(labels, list):
                raise InputError("\"label\" must be a list: [[start, end, \"TYPE\"], ...] or [\"class\", ...]", n)
            for k, item in enumerate(labels, start=1):
                if isinstance(item, str):
                    regions.append(_Region(f"#{k}", item, None, None))
                    continue
                if not isinstance(item, list) or len(item) != 3 or not isinstance(item[2], str):
                    raise InputError(f"label {k} must be [start, end, \"TYPE\"], got {item!r}", n)
                start, end = _offset(item[:2], doc_text, f"{where}, label {k}")
                regions.append(_Region(f"#{k}", item[2], start, end))
        doc_id = obj.get("doc_id", obj.get("id", n))
        parsed.examples.append(GoldDraft(str(doc_id), doc_text, _assemble(doc_text, regions, links, where,
                                                                          relation_style), where, line=n))
    return parsed


# ---- settling the schema, validating, importing -------------------------------------------------------------

@dataclass
class Prepared:
    examples: list[tuple[Document, list]]
    dropped: int = 0                            # tuples whose type path is not in the schema (drop_unknown)


def prepare(parsed: ParsedDataset, validate: Validate, *, schema: dict | None = None, task: str | None = None,
            labels: list[str] | None = None, drop_unknown: bool = False) -> Prepared:
    """Documents + gold outputs: an example keeps its own schema or task + labels; the others take `labels`
    and `task` when given (a label-driven model: SeqGPT), else `schema` (RexUniNLU). Every example is
    validated by the model family; the first failure raises InputError naming its line or task."""
    out = Prepared([])
    for draft in parsed.examples:
        doc = Document(draft.doc_id, draft.text, line=draft.line)
        if draft.schema is not None or (draft.labels is None and labels is None):
            doc.schema = draft.schema if draft.schema is not None else schema
            allowed = schema_paths(doc.schema)
        else:
            doc.task = draft.task or task
            doc.labels = draft.labels if draft.labels is not None else labels
            allowed = {(x,) for x in doc.labels or []}
        output = draft.output
        if drop_unknown:
            kept = [t for t in output if tuple(e["type"] for e in t) in allowed
                    or (doc.labels is not None and all((e["type"],) in allowed for e in t))]
            out.dropped += len(output) - len(kept)
            output = kept
        try:
            gold = validate(doc, [[dict(e) for e in t] for t in output])
        except InputError as e:
            raise InputError(str(e) if draft.line is not None else f"{draft.where}: {e}") from None
        out.examples.append((doc, gold if isinstance(gold, list) else output))
    return out


def label_driven(model: str) -> bool:
    """Does the model take labels (SeqGPT) rather than a schema (RexUniNLU)? The model declares it."""
    from workstation import plugins
    family = plugins.model_families().get(model)
    return family is not None and family.reads == Reads.LABELS


@dataclass
class ImportReport:
    dataset_id: int
    examples: int
    dropped: int
    notes: list[str]

    def message(self) -> str:
        text = f"imported {plural(self.examples, 'example')}"
        if self.dropped:
            text += f"; {self.dropped} extractions outside the schema were left out"
        return text


def family_validator(model: str) -> Validate:
    from workstation import engine  # the engine loads torch: only when a model must judge
    return engine.family(model).validate_gold


def import_dataset(store, source: str | Path | bytes, model: str, dataset: int | str, *, name: str = "",
                   fmt: str | None = None, relation_style: str = "typed", schema: dict | None = None,
                   task: str | None = None, labels: list[str] | None = None, drop_unknown: bool = False,
                   validate: Validate | None = None) -> ImportReport:
    """Read, validate and store a dataset file (a path, or the bytes of an upload) in one transaction.
    Without `schema` (or `labels` for SeqGPT) the one built from the file's labels is used."""
    if isinstance(source, (str, Path)):
        path = Path(source).expanduser()
        require_file(path, "dataset file")
        data, name = path.read_bytes(), name or path.name
    else:
        data = source
    parsed = parse(data, name, fmt, relation_style)
    if labels is not None or (schema is None and label_driven(model)):
        labels = labels if labels is not None else parsed.suggested_labels()
        task = task or parsed.suggested_task()
    elif schema is None:
        schema = parsed.suggested_schema()
    prepared = prepare(parsed, validate or family_validator(model), schema=schema, task=task, labels=labels,
                       drop_unknown=drop_unknown)
    dataset_id, count = store.add_gold_examples(dataset, model, prepared.examples, parsed.format)
    return ImportReport(dataset_id, count, prepared.dropped, parsed.notes)
