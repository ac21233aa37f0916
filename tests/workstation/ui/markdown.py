"""What a person reads: AppTest gives an element's Markdown source, where render.md_text escaped user text."""
import re

_ESCAPED = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|<>~$])")


def shown(markdown: str) -> str:
    return _ESCAPED.sub(r"\1", markdown)
