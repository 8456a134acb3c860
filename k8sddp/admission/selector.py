"""Kubernetes label selectors in their string form, for the webhook's namespace exemption.

Grammar and semantics follow ``k8s.io/apimachinery/pkg/labels/selector.go`` (``Parse``), the
syntax of ``kubectl get -l``: comma-separated requirements, each one of ``key``, ``!key``,
``key=value``, ``key==value``, ``key!=value``, ``key in (v1,v2)``, ``key notin (v1,v2)``.
``!=`` and ``notin`` also match when the key is absent. All requirements must match (AND).
The numeric ``gt``/``lt`` operators are not supported (rejected with an error).
"""

from __future__ import annotations

import dataclasses
import re

__all__ = ["LabelSelector", "Requirement", "SelectorError", "parse_selector"]

# Label keys: optional DNS-1123 subdomain prefix + '/' + name (63 chars: [A-Za-z0-9][-A-Za-z0-9_.]*).
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_KEY_RE = re.compile(rf"^([a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_NAME}$")
_VALUE_RE = re.compile(rf"^({_NAME})?$")
_TOKEN_RE = re.compile(r"\s*(!=|==|=|!|\(|\)|,|[^\s!=(),]+)")


class SelectorError(ValueError):
    """A selector string that does not parse; the message names the position."""


@dataclasses.dataclass(frozen=True)
class Requirement:
    """One requirement: ``key``, an operator (``exists``, ``!``, ``in``, ``notin``) and values."""

    key: str
    op: str
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        """Whether ``labels`` satisfies this requirement."""
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op == "in":
            return present and labels[self.key] in self.values
        return not present or labels[self.key] not in self.values  # notin

    def __str__(self) -> str:
        if self.op == "exists":
            return self.key
        if self.op == "!":
            return f"!{self.key}"
        if len(self.values) == 1:
            return f"{self.key}{'=' if self.op == 'in' else '!='}{self.values[0]}"
        return f"{self.key} {self.op} ({','.join(self.values)})"


@dataclasses.dataclass(frozen=True)
class LabelSelector:
    """A parsed selector: the AND of its requirements (empty matches everything)."""

    requirements: tuple[Requirement, ...]

    def matches(self, labels: dict[str, str]) -> bool:
        """Whether ``labels`` (a label map) satisfies every requirement."""
        return all(r.matches(labels) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN_RE.match(text, pos)
        if not m:  # pragma: no cover - the pattern matches any non-space character
            raise SelectorError(f"unexpected character at {pos} in {text!r}")
        out.append(m.group(1))
        pos = m.end()
    return out


def _check_key(key: str, text: str) -> str:
    if not _KEY_RE.match(key):
        raise SelectorError(f"invalid label key {key!r} in selector {text!r}")
    return key


def _check_value(value: str, text: str) -> str:
    if not _VALUE_RE.match(value) or len(value) > 63:
        raise SelectorError(f"invalid label value {value!r} in selector {text!r}")
    return value


def parse_selector(text: str) -> LabelSelector:
    """Parse a selector string such as ``"k8sddp.dev/guardrails=off,team in (a,b)"``.

    Raises:
        SelectorError: syntax error, invalid key or value, or an unsupported operator.
    """
    toks = _tokens(text)
    reqs: list[Requirement] = []
    i = 0

    def need(expected: str | None = None) -> str:
        nonlocal i
        if i >= len(toks):
            raise SelectorError(f"selector {text!r} ends early" + (f"; expected {expected!r}" if expected else ""))
        tok = toks[i]
        if expected is not None and tok != expected:
            raise SelectorError(f"expected {expected!r}, found {tok!r} in selector {text!r}")
        i += 1
        return tok

    while i < len(toks):
        tok = need()
        if tok == "!":
            reqs.append(Requirement(_check_key(need(), text), "!"))
        else:
            key = _check_key(tok, text)
            nxt = toks[i] if i < len(toks) else ","
            if nxt == ",":
                reqs.append(Requirement(key, "exists"))
            elif nxt in ("=", "=="):
                i += 1
                value = toks[i] if i < len(toks) and toks[i] != "," else ""
                if value:
                    i += 1
                reqs.append(Requirement(key, "in", (_check_value(value, text),)))
            elif nxt == "!=":
                i += 1
                value = toks[i] if i < len(toks) and toks[i] != "," else ""
                if value:
                    i += 1
                reqs.append(Requirement(key, "notin", (_check_value(value, text),)))
            elif nxt in ("in", "notin"):
                i += 1
                need("(")
                values: list[str] = []
                while True:
                    v = need()
                    if v == ")" and not values:
                        break
                    values.append(_check_value(v, text))
                    sep = need()
                    if sep == ")":
                        break
                    if sep != ",":
                        raise SelectorError(f"expected ',' or ')', found {sep!r} in selector {text!r}")
                reqs.append(Requirement(key, nxt, tuple(values)))
            else:
                raise SelectorError(
                    f"unsupported operator {nxt!r} after {key!r} in selector {text!r} "
                    "(use =, ==, !=, in, notin, key or !key)"
                )
        if i < len(toks):
            need(",")
            if i >= len(toks):
                raise SelectorError(f"selector {text!r} ends with ','")
    return LabelSelector(tuple(reqs))
