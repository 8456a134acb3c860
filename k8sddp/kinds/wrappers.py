"""Objects that hold other objects: CodeFlare ``AppWrapper`` and Katib ``Experiment``.

A :class:`Wrapper` yields the objects it holds (:class:`Inner`), each with its path from the
wrapper's root, so the engine checks every inner object of a registered kind (or unwraps it again)
and its findings carry the wrapper's file and line and a JSON path through the wrapper
(``spec.components[0].template.spec.pytorchReplicaSpecs.Worker...``). Sources of the layouts:

- ``workload.codeflare.dev/v1beta2`` AppWrapper: ``spec.components[].template``
  (project-codeflare/appwrapper api/v1beta2/appwrapper_types.go, AppWrapperComponent.Template);
- ``workload.codeflare.dev/v1beta1`` and ``mcad.ibm.com/v1beta1`` AppWrapper:
  ``spec.resources.GenericItems[].generictemplate`` (project-codeflare/multi-cluster-app-dispatcher
  pkg/apis/controller/v1beta1/appwrapper.go, AppWrapperGenericResource.GenericTemplate);
- ``kubeflow.org/v1beta1`` Katib Experiment: ``spec.trialTemplate.trialSpec``, or the
  ``templatePath`` key of the ConfigMap ``spec.trialTemplate.configMap`` names (kubeflow/katib
  pkg/apis/controller/experiments/v1beta1/experiment_types.go, TrialTemplate and ConfigMapSource;
  the trial's name is ``<experiment>-<8 random characters>`` and its namespace the experiment's,
  pkg/controller.v1beta1/experiment/experiment_util.go and manifest/generator.go).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

import yaml

from ..catalogue import RULES
from ..validate.jobparts import MAPPING, as_list, get
from ..validate.rawfinding import RawFinding
from .base import CheckContext, Inner, Unwrapped, Wrapper  # (re-exported: the wrapper interface)
from .registry import register_wrapper

__all__ = ["AppWrapper", "Inner", "KATIB_PLACEHOLDER", "KatibExperiment", "LegacyAppWrapper", "Unwrapped", "Wrapper", "placeholder_filter"]

#: Katib's template placeholders: ``${trialParameters.<name>}`` and the trial's own metadata
#: ``${trialSpec.Name}``, ``${trialSpec.Namespace}``, ... (katib manifest/generator.go).
KATIB_PLACEHOLDER = re.compile(r"\$\{trial(?:Parameters|Spec)\.[^}]*\}")
#: Katib appends 8 random characters to the experiment's name for each trial: this stands for them.
KATIB_TRIAL_SUFFIX = "-xxxxxxxx"


def _with_metadata(inner: Any, namespace: str | None, name: str | None = None) -> Any:
    """``inner`` with ``metadata.namespace`` (and ``metadata.name``) filled in where absent."""
    if not isinstance(inner, MAPPING):
        return inner
    meta = inner.get("metadata")
    if meta is not None and not isinstance(meta, MAPPING):
        return inner  # layer 1 reports it
    meta = dict(meta or {})
    changed = False
    if namespace and not meta.get("namespace"):
        meta["namespace"] = namespace
        changed = True
    if name and not meta.get("name") and not meta.get("generateName"):
        meta["name"] = name
        changed = True
    return {**inner, "metadata": meta} if changed else inner


class AppWrapper(Wrapper):
    """CodeFlare AppWrapper v1beta2: ``spec.components[].template``, created in the AppWrapper's namespace."""

    kind: ClassVar[str] = "AppWrapper"
    api_versions: ClassVar[tuple[str, ...]] = ("workload.codeflare.dev/v1beta2",)

    def unwrap(self, obj: Mapping[str, Any], ctx: CheckContext) -> Unwrapped:
        inner = []
        for i, component in enumerate(as_list(get(obj, "spec", "components"))):
            if isinstance(component, MAPPING) and component.get("template") is not None:
                inner.append(Inner(("spec", "components", i, "template"), _with_metadata(component["template"], ctx.namespace)))
        return Unwrapped(inner)


class LegacyAppWrapper(Wrapper):
    """The older AppWrapper (MCAD): ``spec.resources.GenericItems[].generictemplate``."""

    kind: ClassVar[str] = "AppWrapper"
    api_versions: ClassVar[tuple[str, ...]] = ("workload.codeflare.dev/v1beta1", "mcad.ibm.com/v1beta1")

    def unwrap(self, obj: Mapping[str, Any], ctx: CheckContext) -> Unwrapped:
        inner = []
        for i, item in enumerate(as_list(get(obj, "spec", "resources", "GenericItems"))):
            if isinstance(item, MAPPING) and item.get("generictemplate") is not None:
                inner.append(Inner(("spec", "resources", "GenericItems", i, "generictemplate"), _with_metadata(item["generictemplate"], ctx.namespace)))
        return Unwrapped(inner)


class KatibExperiment(Wrapper):
    """Katib Experiment: the trial template, inline (``trialSpec``) or in a ConfigMap of the input."""

    kind: ClassVar[str] = "Experiment"
    api_versions: ClassVar[tuple[str, ...]] = ("kubeflow.org/v1beta1",)

    def unwrap(self, obj: Mapping[str, Any], ctx: CheckContext) -> Unwrapped:
        name = get(obj, "metadata", "name")
        trial_name = f"{name}{KATIB_TRIAL_SUFFIX}" if isinstance(name, str) and name else None
        template = get(obj, "spec", "trialTemplate")
        if not isinstance(template, MAPPING):
            return Unwrapped([])
        if template.get("trialSpec") is not None:
            spec = _with_metadata(template["trialSpec"], ctx.namespace, trial_name)
            return Unwrapped([Inner(("spec", "trialTemplate", "trialSpec"), spec, KATIB_PLACEHOLDER)])
        source = template.get("configMap")
        if not isinstance(source, MAPPING):
            return Unwrapped([])
        path = ("spec", "trialTemplate", "configMap")
        cm_name, cm_ns, key = source.get("configMapName"), source.get("configMapNamespace"), source.get("templatePath")
        where = f"ConfigMap {cm_name!r}" + (f" in namespace {cm_ns!r}" if cm_ns else "")
        ns = cm_ns if isinstance(cm_ns, str) and cm_ns else ctx.namespace
        data = ctx.objects.get(ns, str(cm_name))
        if data is None:
            why = f"{where} is not in the input{ctx.objects.elsewhere(ns, str(cm_name))}; add it to the input, or inline the job as trialTemplate.trialSpec"
        elif not isinstance(key, str) or key not in data:
            why = f"{where} has no key {key!r} (trialTemplate.configMap.templatePath)"
        else:
            try:
                spec = yaml.safe_load(data[key])
            except yaml.YAMLError as exc:
                why = f"key {key!r} of {where} is not YAML: {str(exc).splitlines()[0]}"
            else:
                return Unwrapped([Inner(path, _with_metadata(spec, ctx.namespace, trial_name), KATIB_PLACEHOLDER)])
        return Unwrapped([], [RawFinding("KDP110", path, f"the trial template cannot be checked: {why}")])


def placeholder_type_finding(finding: RawFinding, value: str) -> RawFinding:
    """The finding for a template placeholder where the schema wants a non-string (an integer, an
    object): the structure finding, said to be about a placeholder. (Katib substitutes into the
    JSON text, so a quoted placeholder stays a string and the API server refuses it: a real error,
    unlike an envsubst template, KDP011, which is substituted before anything parses it.)"""
    return RawFinding(finding.rule_id, finding.path, f"{finding.message} ({value!r} is a template placeholder where the CRD wants another type than a string: k8sddp checks the template, not the substituted object)")


def placeholder_filter(inner: Inner, findings: list[RawFinding]) -> list[RawFinding]:
    """Structure findings of ``inner`` less those about a placeholder where the CRD types a string
    (a pattern or format the substituted value may meet); a placeholder where the schema wants
    another type goes through :func:`placeholder_type_finding`."""
    if inner.placeholders is None:
        return findings
    out = []
    for f in findings:
        value = get(inner.obj, *f.path)
        if RULES[f.rule_id].layer != "structure" or not isinstance(value, str) or not inner.placeholders.search(value):
            out.append(f)
        elif "is not of type" in f.message:
            out.append(placeholder_type_finding(f, value))
    return out


APPWRAPPER = register_wrapper(AppWrapper())
LEGACY_APPWRAPPER = register_wrapper(LegacyAppWrapper())
KATIB_EXPERIMENT = register_wrapper(KatibExperiment())
