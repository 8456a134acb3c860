"""Rule fixtures: every ``fixtures/<RULE_ID>/{pass,fail}/*.yaml`` is one case, no test code per case.

Each fixture starts with comment lines::

    # what the case shows
    # profile: baseline|strict
    # expect: KDP201@44        (rule id, optionally @LINE: the 1-based line it must be reported at)

The failing (not exempted) findings of a fixture must be exactly the expected rule ids (for a
warning rule's folder, warnings count as failing, as under ``--fail-on warning``): a ``fail``
fixture expects its folder's rule (and may expect others it triggers on purpose); a ``pass``
fixture must not produce its folder's rule. Where a rule's expectations carry lines, its findings
must be exactly those: one finding per ``# expect`` line, at that line.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

from k8sddp.catalogue import RULES, VALIDATOR_LAYERS
from k8sddp.validate import validate_paths

FIXTURES = Path(__file__).resolve().parent / "fixtures"
_PROFILE = re.compile(rb"^# profile: (\w+)\s*$", re.M)
_EXPECT = re.compile(rb"^# expect: (KDP\d{3})(?:@(\d+))?\s*$", re.M)

#: Every rule of the validator (KDP0xx-KDP3xx) has fixtures of both kinds.
VALIDATOR_RULES = sorted(r for r in RULES if RULES[r].layer in VALIDATOR_LAYERS)


def _cases() -> list[Path]:
    return sorted(FIXTURES.glob("KDP*/*/*.y*ml"))


def _header(path: Path) -> tuple[str, dict[str, list[int]]]:
    data = path.read_bytes()  # bytes: some fixtures are deliberately not UTF-8
    profile = _PROFILE.search(data)
    assert profile, f"{path}: no '# profile:' line"
    expected: dict[str, list[int]] = defaultdict(list)
    for rule, line in _EXPECT.findall(data):
        expected[rule.decode()] += [int(line)] if line else []
    return profile.group(1).decode(), dict(expected)


@pytest.mark.parametrize("path", _cases(), ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}/{p.stem}")
def test_fixture(path: Path) -> None:
    rule, kind = path.parent.parent.name, path.parent.name
    assert rule in RULES and kind in ("pass", "fail"), f"misplaced fixture {path}"
    profile, expected = _header(path)
    if kind == "fail":
        assert rule in expected, f"{path}: a fail fixture must expect its own rule {rule}"
    else:
        assert rule not in expected, f"{path}: a pass fixture must not expect its own rule {rule}"

    report = validate_paths([str(path)], profile=profile, jobs=1)
    failing = report.failing(RULES[rule].severity)
    got: dict[str, list[int]] = defaultdict(list)
    for f in failing:
        got[f.rule_id].append(f.line)
    shown = "\n".join(f"  {f.rule_id} line {f.line} [{f.path}] {f.message}" for f in failing) or "  (none)"
    assert set(got) == set(expected), f"{path.name}: expected rules {sorted(expected)}, got:\n{shown}"
    for rule_id, lines in expected.items():
        if lines:
            assert sorted(got[rule_id]) == sorted(lines), f"{path.name}: {rule_id} expected at lines {sorted(lines)}, got:\n{shown}"


@pytest.mark.parametrize("rule", VALIDATOR_RULES)
def test_every_rule_has_passing_and_failing_fixtures(rule: str) -> None:
    for kind in ("pass", "fail"):
        found = list((FIXTURES / rule / kind).glob("*.y*ml"))
        assert len(found) >= 1, f"no {kind} fixture for {rule}"
    assert len(list((FIXTURES / rule).glob("*/*.y*ml"))) >= 3, f"{rule}: fewer than 3 fixtures"
