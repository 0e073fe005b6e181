"""Docs and code cite only files that exist: a repository path in the docs' inline code, and a
page named in a comment or docstring of the code, the tests or the benchmarks.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

from tests.unit.docs.doc_pages import ROOT, doc_files, read_markdown

REPO_PATH = re.compile(
    r"(ade_tasks|ade_workers|ade_api|tests|bench|deploy|docs|config)/[\w./-]*(:\w+)?"
)
CITED_MD = re.compile(r"(?<![\w./-])(?:docs/[\w./-]+|[A-Z][A-Z_]*)\.md\b")
#: Files the docs and code name that are not in the repository, each with the reason.
NOT_IN_THE_REPOSITORY = {
    "config/rules/disk-usage.yaml": "README.md's first rule, which the reader writes",
    "deploy/ade.env": "the optional secrets file a Compose user writes (deploy/README.md)",
    "AGENTS.md": "the instructions file codex reads in a project an agent works on",
    "docs/x.md": "a changed file in a test's example event",
    "config/rules/pr-opened.yaml": "the rule docs/recipes/local-github-delivery.md has you write",
    "config/rules/try-agent.yaml": "the rule docs/recipes/try-an-agent-step.md has you write",
    "config/rules/shared/": "where a team puts another team's rules (docs/rules.md)",
}


def _exists(cited: str) -> bool:
    path = cited.split(":", 1)[0]
    module = path.rsplit(".", 1)[0] + ".py"  # `pkg/module.function`
    return cited in NOT_IN_THE_REPOSITORY or (ROOT / path).exists() or (ROOT / module).exists()


def python_prose(path: Path) -> Iterator[tuple[int, str]]:
    """The comments and docstrings of a Python file, with their lines (none without `.md`)."""
    source = path.read_text()
    if ".md" not in source:
        return
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            docstring = ast.get_docstring(node, clean=False)
            if docstring:
                yield getattr(node, "lineno", 1), docstring


def test_the_docs_cite_only_files_that_exist() -> None:
    missing = [
        f"{span.file}:{span.line}: `{span.text}` is not in the repository; fix the path, or add "
        "it to NOT_IN_THE_REPOSITORY with the reason"
        for path in doc_files()
        for span in read_markdown(path)[1]
        if REPO_PATH.fullmatch(span.text) and not _exists(span.text)
    ]
    assert not missing, "\n".join(missing)


def test_code_and_tests_cite_only_docs_that_exist() -> None:
    """No comment or docstring sends a reader to a page that is not there (issue 37 found
    three tests and docs/operations.md citing a design document the repository does not hold)."""
    sources = [p for d in ("ade_tasks", "ade_workers", "ade_api", "tests", "bench")
               for p in sorted((ROOT / d).rglob("*.py"))]  # fmt: skip
    missing = [
        f"{path.relative_to(ROOT)}:{line}: cites {cited}, which is not in the repository; "
        "point at the page of docs/ that says it, or say it here"
        for path in sources
        for line, prose in python_prose(path)
        for cited in CITED_MD.findall(prose)
        if not _exists(cited)
    ]
    assert not missing, "\n".join(missing)
