{{- define "k8sddp-webhook.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "k8sddp-webhook.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "k8sddp-webhook.labels" -}}
{{ include "k8sddp-webhook.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: admission-webhook
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "k8sddp-webhook.tlsSecretName" -}}
{{- if eq .Values.certificates.mode "secret" -}}
{{- required "certificates.secret.name is required with certificates.mode=secret" .Values.certificates.secret.name -}}
{{- else -}}
{{- printf "%s-tls" (include "k8sddp-webhook.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "k8sddp-webhook.serviceDNS" -}}
{{- printf "%s.%s.svc" (include "k8sddp-webhook.fullname" .) .Release.Namespace -}}
{{- end -}}

{{/* matchConditions: equal to k8sddp.admission.cel.MATCH_CONDITIONS (tests keep them equal). */}}
{{- define "k8sddp-webhook.matchConditions" -}}
- name: not-being-deleted
  expression: "!has(object.metadata.deletionTimestamp)"
- name: spec-changed
  expression: "request.operation != 'UPDATE' || oldObject == null || !has(oldObject.spec) || !has(object.spec) || object.spec != oldObject.spec"
{{- end -}}
