{{/*
Expand the name of the chart.
*/}}
{{- define "lookaround.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Create a default fully qualified app name (63 characters at most: some Kubernetes name fields
are limited to this by the DNS naming spec). If the release name contains the chart name it is
used as the full name.
*/}}
{{- define "lookaround.fullname" -}}
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

{{/*
Create chart name and version as used by the chart label.
*/}}
{{- define "lookaround.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Common labels
*/}}
{{- define "lookaround.labels" -}}
helm.sh/chart: {{ include "lookaround.chart" . }}
{{ include "lookaround.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: lookaround
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Selector labels
*/}}
{{- define "lookaround.selectorLabels" -}}
app.kubernetes.io/name: {{ include "lookaround.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Selector labels of the workers (the trainer's pods carry component=trainer instead).
*/}}
{{- define "lookaround.workerSelectorLabels" -}}
{{ include "lookaround.selectorLabels" . }}
app.kubernetes.io/component: worker
{{- end }}

{{/*
Create the name of the service account to use
*/}}
{{- define "lookaround.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "lookaround.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The image, tag defaulting to the chart's appVersion.
*/}}
{{- define "lookaround.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
Name of the model registry claim.
*/}}
{{- define "lookaround.registryClaim" -}}
{{- default (printf "%s-registry" (include "lookaround.fullname" .)) .Values.registry.existingClaim }}
{{- end }}

{{- define "lookaround.saslEnabled" -}}
{{- if hasPrefix "SASL_" .Values.kafka.securityProtocol }}true{{ end }}
{{- end }}

{{- define "lookaround.tlsEnabled" -}}
{{- if and (has .Values.kafka.securityProtocol (list "SSL" "SASL_SSL")) .Values.kafka.tls.existingSecret }}true{{ end }}
{{- end }}

{{/*
Environment of every lookaround container: settings from the ConfigMap; secrets only as
secretKeyRef (never a value in the chart).
*/}}
{{- define "lookaround.env" -}}
- name: LOOKAROUND_WORKER_ID
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- if include "lookaround.saslEnabled" . }}
- name: LOOKAROUND_KAFKA_SASL_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ required "kafka.sasl.existingSecret is required when kafka.securityProtocol is SASL_*" .Values.kafka.sasl.existingSecret }}
      key: {{ .Values.kafka.sasl.usernameKey }}
- name: LOOKAROUND_KAFKA_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .Values.kafka.sasl.existingSecret }}
      key: {{ .Values.kafka.sasl.passwordKey }}
{{- end }}
{{- if .Values.redis.existingSecret }}
- name: LOOKAROUND_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .Values.redis.existingSecret }}
      key: {{ .Values.redis.passwordKey }}
{{- end }}
{{- if .Values.registry.keySecret }}
- name: LOOKAROUND_REGISTRY_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .Values.registry.keySecret }}
      key: {{ .Values.registry.keyKey }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "lookaround.envFrom" -}}
- configMapRef:
    name: {{ include "lookaround.fullname" . }}
{{- end }}

{{/*
Volume mounts shared by the worker and the trainer.
*/}}
{{- define "lookaround.volumeMounts" -}}
- name: registry
  mountPath: {{ .Values.registry.mountPath }}
- name: tmp
  mountPath: /tmp
{{- if include "lookaround.tlsEnabled" . }}
- name: kafka-tls
  mountPath: /etc/lookaround/kafka-tls
  readOnly: true
{{- end }}
{{- end }}

{{- define "lookaround.volumes" -}}
- name: registry
  persistentVolumeClaim:
    claimName: {{ include "lookaround.registryClaim" . }}
- name: tmp
  emptyDir: {}
{{- if include "lookaround.tlsEnabled" . }}
- name: kafka-tls
  secret:
    secretName: {{ .Values.kafka.tls.existingSecret }}
    defaultMode: 0440
{{- end }}
{{- end }}
