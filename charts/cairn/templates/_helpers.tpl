{{/* The chart's name, or nameOverride. */}}
{{- define "cairn.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name: a prefix for every object, cluster-scoped ones included. */}}
{{- define "cairn.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "cairn.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "cairn.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels of the storage locations and schedules that the manager applies for the chart. */}}
{{- define "cairn.objectLabels" -}}
app.kubernetes.io/name: {{ include "cairn.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: cairn
{{- end }}

{{/* Labels that select the manager's pods. */}}
{{- define "cairn.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cairn.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: manager
{{- end }}

{{/* The manager's ServiceAccount. */}}
{{- define "cairn.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "cairn.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The claim of the filesystem location: an existing one, or the chart's. */}}
{{- define "cairn.storageClaim" -}}
{{- default (printf "%s-storage" (include "cairn.fullname" .)) .Values.storage.filesystem.persistence.existingClaim }}
{{- end }}

{{/* The Secret that holds a location's credential (the argument: dict "root" $ "location" $loc). */}}
{{- define "cairn.credentialSecret" -}}
{{- $cred := .location.credential }}
{{- if $cred.existingSecret }}
{{- $cred.existingSecret }}
{{- else }}
{{- printf "%s-%s-credential" (include "cairn.fullname" .root) .location.name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/*
The manager's generated RBAC (config/rbac/role.yaml, from the reconcilers' +kubebuilder:rbac
markers; `make manifests` copies it to files/rbac/role.yaml). "cairn.generatedRules" returns the
rules of its object of the given kind as YAML ({rules: [...]}).
*/}}
{{- define "cairn.generatedRules" -}}
{{- $rules := list }}
{{- range $doc := regexSplit "(?m)^---\\s*$" (.root.Files.Get "files/rbac/role.yaml") -1 }}
{{- $obj := fromYaml $doc }}
{{- if eq (get $obj "kind") $.kind }}
{{- $rules = $obj.rules }}
{{- end }}
{{- end }}
{{- toYaml (dict "rules" $rules) }}
{{- end }}

{{/* The Secret that holds the download server's signing key: an existing one, or the chart's. */}}
{{- define "cairn.downloadKeySecret" -}}
{{- default (printf "%s-download-signing-key" (include "cairn.fullname" .) | trunc 63 | trimSuffix "-") .Values.downloadServer.signingKey.existingSecret }}
{{- end }}

{{/* The ConfigMap of the storage locations and schedules the manager applies (objects.yaml). */}}
{{- define "cairn.objectsConfigMap" -}}
{{ include "cairn.fullname" . }}-objects
{{- end }}

{{/* The node agent's name: its DaemonSet's, and its RBAC's. */}}
{{- define "cairn.nodeAgentName" -}}
{{- printf "%s-node-agent" (include "cairn.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of the node agent's objects. */}}
{{- define "cairn.nodeAgentLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "cairn.nodeAgentSelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels that select the node agent's pods (never the manager's: another component). */}}
{{- define "cairn.nodeAgentSelectorLabels" -}}
app.kubernetes.io/name: {{ include "cairn.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: node-agent
{{- end }}

{{/* The node agent's ServiceAccount. */}}
{{- define "cairn.nodeAgentServiceAccountName" -}}
{{- $sa := .Values.nodeAgent.serviceAccount }}
{{- if $sa.create }}
{{- default (include "cairn.nodeAgentName" .) $sa.name }}
{{- else }}
{{- required "nodeAgent.serviceAccount.name is required when nodeAgent.serviceAccount.create is false" $sa.name }}
{{- end }}
{{- end }}

{{/*
The Secret of the volume data repositories' passwords, one key "<location>_<namespace>" per
repository, which the manager creates at first use (docs/volumes.md). Not one of the chart's
objects: helm never renders, upgrades or deletes it.
*/}}
{{- define "cairn.repositoryPasswordSecret" -}}
{{- printf "%s-repository-passwords" (include "cairn.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The Secret of the blob proxy's TLS certificate: the user's, or the one the manager makes. */}}
{{- define "cairn.repositoryTLSSecret" -}}
{{- default (printf "%s-repository-tls" (include "cairn.fullname" .) | trunc 63 | trimSuffix "-") .Values.nodeAgent.repositoryServer.tls.existingSecret }}
{{- end }}

{{/* The Service in front of the manager's blob proxy, which node agents write volume data through. */}}
{{- define "cairn.repositoryService" -}}
{{- printf "%s-repository" (include "cairn.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Whether backups run hooks (hooks.enabled; unset: on in rbac.mode full, off in backupOnly): the
manager is told (--hooks-enabled) and, when rbac.create, granted pods/exec create.
*/}}
{{- define "cairn.hooksEnabled" -}}
{{- if kindIs "bool" .Values.hooks.enabled }}{{ .Values.hooks.enabled }}{{ else }}{{ ne .Values.rbac.mode "backupOnly" }}{{ end }}
{{- end }}
