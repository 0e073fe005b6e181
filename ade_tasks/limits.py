"""Bounds on documents that come from outside: rule files, API bodies, webhook bodies.

Python's JSON and YAML parsers recurse once per level of nesting, so a few kilobytes of
`[[[[...` end in a RecursionError wherever they are parsed, and YAML aliases let a small file
stand for billions of nodes. Documents from outside are read through `loads_json` and
`load_yaml`, which refuse with a `DocumentLimitError` naming the bound that was passed:

* nesting: at most `MAX_DEPTH` (64) levels of lists and mappings (GitHub's deliveries use
  about 6, a rule about 8);
* YAML: at most `MAX_YAML_NODES` (100,000) nodes, every alias counted as often as it is used,
  and `MAX_RULE_FILE_BYTES` (1 MiB) of text per rules file.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import yaml

from ade_tasks.errors import InvalidInputError

MAX_DEPTH = 64
MAX_YAML_NODES = 100_000
MAX_RULE_FILE_BYTES = 1024 * 1024


class DocumentLimitError(InvalidInputError, ValueError):
    """The document is nested too deeply or is too large to read."""

    def __init__(self, message: str | None = None, where: str | None = None) -> None:
        super().__init__(message)
        self.where = where  # e.g. "line 3, column 5" of a YAML document


def too_deep(what: str, limit: int) -> DocumentLimitError:
    """The refusal of a document nested deeper than `limit` levels."""
    return DocumentLimitError(
        f"{what} is nested deeper than {limit} levels of lists and mappings (the most "
        "accepted); nest it less deeply"
    )


def check_depth(document: object, max_depth: int = MAX_DEPTH, what: str = "the document") -> None:
    """Refuse a parsed document nested deeper than `max_depth` levels of dicts, lists, tuples
    and sets (walked level by level without recursion, so any depth is measured safely)."""
    level = [document] if isinstance(document, dict | list | tuple | set) else []
    for _ in range(max_depth):
        level = [
            child
            for node in level
            for child in (node.values() if isinstance(node, dict) else node)
            if isinstance(child, dict | list | tuple | set)
        ]
    if level:
        raise too_deep(what, max_depth)


def _check_json_depth(document: object, max_depth: int, what: str) -> None:
    """`check_depth` for what `json.loads` returns (only dicts and lists: a faster test)."""
    level = [document] if type(document) is dict or type(document) is list else []
    for _ in range(max_depth):
        if not level:
            return
        level = [
            child
            for node in level
            for child in (node.values() if type(node) is dict else node)
            if type(child) is dict or type(child) is list
        ]
    if level:
        raise too_deep(what, max_depth)


def loads_json(
    data: str | bytes, max_depth: int = MAX_DEPTH, what: str = "the JSON document"
) -> Any:
    """`json.loads` that refuses nesting deeper than `max_depth` with a DocumentLimitError
    instead of a RecursionError (malformed JSON still raises json.JSONDecodeError). The
    depth walk costs about a fifth of the parse (20 us for GitHub's 28 KB pull-request example)."""
    try:
        document = json.loads(data)
    except RecursionError:
        raise too_deep(what, max_depth) from None
    if len(data) > 2 * max_depth:  # anything shorter cannot nest that deep
        _check_json_depth(document, max_depth, what)
    return document


# The scanner and parser are most of a load's time in pure Python (about 80 % for a rule file);
# libyaml's parser is about 5x faster. Only the events come from it: the document is composed
# here in Python, so the depth and node bounds below apply before anything nests or expands
# (libyaml's own composer recurses in C, unbounded).
class _PythonEvents(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser):
    """PyYAML's pure-Python reader, scanner and parser (for a PyYAML built without libyaml)."""

    def __init__(self, stream: str) -> None:
        yaml.reader.Reader.__init__(self, stream)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)


if TYPE_CHECKING or not yaml.__with_libyaml__:
    _Events = _PythonEvents
else:
    from yaml._yaml import CParser as _Events


class _BoundedLoader(
    yaml.composer.Composer,
    _Events,
    yaml.constructor.SafeConstructor,
    yaml.resolver.Resolver,
):
    """PyYAML's safe loader (libyaml's parser when present), counting depth and nodes as it
    composes the document."""

    def __init__(self, stream: str, max_depth: int, max_nodes: int) -> None:
        _Events.__init__(self, stream)
        yaml.composer.Composer.__init__(self)
        yaml.constructor.SafeConstructor.__init__(self)
        yaml.resolver.Resolver.__init__(self)
        self._max_depth = max_depth
        self._max_nodes = max_nodes
        self._depth = 0
        self._nodes = 0
        self._sizes: dict[int, int] = {}  # id(node) -> nodes in its subtree, aliases expanded

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent):
            node = super().compose_node(parent, index)
            size = self._sizes.get(id(node))
            if size is None:  # its anchor is still being composed: the document contains itself
                raise _LimitPassed(
                    DocumentLimitError(
                        f"the YAML alias *{event.anchor} refers to a node that contains it (a "
                        "document that contains itself cannot be read); remove the alias"
                    ),
                    event,
                )
            self._count(size, event)
            return node
        collection = isinstance(event, yaml.SequenceStartEvent | yaml.MappingStartEvent)
        if collection:
            self._depth += 1
            if self._depth > self._max_depth:
                raise _LimitPassed(too_deep("the YAML document", self._max_depth), event)
        before = self._nodes
        self._count(1, event)
        node = super().compose_node(parent, index)
        if collection:
            self._depth -= 1
        self._sizes[id(node)] = self._nodes - before
        return node

    def _count(self, nodes: int, event: yaml.Event) -> None:
        self._nodes += nodes
        if self._nodes > self._max_nodes:
            raise _LimitPassed(
                DocumentLimitError(
                    f"the YAML document has more than {self._max_nodes:,} nodes (aliases "
                    "counted each time they are used); split it into smaller files"
                ),
                event,
            )


_LIBYAML_TOO_DEEP = "exceeded maximum nesting depth"  # libyaml refuses 1,000 levels


class _LimitPassed(yaml.YAMLError):
    """A DocumentLimitError on its way out of PyYAML, with where it happened."""

    def __init__(self, error: DocumentLimitError, event: yaml.Event) -> None:
        super().__init__(error.message)
        self.error = error
        self.mark = getattr(event, "start_mark", None)


_NOT_PLAIN = object()
#: The largest text `_load_plain` composes in C (a rule file is a few KB): libyaml composes the
#: whole tree before it is counted, so a larger text goes to `_BoundedLoader`, which stops at
#: `MAX_YAML_NODES` as it composes.
PLAIN_MAX_CHARS = 64 * 1024


#: libyaml's parser and composer with PyYAML's safe constructor (None without libyaml).
_PlainLoader: type[yaml.CSafeLoader] | None = getattr(yaml, "CSafeLoader", None)


def _load_plain(text: str, max_depth: int, max_nodes: int) -> object:
    """The document of a YAML text that uses no alias, merge key or collection tag and is
    within the bounds, composed by libyaml and built by `_PlainBuilder` (a rules file in about
    a third of `_BoundedLoader`'s time, which composes in Python); or `_NOT_PLAIN` for any
    other text, which `_BoundedLoader` then reads, refuses or reports exactly as before.
    Without aliases nothing expands: the node tree libyaml composed (its nesting bounded at
    1,000 levels by libyaml itself) is counted and measured as it is built."""
    if _PlainLoader is None or len(text) > PLAIN_MAX_CHARS:
        return _NOT_PLAIN
    loader = _PlainLoader(text)
    try:
        root = loader.get_single_node()
        return None if root is None else _PlainBuilder(loader, max_depth, max_nodes).build(root)
    except (_NotPlainError, yaml.YAMLError, ValueError, TypeError, RecursionError):
        return _NOT_PLAIN  # the bounded loader raises what it always raised
    finally:
        loader.dispose()


class _NotPlainError(Exception):
    """The tree is not one `_PlainBuilder` builds."""


_STR, _MAP, _SEQ = (f"tag:yaml.org,2002:{name}" for name in ("str", "map", "seq"))


class _PlainBuilder:
    """Builds the Python value of a node tree as PyYAML's safe constructor does (scalars by
    its own constructors), refusing with `_NotPlainError` a node reached twice (an alias), a
    merge key or a tagged collection (the safe constructor's business), more than `max_nodes`
    nodes or collections nested deeper than `max_depth`."""

    def __init__(self, loader: yaml.CSafeLoader, max_depth: int, max_nodes: int) -> None:
        self._loader = loader
        self._max_depth = max_depth
        self._max_nodes = max_nodes
        self._seen: set[int] = set()
        self._scalars = yaml.constructor.SafeConstructor.yaml_constructors

    def build(self, node: yaml.Node, depth: int = 0) -> object:
        if id(node) in self._seen or len(self._seen) >= self._max_nodes:
            raise _NotPlainError
        self._seen.add(id(node))
        tag = node.tag
        if tag == _STR:
            return node.value
        if isinstance(node, yaml.ScalarNode):
            construct = self._scalars.get(tag)
            if construct is None:
                raise _NotPlainError
            return construct(self._loader, node)
        if depth >= self._max_depth:
            raise _NotPlainError
        if tag == _MAP and isinstance(node, yaml.MappingNode):
            mapping = {}
            for key, value in node.value:
                if key.tag == "tag:yaml.org,2002:merge":
                    raise _NotPlainError
                mapping[self.build(key, depth + 1)] = self.build(value, depth + 1)
            return mapping
        if tag == _SEQ and isinstance(node, yaml.SequenceNode):
            return [self.build(item, depth + 1) for item in node.value]
        raise _NotPlainError


def load_yaml(text: str, max_depth: int = MAX_DEPTH, max_nodes: int = MAX_YAML_NODES) -> Any:
    """`yaml.safe_load` within the bounds: a DocumentLimitError (with `where` it happened, when
    known) instead of a RecursionError or an exponential alias expansion; malformed YAML
    still raises yaml.YAMLError."""
    plain = _load_plain(text, max_depth, max_nodes)
    if plain is not _NOT_PLAIN:
        return plain
    loader = _BoundedLoader(text, max_depth, max_nodes)
    try:
        document = loader.get_single_data()
    except _LimitPassed as exc:
        mark = exc.mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else None
        raise DocumentLimitError(exc.error.message, where) from None
    except RecursionError:
        raise too_deep("the YAML document", max_depth) from None
    except yaml.MarkedYAMLError as exc:
        if exc.problem != _LIBYAML_TOO_DEEP:  # libyaml's own bound, met while reading ahead
            raise
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else None
        raise DocumentLimitError(too_deep("the YAML document", max_depth).message, where) from None
    finally:
        loader.dispose()
    check_depth(document, max_depth, "the YAML document")  # aliases may nest what they name
    return document
