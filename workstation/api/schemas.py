"""Request bodies of the HTTP API (pydantic): what OpenAPI documents and what is checked before any work."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, field_validator, model_validator
from pydantic_core import PydanticCustomError

from storage.records import SOURCES
from workstation.unicode_text import lone_surrogate

MAX_SCHEMA_DEPTH = 16          # RexUniNLU schemas are 1-3 levels deep; deeper is a mistake or an attack
Dtype = Literal["fp32", "fp16", "bf16"]
OptionValue = int | float | str | bool | None
Source = Literal[SOURCES]              # the surfaces a run can come from (History's source column)


def check_depth(value: Any, limit: int = MAX_SCHEMA_DEPTH) -> Any:
    """Reject nesting deeper than `limit` without recursion (a deep body must not exhaust the stack)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                raise ValueError(f"nested deeper than {limit} levels")
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return value


class UnicodeBody(BaseModel):
    """A body whose strings (values and keys, at any depth) are valid Unicode: a lone surrogate is refused
    here (422), before it can reach the engine, the history or an answer that cannot be encoded."""

    @model_validator(mode="before")
    @classmethod
    def valid_unicode(cls, value):
        problem = lone_surrogate(value)
        if problem:
            raise PydanticCustomError("lone_surrogate", problem)
        return value


class Strict(UnicodeBody):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class DocumentIn(Strict):
    # Strict: JSON true is not the id "1", nor 2.0 the id "2".
    id: StrictStr | StrictInt | None = Field(None, description="default: the 1-based position in `documents`")
    text: str
    schema_: dict[str, Any] | None = Field(None, alias="schema",
                                           description="for a model that reads a schema (GET /v1/models: reads)")
    task: str | None = Field(None, max_length=64, description="for a model that reads labels; SeqGPT: cls | ext | nli")
    labels: list[str] | None = Field(None, description="for a model that reads labels (GET /v1/models: reads)")

    @field_validator("schema_")
    @classmethod
    def schema_depth(cls, value):
        return check_depth(value)

    @field_validator("id", mode="before")
    @classmethod
    def id_kind(cls, value):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (str, int))):
            kind = "true/false" if isinstance(value, bool) else type(value).__name__
            raise PydanticCustomError("id_type", "an id is a string or an integer, not {kind}", {"kind": kind})
        return value


class ExtractRequest(Strict):
    model: str = Field(..., max_length=128, examples=["rexuninlu"])
    documents: list[DocumentIn] = Field(..., min_length=1)
    schema_: dict[str, Any] | None = Field(None, alias="schema",
                                           description="default schema for documents without one")
    task: str | None = Field(None, max_length=64, description="default task (a model that reads labels)")
    labels: list[str] | None = Field(None, description="default labels (a model that reads labels)")
    optimizations: list[str] | None = Field(None, description="names; [] = the fp32 eager path; "
                                                               "omitted: settings.toml's")
    dtype: Dtype | None = None
    device: str | None = Field(None, max_length=16, description="auto | cpu | cuda | cuda:N; omitted: settings.toml's")
    batch_size: int | None = Field(None, ge=1, le=1024)
    options: dict[str, OptionValue] = Field(default_factory=dict, description="model options (GET /v1/models)")

    @field_validator("schema_")
    @classmethod
    def schema_depth(cls, value):
        return check_depth(value)

    def document_dicts(self) -> list[dict[str, Any]]:
        """Documents with the request's defaults filled in (as `launcher.py extract --schema` does)."""
        out = []
        for d in self.documents:
            item = {"id": d.id, "text": d.text, "schema": d.schema_, "task": d.task, "labels": d.labels}
            if item["schema"] is None and self.schema_ is not None:
                item["schema"] = self.schema_
            if item["task"] is None:
                item["task"] = self.task
            if item["labels"] is None:
                item["labels"] = self.labels
            out.append(item)
        return out


class SetupRequest(UnicodeBody):
    """Label Studio's /setup: the project and its labeling config."""
    model_config = ConfigDict(extra="allow")
    project: str | int | None = None
    schema_: str | None = Field(None, alias="schema", description="the project's label config (XML)")
    model_version: str | None = None


class PredictRequest(UnicodeBody):
    """Label Studio's /predict: tasks of a project."""
    model_config = ConfigDict(extra="allow")
    tasks: list[dict[str, Any]] = Field(..., max_length=10_000)
    project: str | int | None = None
    label_config: str | None = None
    model_version: str | None = None


class WebhookRequest(UnicodeBody):
    model_config = ConfigDict(extra="allow")
    action: str = Field(..., max_length=128)
