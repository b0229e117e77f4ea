{{/* Name of the release's objects: "<release>-tfobs", or the release name if it says tfobs. */}}
{{- define "tfobs.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* "<fullname>-<suffix>" within 63 characters: the fullname is cut, never the suffix, so
     objects told apart by their suffix (one ConfigMap per dashboard) keep distinct names.
     Call with (list $ "suffix"). */}}
{{- define "tfobs.suffixed" -}}
{{- $ctx := index . 0 -}}
{{- $suffix := index . 1 -}}
{{- $prefix := include "tfobs.fullname" $ctx | trunc (int (sub 62 (len $suffix))) | trimSuffix "-" -}}
{{- printf "%s-%s" $prefix $suffix -}}
{{- end -}}

{{- define "tfobs.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}
