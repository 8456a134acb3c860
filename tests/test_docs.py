"""Generated documentation stays in step with the rule catalogue."""

from k8sddp.catalogue import RULES
from k8sddp.docgen import DECISIONS_DOC, DOC, render_decisions_md, render_rules_md


def test_rules_doc_is_current():
    assert DOC.read_text() == render_rules_md(), "run: python -m k8sddp.docgen"


def test_every_rule_is_documented():
    text = DOC.read_text()
    for rule_id in RULES:
        assert f"| {rule_id} |" in text


def test_decisions_doc_is_current():
    assert DECISIONS_DOC.read_text() == render_decisions_md(), "run: python -m k8sddp.docgen"
