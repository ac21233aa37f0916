"""The contracts layer: what the workstation and its plugins agree on. It imports nothing of ours.

A plugin needs only this package (docs/plugins.md):

    from contracts import hookimpl, ModelFamily, LoadedModel, Document, Result, Span, ...

Layers, bottom up (imports only point down; tests/test_architecture.py checks it):
contracts -> storage | plugins -> workstation (the application) -> benchmarks.
"""
from contracts.domain import Document, InputError, Result, Span, WeightsError
from contracts.exporter import Exporter, ExportReport
from contracts.flat_schema import FlatSchema, SchemaType
from contracts.hookspecs import PROJECT, hookimpl, hookspec
from contracts.model import DEMO_MARKER, DEMO_NOTICE, Knobs, LoadedModel, ModelFamily, TaskPreset, Training
from contracts.names import Capability, Kernel, Reads
from contracts.optimization import Optimization
from contracts.report import RunReport
from contracts.rule_model import RuleModel
from contracts.runs import RunDetail, RunSummary
from contracts.stages import IDLE, StageClock

__all__ = ["Capability", "DEMO_MARKER", "DEMO_NOTICE", "Document", "ExportReport", "Exporter", "FlatSchema", "IDLE", "InputError",
           "Kernel", "Knobs", "LoadedModel", "ModelFamily", "Optimization", "PROJECT", "Reads", "Result",
           "RuleModel", "RunDetail", "RunReport", "RunSummary", "SchemaType", "Span", "StageClock", "TaskPreset", "Training", "WeightsError",
           "hookimpl", "hookspec"]
