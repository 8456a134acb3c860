"""Read manifests as the API server reads them (YAML 1.1), safely, and locate JSON paths in them.

Parsing uses libyaml (PyYAML's ``CSafeLoader``) when present: YAML parsing dominates validation time
(``../shared/reference/NOTES.md``, Tooling facts). On top of it this module adds what a validator
must not miss: duplicate mapping keys (KDP002), alias bombs and recursive aliases (KDP003), and
parse errors with their line (KDP001).

Speed: libyaml composes the node tree (its marks give every finding its line, with no second
pass), and :mod:`.yamlbuild` turns nodes into Python values much faster than PyYAML's constructor.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import yaml

from .yamlbuild import BaseLoader as _BaseLoader
from .yamlbuild import Builder, DuplicateKeyError, FastLoader, RecursiveAliasError

__all__ = ["Document", "DuplicateKeyError", "Locator", "MAX_INPUT_BYTES", "ParseProblem", "decode", "load_documents"]

#: Largest manifest read (16 MiB). The API server refuses requests over 3 MiB and stores objects
#: up to about 1.5 MiB (etcd's default limit): a bigger file is a finding (KDP001), not a reason to
#: hold gigabytes in memory. ``k8sddp fix`` reads the same limit.
MAX_INPUT_BYTES = 16 * 1024 * 1024

#: Largest number of nodes a document may expand to through aliases (KDP003). Real manifests
#: stay far below: the biggest Kubeflow example has under 200 nodes.
MAX_EXPANDED_NODES = 1_000_000


@dataclasses.dataclass
class Document:
    """One document of a file.

    Attributes:
        index: 0-based position in the file (empty documents count, as Helm's do).
        data: the parsed value (``None`` for an empty document).
        node: its root node (YAML only), for :class:`Locator`.
    """

    index: int
    data: Any
    node: Any = None


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


#: Deepest nesting read (KDP001 beyond). libyaml's composer recurses in C for each level: about
#: 30,000 levels of "[" (60 KB of text) overflow the C stack and kill the process (measured with
#: PyYAML 6.0.3). Real manifests nest about 15 levels.
MAX_DEPTH = 1000


def _depth_problem(text: str) -> ParseProblem | None:
    """A document nested deeper than :data:`MAX_DEPTH`, found before libyaml composes it.

    A cheap bound first: a level needs a flow opener, a same-line "- "/"? " entry, or one more
    column of indentation (so indentation alone nests at most sqrt(2 x length) deep). Only text
    that could exceed the limit is scanned, with libyaml's event parser, which does not recurse.
    """
    bound = sum(text.count(t) for t in ("[", "{", "- ", "? ", "-\t", "?\t")) + int((2 * len(text)) ** 0.5) + 1
    if bound <= MAX_DEPTH:
        return None
    loader = _BaseLoader(text)
    depth = index = 0
    try:
        while loader.check_event():
            event = loader.get_event()
            if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    line, col = (event.start_mark.line + 1, event.start_mark.column + 1) if event.start_mark else (0, 0)
                    return ParseProblem("KDP001", f"nested more than {MAX_DEPTH} levels deep", line, col, index)
            elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                depth -= 1
            elif isinstance(event, yaml.DocumentEndEvent):
                index += 1
    except yaml.YAMLError:
        pass  # a syntax error before the limit: composing stops there too, and reports it
    finally:
        loader.dispose()
    return None


def alias_problem(data: Any) -> str:
    """Why ``data`` (parsed by anyone) cannot be walked safely: an alias bomb or a cycle; ``""``
    when it can. Costs one pass over its distinct nodes."""
    if not isinstance(data, (dict, list)):
        return ""
    try:
        if _expanded_size(data) > MAX_EXPANDED_NODES:
            return f"aliases expand this document to more than {MAX_EXPANDED_NODES:,} nodes (alias bomb)"
    except ValueError as exc:
        return str(exc)
    except RecursionError:
        return "document nested too deeply"
    return ""


def _mark_of(exc: yaml.YAMLError, text: str) -> tuple[int, int]:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if mark is not None:
        content = text.rstrip("\n")
        last = content.count("\n") + 1
        if mark.line + 1 > last:
            # "unexpected end of stream" is marked after the final newline, a line that editors and
            # GitHub annotations do not show: point at the end of the last line instead.
            return last, len(content.rsplit("\n", 1)[-1]) + 1
        return mark.line + 1, mark.column + 1
    if isinstance(exc, yaml.reader.ReaderError) and isinstance(exc.position, int):
        # libyaml reports the byte offset in the UTF-8 text of a character it refuses.
        before = text.encode("utf-8", "surrogatepass")[: exc.position].decode("utf-8", "replace")
        return before.count("\n") + 1, len(before) - (before.rfind("\n") + 1) + 1
    return 0, 0


def _problem_text(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.reader.ReaderError):
        char = exc.character if isinstance(exc.character, int) else ord(str(exc.character)[:1] or "\0")
        return f"unacceptable character #x{char:04x}: {exc.reason}"
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


#: Lone surrogates: bytes that were not UTF-8, kept by ``decode(..., "surrogateescape")``.
_NOT_UTF8 = re.compile("[\udc80-\udcff]")


class _JSONConstant(ValueError):
    """NaN, Infinity or -Infinity: Python's json reads them, JSON (and the API server) does not."""


def _json_constant(name: str) -> Any:
    raise _JSONConstant(name)


def decode(data: bytes) -> str:
    """The text of a manifest file: UTF-8 (a BOM is dropped), or UTF-16 with a BOM.

    Bytes that are not UTF-8 are kept as lone surrogates (``surrogateescape``), so that
    :func:`load_documents` reports them with their line (KDP001) instead of guessing a text.
    """
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            pass
    text = data.decode("utf-8", "surrogateescape")
    return text[1:] if text[:1] == "\ufeff" else text


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
    if len(text) > MAX_INPUT_BYTES:  # characters: at most the bytes, so over the limit for sure
        return [], [ParseProblem("KDP001", f"larger than {MAX_INPUT_BYTES // 2**20} MiB: not read", 0, 0, 0)]
    bad = _NOT_UTF8.search(text)
    if bad:
        before = text[: bad.start()]
        line, col = before.count("\n") + 1, bad.start() - (before.rfind("\n") + 1) + 1
        return [], [ParseProblem("KDP001", "not valid UTF-8 (Kubernetes manifests are UTF-8 text)", line, col, 0)]
    if is_json:
        try:
            return [Document(0, json.loads(text, object_pairs_hook=_json_pairs, parse_constant=_json_constant))], []
        except json.JSONDecodeError as exc:
            return [], [ParseProblem("KDP001", f"invalid JSON: {exc.msg}", exc.lineno, exc.colno, 0)]
        except _JSONConstant as exc:
            return [], [ParseProblem("KDP001", f"invalid JSON: {exc} is not a JSON number", 0, 0, 0)]
        except ValueError as exc:
            # JSON is YAML: the YAML reader finds the same duplicate with its line.
            _, located = load_documents(text)
            if located and located[0].rule_id == "KDP002":
                return [], located[:1]
            return [], [ParseProblem("KDP002", str(exc), 0, 0, 0)]
        except RecursionError:
            return [], [ParseProblem("KDP001", "JSON nested too deeply", 0, 0, 0)]
    too_deep = _depth_problem(text)
    if too_deep:
        return [], [too_deep]
    docs: list[Document] = []
    problems: list[ParseProblem] = []
    loader = FastLoader(text)
    index = 0
    check_aliases = "*" in text
    try:
        while loader.check_node():
            node = loader.get_node()
            try:
                data = Builder(loader).build(node)
                if check_aliases and isinstance(data, (dict, list)) and _expanded_size(data) > MAX_EXPANDED_NODES:
                    problems.append(
                        ParseProblem(
                            "KDP003", f"aliases expand this document to more than {MAX_EXPANDED_NODES:,} nodes (alias bomb)", 0, 0, index
                        )
                    )
                    data = None
            except RecursiveAliasError as exc:
                problems.append(ParseProblem("KDP003", str(exc), 0, 0, index))
                data = None
            except DuplicateKeyError as exc:
                # The document was composed whole: report it and go on with the next one.
                line, col = _mark_of(exc, text)
                problems.append(ParseProblem("KDP002", _problem_text(exc), line, col, index))
                data = None
            docs.append(Document(index, data, node))
            index += 1
    except yaml.YAMLError as exc:
        line, col = _mark_of(exc, text)
        problems.append(ParseProblem("KDP001", _problem_text(exc), line, col, index))
    except RecursionError:
        problems.append(ParseProblem("KDP001", "document nested too deeply", 0, 0, index))
    finally:
        loader.dispose()
    return docs, problems


class Locator:
    """Map JSON paths of a file's documents to 1-based ``(line, column)``.

    Uses the nodes :func:`load_documents` composed, or composes the file once, on first use.
    """

    def __init__(self, text: str, roots: list[Any] | None = None) -> None:
        """``roots``: the documents' root nodes when already composed (:attr:`Document.node`)."""
        self._text = text
        self._roots: list[Any] | None = roots

    def _load(self) -> list[Any]:
        if self._roots is None:
            # Keep the documents composed before an unreadable one: their findings keep their lines.
            self._roots = []
            if _depth_problem(self._text):
                return self._roots  # composing it would crash the process (JSON files come here)
            try:
                for root in yaml.compose_all(self._text, Loader=_BaseLoader):
                    self._roots.append(root)
            except (yaml.YAMLError, RecursionError):
                pass
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
