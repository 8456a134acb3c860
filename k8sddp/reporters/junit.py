"""JUnit XML report, for CI systems that show test results (GitLab, Jenkins, Azure Pipelines).

Layout (the de-facto schema read by those tools: ``testsuites > testsuite > testcase``)::

    <testsuites name="k8sddp validate" tests= failures= errors="0" skipped=>
      <testsuite name="FILE" tests= failures= skipped=>       one per input file with findings
        <testcase classname="FILE.Kind/ns/name" name="KDP201 nccl-async-error-handling [path]">
          <failure type="error" message="...">FILE:LINE:COL ... rule text</failure>
        </testcase>                                           one per finding
      </testsuite>
      <testsuite name="k8sddp validate">                      the summary suite
        <testcase classname="k8sddp" name="N object(s) checked, M with findings"/>
      </testsuite>
    </testsuites>

Choices: one ``testcase`` per finding, grouped by object through ``classname`` (many consumers read
only the first ``failure`` of a testcase, so one failure each keeps every finding visible); errors
and warnings are ``failure`` elements with ``type`` the severity; exempted findings are ``skipped``
with the exemption as message. The summary suite always holds one passing testcase, so a clean run
is a green test rather than an empty report (which some consumers treat as an error).

Text goes through :mod:`xml.etree.ElementTree`, which escapes ``& < > "``; characters XML 1.0
cannot carry at all (C0 controls other than tab, newline and carriage return, lone surrogates,
U+FFFE/U+FFFF) are replaced by ``\\u`` escapes (four hex digits) first.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import OrderedDict

from ..catalogue import RULES
from ..findings import Finding, Report

__all__ = ["render", "xml_safe"]

_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_safe(text: str) -> str:
    """``text`` with every character XML 1.0 forbids replaced by a visible ``\\u`` escape (four hex digits)."""
    return _INVALID_XML.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _case(parent: ET.Element, f: Finding) -> tuple[int, int]:
    rule = RULES.get(f.rule_id)
    name = f.rule_id + (f" {rule.name}" if rule else "") + (f" [{f.path}]" if f.path else "")
    classname = f.file + (f".{f.object_ref}" if f.object_ref else "")
    case = ET.SubElement(parent, "testcase", classname=xml_safe(classname), name=xml_safe(name))
    case.set("file", xml_safe(f.file))
    if f.line:
        case.set("line", str(f.line))
    detail = f"{f.location()}: {f.rule_id} {f.message}"
    if rule is not None:
        detail += f"\n\n{rule.title}\nWhy: {rule.why}\nSource: {rule.source}"
    if f.exempted_by:
        ET.SubElement(case, "skipped", message=xml_safe(f"exempted ({f.exempted_by}): {f.message}"))
        return 0, 1
    failure = ET.SubElement(case, "failure", type=f.severity.value, message=xml_safe(f.message))
    failure.text = xml_safe(detail)
    return 1, 0


def render(report: Report, *, tool: str) -> str:
    """The report as a JUnit XML document (UTF-8 text with an XML declaration).

    Args:
        report: the findings and counts of one run.
        tool: the command (``validate`` or ``lint``), used in suite names.
    """
    by_file: OrderedDict[str, list[Finding]] = OrderedDict()
    for f in report.findings:
        by_file.setdefault(f.file or "<input>", []).append(f)

    root = ET.Element("testsuites", name=f"k8sddp {tool}")
    total_tests = total_failures = total_skipped = 0
    for file, findings in by_file.items():
        suite = ET.SubElement(root, "testsuite", name=xml_safe(file))
        failures = skipped = 0
        for f in findings:
            fa, sk = _case(suite, f)
            failures += fa
            skipped += sk
        suite.attrib.update(
            tests=str(len(findings)), failures=str(failures), errors="0", skipped=str(skipped)
        )
        total_tests += len(findings)
        total_failures += failures
        total_skipped += skipped

    noun = "object(s)" if tool == "validate" else "file(s)"
    flagged = {(f.file, f.object_ref) for f in report.findings if not f.exempted_by}
    summary = ET.SubElement(
        root, "testsuite", name=f"k8sddp {tool}", tests="1", failures="0", errors="0", skipped="0"
    )
    ET.SubElement(
        summary,
        "testcase",
        classname="k8sddp",
        name=(
            f"{report.checked} file(s) checked, {len(flagged)} with findings" if tool == "lint" else
            f"{report.files} file(s), {report.documents} document(s), {report.checked} {noun} "
            f"checked, {len(flagged)} with findings"
        ),
    )
    total_tests += 1
    root.attrib.update(
        tests=str(total_tests), failures=str(total_failures), errors="0", skipped=str(total_skipped)
    )
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
