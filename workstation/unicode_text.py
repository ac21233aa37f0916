"""Is a parsed JSON value valid Unicode text? JSON may spell half of a UTF-16 pair (`"\\ud800"`) and Python
keeps it as a lone surrogate: a str that cannot be encoded as UTF-8, so it fails later, far from the input
(writing the history, the output file or an HTTP answer). Every surface asks this once, where it parses.
"""
from __future__ import annotations

import re
from typing import Any

SURROGATE = re.compile("[\ud800-\udfff]")
MAX_KEY_SHOWN = 40


def lone_surrogate(value: Any, root: str = "") -> str | None:
    """Where `value` (a parsed JSON value: strings as values or keys, any nesting) holds a lone surrogate,
    as words naming the place ('documents[0].text holds ...'); None where it is all valid text.
    Iterative, so a deeply nested value cannot exhaust the stack."""
    stack: list[tuple[Any, str]] = [(value, root)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            found = SURROGATE.search(item)
            if found:
                return f"{path or 'the value'} holds {_described(found.group())}"
        elif isinstance(item, dict):
            children = []
            for key, child in item.items():
                if isinstance(key, str) and SURROGATE.search(key):
                    return f"a key of {path or 'the object'} holds {_described(SURROGATE.search(key).group())}"
                children.append((child, f"{path}.{_shown(key)}" if path else _shown(key)))
            stack.extend(reversed(children))           # the first problem in reading order is the one named
        elif isinstance(item, list):
            stack.extend(reversed([(child, f"{path}[{i}]") for i, child in enumerate(item)]))
    return None


def _described(char: str) -> str:
    return f"a lone UTF-16 surrogate (\\u{ord(char):04x}), which is not Unicode text; send the whole pair or none"


def _shown(key: Any) -> str:
    text = str(key)
    return text if len(text) <= MAX_KEY_SHOWN and text.isprintable() else repr(text[:MAX_KEY_SHOWN])
