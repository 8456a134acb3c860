{{/*
Names the template manages (k8sddp/guardvars.py: MANDATORY + SAFETY_NETS, and K8SDDP_SEED);
tests/helm/test_charts.py keeps this list equal to guardvars.
*/}}
{{- define "ddpjob.managedNames" -}}
TORCH_NCCL_ASYNC_ERROR_HANDLING NCCL_ASYNC_ERROR_HANDLING PYTHONFAULTHANDLER K8SDDP_PG_TIMEOUT_SECONDS K8SDDP_WATCHDOG_TIMEOUT_SECONDS K8SDDP_MAX_HANG_RESTARTS TORCH_FR_DUMP_TEMP_FILE K8SDDP_ARTIFACT_DIR TORCH_NCCL_ENABLE_MONITORING TORCH_NCCL_DUMP_ON_TIMEOUT TORCH_FR_BUFFER_SIZE TORCH_NCCL_TRACE_BUFFER_SIZE K8SDDP_SEED
{{- end -}}

{{- define "ddpjob.safetyNets" -}}
TORCH_NCCL_ENABLE_MONITORING TORCH_NCCL_DUMP_ON_TIMEOUT TORCH_FR_BUFFER_SIZE TORCH_NCCL_TRACE_BUFFER_SIZE
{{- end -}}

{{/* Is torchVersion older than 2.2 (no TORCH_-prefixed name, no mode 3)? "true" or "". */}}
{{- define "ddpjob.legacyTorch" -}}
{{- with .Values.torchVersion -}}
{{- $parts := splitList "." (toString .) -}}
{{- if lt (len $parts) 2 }}{{ fail (printf "torchVersion %q is not MAJOR.MINOR[.PATCH]" (toString .)) }}{{ end -}}
{{- $major := atoi (index $parts 0) -}}
{{- $minorText := regexFind "^[0-9]+" (index $parts 1) -}}
{{- if or (not (regexMatch "^[0-9]+$" (index $parts 0))) (eq $minorText "") }}{{ fail (printf "torchVersion %q is not MAJOR.MINOR[.PATCH]" (toString .)) }}{{ end -}}
{{- if or (lt $major 2) (and (eq $major 2) (lt (atoi $minorText) 2)) }}true{{ end -}}
{{- end -}}
{{- end -}}

{{/* The guard variables as a JSON list of {name, value}, in render's order. */}}
{{- define "ddpjob.guardEnv" -}}
{{- $v := .Values -}}
{{- $mount := default "/checkpoints" $v.checkpoint.mountPath -}}
{{- $artifacts := printf "%s/k8sddp" (trimSuffix "/" $mount) -}}
{{- $t := default dict $v.timeouts -}}
{{- $env := list -}}
{{- if include "ddpjob.legacyTorch" . -}}
{{- $env = append $env (dict "name" "NCCL_ASYNC_ERROR_HANDLING" "value" "1") -}}
{{- else -}}
{{- $env = append $env (dict "name" "TORCH_NCCL_ASYNC_ERROR_HANDLING" "value" "3") -}}
{{- end -}}
{{- $env = append $env (dict "name" "PYTHONFAULTHANDLER" "value" "1") -}}
{{- $env = append $env (dict "name" "K8SDDP_PG_TIMEOUT_SECONDS" "value" (toString (int (default 1800 $t.processGroupSeconds)))) -}}
{{- $env = append $env (dict "name" "K8SDDP_WATCHDOG_TIMEOUT_SECONDS" "value" (toString (int (default 300 $t.watchdogSeconds)))) -}}
{{- $env = append $env (dict "name" "K8SDDP_MAX_HANG_RESTARTS" "value" (toString (int (ternary $v.maxHangRestarts 3 (hasKey $v "maxHangRestarts"))))) -}}
{{- $env = append $env (dict "name" "K8SDDP_ARTIFACT_DIR" "value" $artifacts) -}}
{{- $env = append $env (dict "name" "TORCH_FR_DUMP_TEMP_FILE" "value" (printf "%s/fr/rank-" $artifacts)) -}}
{{- $env = append $env (dict "name" "K8SDDP_SEED" "value" (toString (int (ternary $v.seed 0 (hasKey $v "seed"))))) -}}
{{- toJson $env -}}
{{- end -}}

{{/*
The container env: the guard variables, then the user's `env` entries. An entry that names a
managed variable is dropped when it repeats the guard value, kept when it is a safety net set to
something other than 0, and otherwise fails the render (as `k8sddp render` does).
*/}}
{{- define "ddpjob.env" -}}
{{- /* fromJson returns maps only: wrap the JSON list in one */ -}}
{{- $guard := (printf "{\"l\": %s}" (include "ddpjob.guardEnv" .) | fromJson).l -}}
{{- $expected := dict -}}
{{- range $guard }}{{ $_ := set $expected .name .value }}{{ end -}}
{{- $managed := splitList " " (include "ddpjob.managedNames" .) -}}
{{- $nets := splitList " " (include "ddpjob.safetyNets" .) -}}
{{- $out := $guard -}}
{{- range $i, $e := .Values.env -}}
{{- if not $e.name }}{{ fail (printf "env[%d]: every entry needs a name" $i) }}{{ end -}}
{{- if has $e.name $managed -}}
{{- $want := get $expected $e.name -}}
{{- if and (hasKey $e "value") (hasKey $expected $e.name) (eq (toString $e.value) $want) -}}
{{- /* same value as the guard: harmless, dropped */ -}}
{{- else if and (has $e.name $nets) (hasKey $e "value") (ne (trimAll "0" (trim (toString $e.value))) "") -}}
{{- $out = append $out $e -}}
{{- else -}}
{{- $shown := ternary (toString $e.value) "a valueFrom reference" (hasKey $e "value") -}}
{{- $why := ternary (printf "the chart sets %q" $want) "the chart manages it" (hasKey $expected $e.name) -}}
{{- fail (printf "env[%d]: %s=%q would override a mandatory guard variable (%s); remove it from env or use the value that sets it (timeouts, maxHangRestarts, checkpoint, torchVersion, seed)" $i $e.name $shown $why) -}}
{{- end -}}
{{- else -}}
{{- $out = append $out $e -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{- define "ddpjob.labels" -}}
{{- $labels := deepCopy (default dict .Values.labels) -}}
{{- if not (hasKey $labels "app.kubernetes.io/managed-by") }}{{ $_ := set $labels "app.kubernetes.io/managed-by" "k8sddp" }}{{ end -}}
{{- toJson $labels -}}
{{- end -}}
