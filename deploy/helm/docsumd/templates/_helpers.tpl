{{/* The chart's name. */}}
{{- define "docsumd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The resources' name: RELEASE-docsumd, or RELEASE when it already says docsumd. Kept to 52
characters: a StatefulSet's pods add "-N" and their controller-revision label a hash. */}}
{{- define "docsumd.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels that select the pods. app.kubernetes.io/name is also the ServiceMonitor's job label. */}}
{{- define "docsumd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "docsumd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels of every resource. */}}
{{- define "docsumd.labels" -}}
{{ include "docsumd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}
