"""Helpers of the walker's ``if`` handling (:meth:`k8sddp.lint.flow.Walker._s_If`).

- :func:`pair_arms`: both arms of a rank-dependent ``if`` that run the same collectives in the
  same order pair up.
- Facts that hold in every distributed run: an ``assert`` inside a branch only distributed runs
  take (YOLOv5: ``if LOCAL_RANK != -1: assert not opt.evolve, "--evolve is not compatible with
  DDP"``) makes the asserted flag known there, so a later ``if not opt.evolve:`` takes its body
  in every distributed run and its ``else`` runs as a single process (:func:`fact_key`,
  :func:`assert_facts`).
"""

from __future__ import annotations

import ast

from .events import Event

__all__ = ["assert_facts", "fact_key", "pair_arms"]


def pair_arms(events: list[Event], spans: list[tuple[int, int]], many: ast.AST | None,
              cause: ast.AST | None, cause_is_exit: bool) -> None:
    """Both arms (``spans``: their ``[start, end)`` ranges in ``events``) of a rank-dependent
    ``if`` run the same collectives in the same order and neither leaves early: every rank runs
    that sequence, so they pair up; their collectives get the state before the ``if``
    (``many``, ``cause``, ``cause_is_exit``)."""
    arms = [events[a:b] for a, b in spans]
    if any(e.kind == "exit" for arm in arms for e in arm):
        return
    ops = [[e.op for e in arm if e.kind == "coll"] for arm in arms]
    if ops[0] != ops[1] or not ops[0]:
        return
    for arm in arms:
        for e in arm:
            if e.kind == "coll":
                e.many, e.cause, e.cause_is_exit = many, cause, cause_is_exit


def fact_key(test: ast.expr) -> tuple[str, bool]:
    """``test`` without its ``not``s: the source text of the rest and whether ``test`` is true
    when that rest is (``not opt.evolve`` -> ``("opt.evolve", False)``)."""
    polarity = True
    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, polarity = test.operand, not polarity
    return ast.unparse(test), polarity


def assert_facts(test: ast.expr) -> list[tuple[str, bool]]:
    """What ``assert test`` makes known (:func:`fact_key` pairs): each operand of an ``and``."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return [f for v in test.values for f in assert_facts(v)]
    if isinstance(test, (ast.Name, ast.Attribute, ast.UnaryOp)):
        return [fact_key(test)]
    return []
