{{/* Helm's labels: the only ones deploy/'s objects do not carry. */}}
{{- define "fleet-manager.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* deploy/'s labels, with Helm's. */}}
{{- define "fleet-manager.labels" -}}
app.kubernetes.io/name: fleet-manager
app.kubernetes.io/part-of: fleet-manager
{{ include "fleet-manager.helmLabels" . }}
{{- end }}

{{/* The manager's pods. Immutable in the Deployment: keep it minimal. */}}
{{- define "fleet-manager.selector" -}}
app.kubernetes.io/name: fleet-manager
app.kubernetes.io/component: manager
{{- end }}

{{/* The manager's ServiceAccount, as a subject. */}}
{{- define "fleet-manager.subject" -}}
- kind: ServiceAccount
  name: fleet-manager
  namespace: {{ .Release.Namespace }}
{{- end }}
