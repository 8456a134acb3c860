"""Label selector parsing and matching (kubectl -l syntax)."""

from __future__ import annotations

import pytest

from k8sddp.admission.selector import SelectorError, parse_selector


@pytest.mark.parametrize(
    ("text", "labels", "expected"),
    [
        ("k8sddp.dev/guardrails=disabled", {"k8sddp.dev/guardrails": "disabled"}, True),
        ("k8sddp.dev/guardrails=disabled", {"k8sddp.dev/guardrails": "enabled"}, False),
        ("k8sddp.dev/guardrails==disabled", {"k8sddp.dev/guardrails": "disabled"}, True),
        ("env!=prod", {}, True),
        ("env!=prod", {"env": "prod"}, False),
        ("env in (dev, test)", {"env": "test"}, True),
        ("env in (dev,test)", {"env": "prod"}, False),
        ("env notin (prod)", {}, True),
        ("env notin (prod)", {"env": "prod"}, False),
        ("sandbox", {"sandbox": ""}, True),
        ("!sandbox", {"sandbox": ""}, False),
        ("sandbox,team=ml", {"sandbox": "1", "team": "ml"}, True),
        ("sandbox,team=ml", {"sandbox": "1", "team": "web"}, False),
        ("", {"any": "thing"}, True),
        ("team=", {"team": ""}, True),
    ],
)
def test_matches(text: str, labels: dict[str, str], expected: bool) -> None:
    assert parse_selector(text).matches(labels) is expected


@pytest.mark.parametrize("text", ["a in b", "a in (b", "a >= 3", "a=b,", "-bad=x", "a=b c", "a in (b c)", "a=" + "x" * 64])
def test_errors(text: str) -> None:
    with pytest.raises(SelectorError):
        parse_selector(text)


def test_round_trip_string() -> None:
    sel = parse_selector("a=b, c notin (d,e), !f, g")
    assert str(sel) == "a=b,c notin (d,e),!f,g"
    assert parse_selector(str(sel)) == sel
