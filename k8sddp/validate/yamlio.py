"""Read manifests as the API server reads them (YAML 1.1), safely, and locate JSON paths in them.

Parsing uses libyaml (PyYAML's ``CSafeLoader``) when present: YAML parsing dominates validation time
(``../shared/reference/NOTES.md``, Tooling facts). On top of it this module adds what a validator
must not miss: duplicate mapping keys (KDP002), alias bombs and recursive aliases (KDP003), and
parse errors with their line (KDP001). Line numbers are computed only for documents that have
findings, by composing the node tree again (:func:`locate`).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import yaml

_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

#: Largest number of nodes a document may expand to through aliases (KDP003). Real manifests
#: stay far below: the biggest Kubeflow example has under 200 nodes.
MAX_EXPANDED_NODES = 1_000_000


class DuplicateKeyError(yaml.MarkedYAMLError):
    """A mapping has the same key twice (YAML forbids it; parsers disagree on which wins)."""


class _Loader(_BaseLoader):  # type: ignore[misc,valid-type]
    """``CSafeLoader`` that refuses duplicate keys among a mapping's own (non-merged) keys."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: set[tuple[str, str]] = set()
            for key_node, _ in node.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                    ident = (key_node.tag, key_node.value)
                    if ident in seen:
                        raise DuplicateKeyError(
                            "while constructing a mapping",
                            node.start_mark,
                            f"found duplicate key {key_node.value!r}",
                            key_node.start_mark,
                        )
                    seen.add(ident)
        return super().construct_mapping(node, deep=deep)


_Loader.add_constructor("tag:yaml.org,2002:map", lambda loader, node: loader.construct_mapping(node))


@dataclasses.dataclass
class Document:
    """One document of a file.

    Attributes:
        index: 0-based position in the file (empty documents count, as Helm's do).
        data: the parsed value (``None`` for an empty document).
    """

    index: int
    data: Any


@dataclasses.dataclass
class ParseProblem:
    """A document that could not be read.

    Attributes:
        rule_id: KDP001 (syntax), KDP002 (duplicate key) or KDP003 (alias bomb / recursion).
        message: what is wrong.
        line: 1-based line (0 when unknown); column likewise.
        index: the document's index in its file.
    """

    rule_id: str
    message: str
    line: int
    column: int
    index: int


def _expanded_size(root: Any) -> int:
    """Number of nodes ``root`` expands to when aliases are copied out.

    Memoised by identity, so it costs one pass over the distinct nodes even for a billion-laughs
    document. Raises ``RecursionError`` -> treated by the caller; a cycle raises ``ValueError``.
    """
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: Any) -> int:
        if not isinstance(node, (dict, list)):
            return 1
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise ValueError("recursive alias: the document contains itself")
        active.add(key)
        children = node.values() if isinstance(node, dict) else node
        total = 1 + sum(size(child) for child in children)
        active.discard(key)
        sizes[key] = total
        return total

    return size(root)


def _mark_of(exc: yaml.YAMLError) -> tuple[int, int]:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if mark is None:
        return 0, 0
    return mark.line + 1, mark.column + 1


def _problem_text(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError):
        parts = [p for p in (exc.context, exc.problem) if p]
        return "; ".join(parts) or str(exc)
    return str(exc).splitlines()[0]


def _json_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def load_documents(text: str, *, is_json: bool = False) -> tuple[list[Document], list[ParseProblem]]:
    """Parse ``text`` into documents.

    Args:
        text: the file's content.
        is_json: parse as one JSON document (faster; still refuses duplicate keys).

    Returns:
        ``(documents, problems)``: every document read before the first unreadable one, and at
        most one problem per file for syntax errors (parsing cannot resume after one) plus one per
        alias bomb. Never raises for bad input.
    """
    if is_json:
        try:
            return [Document(0, json.loads(text, object_pairs_hook=_json_pairs))], []
        except json.JSONDecodeError as exc:
            return [], [ParseProblem("KDP001", f"invalid JSON: {exc.msg}", exc.lineno, exc.colno, 0)]
        except ValueError as exc:
            return [], [ParseProblem("KDP002", str(exc), 0, 0, 0)]
        except RecursionError:
            return [], [ParseProblem("KDP001", "JSON nested too deeply", 0, 0, 0)]
    docs: list[Document] = []
    problems: list[ParseProblem] = []
    loader = _Loader(text)
    index = 0
    check_aliases = "*" in text
    try:
        while loader.check_data():
            data = loader.get_data()
            if check_aliases and isinstance(data, (dict, list)):
                try:
                    if _expanded_size(data) > MAX_EXPANDED_NODES:
                        problems.append(
                            ParseProblem(
                                "KDP003",
                                f"aliases expand this document to more than {MAX_EXPANDED_NODES:,} nodes (alias bomb)",
                                0, 0, index,
                            )
                        )
                        data = None
                except (ValueError, RecursionError) as exc:
                    msg = str(exc) if isinstance(exc, ValueError) else "document nested too deeply"
                    problems.append(ParseProblem("KDP003", msg, 0, 0, index))
                    data = None
            docs.append(Document(index, data))
            index += 1
    except DuplicateKeyError as exc:
        line, col = _mark_of(exc)
        problems.append(ParseProblem("KDP002", _problem_text(exc), line, col, index))
    except yaml.YAMLError as exc:
        line, col = _mark_of(exc)
        problems.append(ParseProblem("KDP001", _problem_text(exc), line, col, index))
    except RecursionError:
        problems.append(ParseProblem("KDP001", "document nested too deeply", 0, 0, index))
    finally:
        loader.dispose()
    return docs, problems


class Locator:
    """Map JSON paths of a file's documents to 1-based ``(line, column)``.

    Composes the node tree of the whole file once, on first use (only files with findings pay).
    """

    def __init__(self, text: str) -> None:
        self._text = text
        self._roots: list[Any] | None = None

    def _load(self) -> list[Any]:
        if self._roots is None:
            try:
                self._roots = list(yaml.compose_all(self._text, Loader=_BaseLoader))
            except (yaml.YAMLError, RecursionError):
                self._roots = []
        return self._roots

    def locate(self, index: int, path: tuple[Any, ...] | list[Any]) -> tuple[int, int]:
        """Position of the deepest node of ``path`` that exists in document ``index``.

        Args:
            index: the document's index in the file (empty documents are not in the node list,
                so a file with empty documents falls back to a best effort).
            path: keys and list indices from the document root.

        Returns:
            ``(line, column)``, 1-based; ``(0, 0)`` when the document cannot be composed.
        """
        roots = self._load()
        if index >= len(roots):
            return 0, 0
        node = roots[index]
        best = node.start_mark
        for part in path:
            child = None
            if isinstance(node, yaml.MappingNode):
                for key_node, value_node in node.value:
                    if isinstance(key_node, yaml.ScalarNode) and key_node.value == str(part):
                        child = value_node
                        best = key_node.start_mark
                        break
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
                child = node.value[part]
                best = child.start_mark
            if child is None:
                break
            node = child
        return best.line + 1, best.column + 1
