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

{{/* The labels of every object, one key each: the chart's own, then commonLabels, then the
     object's own (call with `.`, or (list . dict) for the object's), each later one winning
     over an earlier one with the same key. Values are written as strings (`--set a.b=7`
     gives a number, which Kubernetes refuses as a label value). */}}
{{- define "tfobs.labels" -}}
{{- $ctx := . -}}
{{- $own := dict -}}
{{- if kindIs "slice" . -}}
{{- $ctx = index . 0 -}}
{{- $own = index . 1 | default dict -}}
{{- end -}}
{{- $all := dict
    "app.kubernetes.io/name" $ctx.Chart.Name
    "app.kubernetes.io/instance" $ctx.Release.Name
    "app.kubernetes.io/version" $ctx.Chart.AppVersion
    "app.kubernetes.io/managed-by" $ctx.Release.Service
    "helm.sh/chart" (printf "%s-%s" $ctx.Chart.Name $ctx.Chart.Version) -}}
{{- $all = merge (deepCopy $own) (deepCopy ($ctx.Values.commonLabels | default dict)) $all -}}
{{- $out := dict -}}
{{- range $key, $value := $all -}}
{{- $_ := set $out $key (toString $value) -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}
