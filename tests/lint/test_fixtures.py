"""Every rule fixture: the findings the linter reports are exactly the ones the fixture declares.

Fixtures live in ``tests/lint/fixtures/<RULE>/{fail,pass}/``: a ``.py`` file, or a folder linted
as one project (for calls across files). Each expected finding is a ``# expect: KDP5nn`` comment
on the line it is reported at; a ``pass`` fixture declares none of its rule. Adding a case needs
no test code.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from k8sddp.catalogue import rules_for
from k8sddp.lint import lint_paths

from .expect import expected_in

FIXTURES = Path(__file__).parent / "fixtures"
CASES = sorted(p for p in FIXTURES.glob("KDP*/*/*") if p.suffix == ".py" or p.is_dir())


def _id(p: Path) -> str:
    return "/".join(p.relative_to(FIXTURES).parts)


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_fixture(case: Path) -> None:
    rule, kind = case.parent.parent.name, case.parent.name
    expected = expected_in(case)
    if kind == "fail":
        assert any(r == rule for _, _, r in expected), f"{case}: a fail fixture must expect {rule}"
    else:
        assert not any(r == rule for _, _, r in expected), f"{case}: a pass fixture must not expect {rule}"
    report = lint_paths([str(case)]).report
    got = {(f.file, f.line, f.rule_id) for f in report.findings if not f.exempted_by}
    detail = "\n".join(f"{f.location()} {f.rule_id} {f.message}" for f in report.findings)
    assert got == expected, f"missing {sorted(expected - got)}; unexpected {sorted(got - expected)}\n{detail}"


def test_every_lint_rule_has_fail_and_pass_fixtures() -> None:
    for rule in rules_for(["lint"]):
        for kind in ("fail", "pass"):
            assert list((FIXTURES / rule.id / kind).iterdir()), f"no {kind} fixture for {rule.id}"
