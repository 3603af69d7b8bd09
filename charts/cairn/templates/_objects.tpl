{{- /*
cairn.objects: the storage locations (the embedded filesystem one and those of
storage.locations) and the schedules that the values declare, as YAML documents. They are not
release objects: objects.yaml hands them to the manager in a ConfigMap, and the manager applies
them (--chart-objects). Helm cannot create Cairn's kinds in the step that creates their CRDs (it
maps every object of a release before it creates any), and a post-install hook races the API
server's discovery of the new CRDs (docs/install.md).
*/}}
{{- define "cairn.objects" -}}
{{- $fs := .Values.storage.filesystem }}
{{- if $fs.enabled }}
---
apiVersion: cairn.dev/v1alpha1
kind: BackupStorageLocation
metadata:
  name: {{ $fs.locationName | quote }}
  labels:
    {{- include "cairn.objectLabels" . | nindent 4 }}
spec:
  provider: filesystem
  default: {{ $fs.default }}
  config:
    path: {{ $fs.mountPath | quote }}
{{- end }}
{{- range $loc := .Values.storage.locations }}
{{- $cred := $loc.credential | default dict }}
---
apiVersion: cairn.dev/v1alpha1
kind: BackupStorageLocation
metadata:
  name: {{ $loc.name | quote }}
  labels:
    {{- include "cairn.objectLabels" $ | nindent 4 }}
spec:
  provider: {{ $loc.provider }}
  default: {{ $loc.default | default false }}
  accessMode: {{ $loc.accessMode | default "ReadWrite" }}
  {{- if or $loc.bucket $loc.prefix }}
  objectStorage:
    {{- with $loc.bucket }}
    bucket: {{ . | quote }}
    {{- end }}
    {{- with $loc.prefix }}
    prefix: {{ . | quote }}
    {{- end }}
  {{- end }}
  {{- with $loc.config }}
  config:
    {{- range $k, $v := . }}
    {{ $k }}: {{ $v | toString | quote }}
    {{- end }}
  {{- end }}
  {{- if or $cred.cloud $cred.existingSecret }}
  credential:
    name: {{ include "cairn.credentialSecret" (dict "root" $ "location" $loc) }}
    key: {{ $cred.key | default "cloud" }}
  {{- end }}
  {{- with $loc.validationFrequency }}
  validationFrequency: {{ . }}
  {{- end }}
{{- end }}
{{- range $s := .Values.schedules }}
---
apiVersion: cairn.dev/v1alpha1
kind: Schedule
metadata:
  name: {{ $s.name | quote }}
  labels:
    {{- include "cairn.objectLabels" $ | nindent 4 }}
spec:
  schedule: {{ $s.schedule | quote }}
  paused: {{ $s.paused | default false }}
  skipImmediately: {{ $s.skipImmediately | default false }}
  {{- with $s.retention }}
  retention:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $s.template }}
  template:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
{{- end }}
