"""The pages the docs checks read, as fenced code blocks and inline code spans with their lines:
README.md, deploy/README.md (docs/deployment.md includes it) and every page under docs/."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[3]


def doc_files() -> list[Path]:
    """README.md, deploy/README.md (included by docs/deployment.md) and every page of docs/."""
    return [ROOT / "README.md", ROOT / "deploy" / "README.md", *sorted(ROOT.glob("docs/**/*.md"))]


@dataclass(frozen=True)
class Block:
    """A fenced code block: its language and text, and the line its text starts on."""

    file: str
    line: int
    lang: str
    text: str


@dataclass(frozen=True)
class Span:
    """Inline code; `cell`: the table cell it is in (spans of one cell share it), else None."""

    file: str
    line: int
    text: str
    cell: int | None


@functools.cache
def read_markdown(path: Path) -> tuple[list[Block], list[Span]]:
    """The page's fenced blocks and inline code spans (cached: every check reads each page)."""
    source = path.read_text()
    name = str(path.relative_to(ROOT))
    tokens = MarkdownIt("commonmark").enable("table").parse(source)
    blocks: list[Block] = []
    spans: list[Span] = []
    for index, token in enumerate(tokens):
        if token.type == "fence" and token.map:
            lang = (token.info.split() or [""])[0].lower()
            blocks.append(Block(name, token.map[0] + 2, lang, token.content))
        elif token.type == "inline" and token.map:
            in_cell = index > 0 and tokens[index - 1].type in ("td_open", "th_open")
            cursor = 0
            for child in token.children or []:
                if child.type != "code_inline":
                    continue
                # Code spans fold line breaks into spaces: find the span in the raw text.
                words = [re.escape(word) for word in child.content.split()]
                found = re.compile(r"\s+".join(words)).search(token.content, cursor)
                offset = found.start() if found else cursor
                cursor = found.end() if found else cursor
                line = token.map[0] + 1 + token.content.count("\n", 0, offset)
                spans.append(Span(name, line, child.content, index if in_cell else None))
    return blocks, spans
