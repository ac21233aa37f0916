"""Widgets for a model plugin's options (e.g. SeqGPT's num_beams), drawn from the defaults it declares and
named by the titles it declares (`option_titles`: "Beam width", not `num_beams`)."""
from __future__ import annotations

from typing import Any

import streamlit as st

from contracts.model import ModelFamily


def option_widgets(family: ModelFamily, prefix: str) -> dict[str, Any]:
    """The options the person changed from the plugin's defaults (what the run records and passes on)."""
    defaults: dict[str, Any] = dict(getattr(family, "options", None) or {})
    if not defaults:
        return {}
    choices: dict[str, tuple] = dict(getattr(family, "option_choices", None) or {})
    titles: dict[str, tuple[str, str]] = dict(getattr(family, "option_titles", None) or {})
    changed: dict[str, Any] = {}
    with st.expander(f"{family.name} options"):
        for name, default in defaults.items():
            key = f"{prefix}:{family.name}:{name}"
            label, what = titles.get(name, (name, ""))
            tip = f"{what} (`{name}`, default {default})" if what else f"default {default}"
            if name in choices and default in choices[name]:
                value = st.selectbox(label, list(choices[name]), index=list(choices[name]).index(default), key=key,
                                     help=tip)
            elif isinstance(default, bool):
                value = st.checkbox(label, value=default, key=key, help=tip)
            elif isinstance(default, int):
                value = st.number_input(label, value=default, step=1, key=key, help=tip)
            elif isinstance(default, float):
                value = st.number_input(label, value=default, step=0.1, format="%g", key=key, help=tip)
            else:
                value = st.text_input(label, value=str(default), key=key, help=tip)
            if value != default:
                changed[name] = value
    return changed
