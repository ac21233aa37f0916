"""iew-gazetteer: an example model plugin for IE Workstation (the walkthrough is docs/plugins.md).

A gazetteer and pattern extractor that gives meaningful extractions with no model weights: dictionary
matching with an Aho–Corasick automaton (pyahocorasick) and regular expressions for dates, money, phone
numbers, e-mail addresses, URLs, Chinese resident ID numbers and IPv4 addresses. It also adds an export
format that turns any run's spans into dictionaries it can read.

The distribution's pyproject.toml lists this module under the entry-point group `ie_workstation`; the
workstation imports it and calls the hooks below. It imports only `contracts`, the workstation's
public floor.
"""
from contracts import Exporter, hookimpl

__version__ = "0.1.0"


@hookimpl
def register_models(register):
    from .family import Gazetteer
    register(Gazetteer())


@hookimpl
def register_exporters(register):
    from .exporter import write_dictionaries
    register(Exporter("gazetteer", ".zip", write_dictionaries,
                      "Gazetteer dictionaries (zip of TYPE.txt, the gazetteer's weights folder)", "application/zip"))
