{{/*
Helpers of the Gleaner chart. Every helper is prefixed with the chart name ("gleaner.")
so that it cannot collide with a parent chart's helpers.
*/}}

{{/* Chart name, overridable with nameOverride. */}}
{{- define "gleaner.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Full name prefix of every resource: fullnameOverride, else the release name when it
already contains the chart name, else "<release>-<chart>". Truncated so that suffixes
like "-operator" keep names within 63 characters.
*/}}
{{- define "gleaner.fullname" -}}
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

{{/* "name-version" of the chart, for the helm.sh/chart label. */}}
{{- define "gleaner.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on every resource. */}}
{{- define "gleaner.labels" -}}
helm.sh/chart: {{ include "gleaner.chart" . }}
app.kubernetes.io/name: {{ include "gleaner.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gleaner
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of the operator pods. */}}
{{- define "gleaner.operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gleaner.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{/* Selector labels of the agent pods. */}}
{{- define "gleaner.agent.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gleaner.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: agent
{{- end -}}

{{/* Name of the operator's resources. */}}
{{- define "gleaner.operator.fullname" -}}
{{- printf "%s-operator" (include "gleaner.fullname" .) -}}
{{- end -}}

{{/* Name of the agent's resources. */}}
{{- define "gleaner.agent.fullname" -}}
{{- printf "%s-agent" (include "gleaner.fullname" .) -}}
{{- end -}}

{{/* ServiceAccount of the operator. */}}
{{- define "gleaner.operator.serviceAccountName" -}}
{{- if .Values.operator.serviceAccount.create -}}
{{- default (include "gleaner.operator.fullname" .) .Values.operator.serviceAccount.name -}}
{{- else -}}
{{- required "operator.serviceAccount.name is required when operator.serviceAccount.create is false" .Values.operator.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* ServiceAccount of the agent. */}}
{{- define "gleaner.agent.serviceAccountName" -}}
{{- if .Values.agent.serviceAccount.create -}}
{{- default (include "gleaner.agent.fullname" .) .Values.agent.serviceAccount.name -}}
{{- else -}}
{{- required "agent.serviceAccount.name is required when agent.serviceAccount.create is false" .Values.agent.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The image reference: registry/repository:tag[@digest]; global.imageRegistry replaces
image.registry when set. */}}
{{- define "gleaner.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- $repo := .Values.image.repository -}}
{{- $registry := .Values.image.registry -}}
{{- with (.Values.global | default dict).imageRegistry -}}
{{- $registry = . -}}
{{- end -}}
{{- if $registry -}}
{{- $repo = printf "%s/%s" $registry .Values.image.repository -}}
{{- end -}}
{{- if .Values.image.digest -}}
{{- printf "%s:%s@%s" $repo $tag .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo $tag -}}
{{- end -}}
{{- end -}}

{{/* Namespace of the Prometheus monitors. */}}
{{- define "gleaner.monitorNamespace" -}}
{{- default .Release.Namespace .Values.prometheus.serviceMonitor.namespace -}}
{{- end -}}

{{/* Name of the admission webhook's Service, configuration and certificate (room for "-tls"). */}}
{{- define "gleaner.webhook.fullname" -}}
{{- printf "%s-webhook" (include "gleaner.fullname" . | trunc 48 | trimSuffix "-") -}}
{{- end -}}

{{/*
How OfflineJobs get the operator's finalizer at creation (operator.finalizerAtAdmission):
"policy" (a MutatingAdmissionPolicy the API server evaluates itself), "webhook" (the
offlinejobs entry of the operator's webhook) or "" (neither: the operator patches it on).
"auto" is the policy when the API server serves admissionregistration.k8s.io/v1
MutatingAdmissionPolicy (Kubernetes 1.36 and later), else the webhook entry; the webhook
entry only ever when the webhook is enabled.
*/}}
{{- define "gleaner.finalizerAtAdmission" -}}
{{- $mode := .Values.operator.finalizerAtAdmission -}}
{{- $policyServed := .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy" -}}
{{- if or (eq $mode "policy") (and (eq $mode "auto") $policyServed) -}}
policy
{{- else if and (or (eq $mode "webhook") (eq $mode "auto")) .Values.operator.webhook.enabled -}}
webhook
{{- end -}}
{{- end -}}

{{/* Name of the finalizer MutatingAdmissionPolicy and its binding (cluster-scoped). */}}
{{- define "gleaner.finalizerPolicy.fullname" -}}
{{- printf "%s-offlinejob-finalizer" (include "gleaner.fullname" . | trunc 42 | trimSuffix "-") -}}
{{- end -}}
