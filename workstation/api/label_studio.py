"""Label Studio's ML-backend protocol, the translation half: a project's label config -> our schemas,
our Results -> Label Studio prediction results (docs/api.md, "Label Studio").

The model behind the backend is `[api] label_studio_model` (`backend_model`): one that reads a schema, as
RexUniNLU does, the first such installed model by default. The config's first <Labels> tag (on a <Text>)
names the entity types: they become a NER schema {label: None}. Its <Relations>, if any, become a second,
relation schema: every label is a subject with every relation as a child ({label: {relation: None}}). A
relation value may carry the object's label in parentheses, RexUniNLU's own hint, e.g. "创始人(人物)".

Entities come from the NER pass as `labels` regions. Relations come from the relation pass: the subject
is a region of its label; the object is a region of the hinted label, or the NER region at the same
characters; an object that is neither is left out (a region must carry one of the project's labels).
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from contracts.domain import InputError, Result
from contracts.model import ModelFamily
from contracts.names import Reads

HINT = re.compile(r"^(?P<relation>.+)\((?P<label>[^()]+)\)$")


@dataclass(frozen=True)
class LabelConfig:
    labels_name: str               # <Labels name=...>: the results' from_name
    text_name: str                 # <Text name=...>: the results' to_name
    text_field: str                # the task data key the text comes from ($text -> "text")
    labels: tuple[str, ...]
    relations: tuple[str, ...]

    def ner_schema(self) -> dict[str, None]:
        return {label: None for label in self.labels}

    def relation_schema(self) -> dict[str, dict[str, None]] | None:
        if not self.relations:
            return None
        return {label: {relation: None for relation in self.relations} for label in self.labels}

    def object_label(self, relation: str) -> str | None:
        hint = HINT.match(relation)
        return hint["label"] if hint and hint["label"] in self.labels else None


def backend_model(configured: str, families: Mapping[str, ModelFamily]) -> str | None:
    """The model the backend runs: `configured` ([api] label_studio_model) when it is installed and reads a schema
    (the backend sends the project's labels as one), else an InputError naming the setting; "" = the first
    installed model that reads a schema, None when there is none (then /ls/predict answers 409)."""
    schema_models = [name for name, family in families.items() if family.reads == Reads.SCHEMA]
    if not configured:
        return schema_models[0] if schema_models else None
    if configured not in families:
        raise InputError(f"settings.toml: [api] label_studio_model = {configured!r} is not an installed model; "
                         f"installed: {', '.join(families) or 'none'}")
    if configured not in schema_models:
        raise InputError(f"settings.toml: [api] label_studio_model = {configured!r} reads "
                         f"{families[configured].reads.fields()}, but the Label Studio backend sends a schema built "
                         f"from the project's labels; use a model that reads a schema: {', '.join(schema_models) or 'none is installed'}")
    return configured


def parse_label_config(xml: str) -> LabelConfig:
    """The parts of a Label Studio labeling config we can pre-annotate; InputError says what is missing."""
    if not isinstance(xml, str) or not xml.strip():
        raise InputError("the Label Studio label config is empty")
    try:
        root = ElementTree.fromstring(xml)
    except ElementTree.ParseError as e:
        raise InputError(f"the Label Studio label config is not valid XML: {e}") from None
    texts = {t.get("name"): t.get("value", "") for t in root.iter("Text") if t.get("name")}
    for tag in root.iter("Labels"):
        target = tag.get("toName", "")
        if tag.get("name") and target in texts:
            labels = tuple(dict.fromkeys(lb.get("value") for lb in tag.iter("Label") if lb.get("value")))
            if not labels:
                raise InputError(f"<Labels name={tag.get('name')!r}> has no <Label value=...> children")
            relations = tuple(dict.fromkeys(r.get("value") for r in root.iter("Relation") if r.get("value")))
            field = texts[target].lstrip("$") or "text"
            return LabelConfig(tag.get("name"), target, field, labels, relations)
    raise InputError("the label config has no <Labels> tag on a <Text> tag: only span labeling (NER, relations) "
                     "can be pre-annotated")


def task_text(task: Any, config: LabelConfig) -> str:
    data = task.get("data") if isinstance(task, dict) else None
    text = data.get(config.text_field) if isinstance(data, dict) else None
    if not isinstance(text, str):
        raise InputError(f"a task has no text in data.{config.text_field} (the label config's <Text value>)")
    return text


def prediction(config: LabelConfig, text: str, entities: Result, relations: Result | None,
               model_version: str) -> dict[str, Any]:
    """One task's prediction: `labels` regions, then `relation` results between them."""
    regions: dict[tuple[str, int, int], dict[str, Any]] = {}

    def region(label: str, start: int, end: int, score: float | None) -> str:
        key = (label, start, end)
        if key not in regions:
            item = {"id": f"r{len(regions)}", "from_name": config.labels_name, "to_name": config.text_name,
                    "type": "labels", "value": {"start": start, "end": end, "text": text[start:end],
                                                "labels": [label]}}
            if score is not None:
                item["score"] = score
            regions[key] = item
        return regions[key]["id"]

    for spans in entities.tuples:
        for s in spans:
            if s.offset is not None and s.type in config.labels:
                region(s.type, *s.offset, s.confidence)
    by_position = {(k[1], k[2]): k for k in regions}
    links: list[dict[str, Any]] = []
    for spans in (relations.tuples if relations else []):
        head = spans[0] if spans else None
        if head is None or head.offset is None or head.type not in config.labels:
            continue
        for tail in spans[1:]:
            if tail.offset is None or tail.type not in config.relations:
                continue
            label = config.object_label(tail.type)
            if label is None:
                known = by_position.get(tuple(tail.offset))
                label = known[0] if known else None
            if label is None:
                continue                   # no project label for the object: a region cannot be drawn
            link = {"type": "relation", "from_id": region(head.type, *head.offset, head.confidence),
                    "to_id": region(label, *tail.offset, tail.confidence), "direction": "right",
                    "labels": [tail.type]}
            if link not in links:
                links.append(link)
    result = list(regions.values()) + links
    scores = [r["score"] for r in regions.values() if "score" in r]
    return {"result": result, "score": sum(scores) / len(scores) if scores else 0.0, "model_version": model_version}
