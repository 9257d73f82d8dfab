{{/*
Named templates that put turngate in a pod. Each takes a scope with two keys, Values (this
chart's values) and Release:

  in an agent chart that depends on this chart:
    {{- $turngate := dict "Values" .Values.turngate "Release" .Release }}
  inside this chart, the root context works as it is: .

  turngate.initContainers  the sidecar, when nativeSidecar is true (else nothing)
  turngate.containers      the sidecar, when nativeSidecar is false (else nothing)
  turngate.volumes         the volumes the sidecar mounts
  turngate.appEnv          OPENAI_BASE_URL, ANTHROPIC_BASE_URL, GOOGLE_GEMINI_BASE_URL, … for the app
  turngate.podAnnotations  a checksum of the policy, so a policy change rolls the pods
  turngate.sidecar         the container itself, for either list
*/}}

{{- define "turngate.initContainers" -}}
{{- if .Values.nativeSidecar }}
{{- include "turngate.sidecar" . }}
{{- end }}
{{- end }}

{{- define "turngate.containers" -}}
{{- if not .Values.nativeSidecar }}
{{- include "turngate.sidecar" . }}
{{- end }}
{{- end }}

{{- define "turngate.sidecar" -}}
- name: turngate
  image: {{ include "turngate.image" . | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  # On a crash the pod status shows the last log lines.
  terminationMessagePolicy: FallbackToLogsOnError
  {{- if .Values.nativeSidecar }}
  restartPolicy: Always
  {{- end }}
  {{- /* Always set: the image's CMD (--host 0.0.0.0) is for a plain `docker run`. */}}
  args:
    - --host
    - {{ .Values.listen.host | quote }}
    - --port
    - {{ .Values.listen.port | int | quote }}
  env:
    {{- include "turngate.env" . | nindent 4 }}
  {{- if not (include "turngate.isLoopback" .) }}
  ports:
    - name: turngate
      containerPort: {{ .Values.listen.port | int }}
      protocol: TCP
  {{- end }}
  startupProbe:
    {{- include "turngate.probeAction" (dict "scope" . "path" "/readyz") | nindent 4 }}
    {{- toYaml .Values.probes.startup | nindent 4 }}
  readinessProbe:
    {{- include "turngate.probeAction" (dict "scope" . "path" "/readyz") | nindent 4 }}
    {{- toYaml .Values.probes.readiness | nindent 4 }}
  livenessProbe:
    {{- include "turngate.probeAction" (dict "scope" . "path" "/healthz") | nindent 4 }}
    {{- toYaml .Values.probes.liveness | nindent 4 }}
  {{- with .Values.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    runAsNonRoot: true
    {{- if not (kindIs "invalid" .Values.securityContext.runAsUser) }}
    runAsUser: {{ .Values.securityContext.runAsUser | int64 }}
    {{- end }}
    {{- if not (kindIs "invalid" .Values.securityContext.runAsGroup) }}
    runAsGroup: {{ .Values.securityContext.runAsGroup | int64 }}
    {{- end }}
    readOnlyRootFilesystem: true
    allowPrivilegeEscalation: false
    privileged: false
    capabilities:
      drop:
        - ALL
    seccompProfile:
      type: RuntimeDefault
  volumeMounts:
    - name: turngate-tmp
      mountPath: /tmp
    {{- if eq .Values.state.backend "sqlite" }}
    - name: turngate-state
      mountPath: {{ .Values.state.sqlite.mountPath }}
    {{- end }}
    {{- if include "turngate.hasPolicy" . }}
    - name: turngate-policy
      mountPath: {{ .Values.policy.mountPath }}
      readOnly: true
    {{- end }}
{{- end }}

{{/* The sidecar's environment, in order: a variable is defined before any $(reference). */}}
{{- define "turngate.env" -}}
{{- if .Values.mode }}
- name: TURNGATE_MODE
  value: {{ .Values.mode | quote }}
{{- end }}
- name: TURNGATE_LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
- name: TURNGATE_MAX_BODY_BYTES
  value: {{ .Values.maxBodyBytes | int64 | quote }}
- name: TURNGATE_UPSTREAM_OPENAI
  value: {{ .Values.upstreams.openai | quote }}
- name: TURNGATE_UPSTREAM_ANTHROPIC
  value: {{ .Values.upstreams.anthropic | quote }}
- name: TURNGATE_UPSTREAM_GEMINI
  value: {{ .Values.upstreams.gemini | quote }}
{{- if .Values.upstreams.azure }}
- name: TURNGATE_UPSTREAM_AZURE
  value: {{ .Values.upstreams.azure | quote }}
{{- end }}
{{- if and (eq .Values.state.backend "redis") .Values.state.redis.passwordSecret.name }}
- name: REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .Values.state.redis.passwordSecret.name | quote }}
      key: {{ .Values.state.redis.passwordSecret.key | quote }}
{{- end }}
{{- if .Values.credentialSecret.name }}
- name: TURNGATE_CREDENTIAL_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ .Values.credentialSecret.name | quote }}
      key: {{ .Values.credentialSecret.key | quote }}
{{- end }}
- name: TURNGATE_STATE
  value: {{ include "turngate.stateURL" . | quote }}
- name: TURNGATE_OPERATION_TTL
  value: {{ .Values.state.operationTtl | int64 | quote }}
- name: TURNGATE_REPLAY_MAX_BYTES
  value: {{ .Values.state.replayMaxBytes | int64 | quote }}
{{- if include "turngate.hasPolicy" . }}
- name: TURNGATE_CONFIG
  value: {{ printf "%s/%s" (trimSuffix "/" .Values.policy.mountPath) .Values.policy.key | quote }}
{{- end }}
{{- if .Values.otel.enabled }}
- name: K8S_POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: K8S_NAMESPACE_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: OTEL_SERVICE_NAME
  value: {{ .Values.otel.serviceName | quote }}
- name: OTEL_RESOURCE_ATTRIBUTES
  value: {{ include "turngate.otelResourceAttributes" . | quote }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ .Values.otel.endpoint | quote }}
- name: OTEL_EXPORTER_OTLP_PROTOCOL
  value: {{ .Values.otel.protocol | quote }}
{{- if .Values.otel.headersSecret.name }}
- name: OTEL_EXPORTER_OTLP_HEADERS
  valueFrom:
    secretKeyRef:
      name: {{ .Values.otel.headersSecret.name | quote }}
      key: {{ .Values.otel.headersSecret.key | quote }}
{{- end }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
The --state URL. Redis: the password is not in the values; the kubelet expands
$(REDIS_PASSWORD) from the variable defined just before TURNGATE_STATE. It must be URL-safe.
*/}}
{{- define "turngate.stateURL" -}}
{{- $state := .Values.state -}}
{{- if eq $state.backend "sqlite" -}}
{{- printf "sqlite://%s/%s" (trimSuffix "/" $state.sqlite.mountPath) $state.sqlite.file -}}
{{- if eq (default "full" $state.sqlite.sync) "normal" -}}?sync=normal{{- end -}}
{{- else if eq $state.backend "memory" -}}
memory://
{{- else if eq $state.backend "redis" -}}
{{- $parts := splitn "://" 2 $state.redis.url -}}
{{- $user := $state.redis.username -}}
{{- if $state.redis.passwordSecret.name -}}
{{- printf "%s://%s:$(REDIS_PASSWORD)@%s" $parts._0 $user $parts._1 -}}
{{- else if $user -}}
{{- printf "%s://%s@%s" $parts._0 $user $parts._1 -}}
{{- else -}}
{{- $state.redis.url -}}
{{- end -}}
{{- else -}}
{{- fail (printf "state.backend %q: use sqlite, redis or memory" $state.backend) -}}
{{- end -}}
{{- end }}

{{- define "turngate.otelResourceAttributes" -}}
{{- $attributes := list "k8s.pod.name=$(K8S_POD_NAME)" "k8s.namespace.name=$(K8S_NAMESPACE_NAME)" -}}
{{- range $key, $value := .Values.otel.resourceAttributes -}}
{{- $attributes = append $attributes (printf "%s=%v" $key $value) -}}
{{- end -}}
{{- join "," $attributes -}}
{{- end }}

{{/*
Probes. A loopback listener cannot be reached by the kubelet (an httpGet probe dials the pod
IP), so the probe runs inside the container, with proxies from the environment ignored.
*/}}
{{- define "turngate.probeAction" -}}
{{- $scope := .scope -}}
{{- if include "turngate.isLoopback" $scope -}}
exec:
  command:
    - python
    - -c
    - 'import sys, urllib.request as u; u.build_opener(u.ProxyHandler({})).open(sys.argv[1], timeout=2)'
    - {{ printf "http://%s%s" (include "turngate.clientAuthority" $scope) .path | quote }}
{{- else -}}
httpGet:
  path: {{ .path }}
  port: {{ $scope.Values.listen.port | int }}
{{- end -}}
{{- end }}

{{- define "turngate.volumes" -}}
- name: turngate-tmp
  emptyDir:
    sizeLimit: 16Mi
{{- if eq .Values.state.backend "sqlite" }}
- name: turngate-state
  emptyDir:
    sizeLimit: {{ .Values.state.sqlite.sizeLimit | quote }}
{{- end }}
{{- if include "turngate.hasPolicy" . }}
- name: turngate-policy
  configMap:
    name: {{ include "turngate.policyConfigMapName" . | quote }}
{{- end }}
{{- end }}

{{- define "turngate.appEnv" -}}
{{- $base := printf "http://%s" (include "turngate.clientAuthority" .) -}}
- name: OPENAI_BASE_URL
  value: {{ printf "%s/openai/v1" $base | quote }}
- name: ANTHROPIC_BASE_URL
  value: {{ printf "%s/anthropic" $base | quote }}
- name: GOOGLE_GEMINI_BASE_URL
  value: {{ printf "%s/gemini" $base | quote }}
{{- with .Values.app.geminiApiVersion }}
- name: GOOGLE_GENAI_API_VERSION
  value: {{ . | quote }}
{{- end }}
{{- end }}

{{- define "turngate.podAnnotations" -}}
{{- if and .Values.policy.config (not .Values.policy.existingConfigMap) -}}
checksum/turngate-policy: {{ toYaml .Values.policy.config | sha256sum | quote }}
{{- end -}}
{{- end }}

{{- define "turngate.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository .Values.image.tag -}}
{{- end -}}
{{- end }}

{{- define "turngate.hasPolicy" -}}
{{- if or .Values.policy.existingConfigMap .Values.policy.config }}true{{ end -}}
{{- end }}

{{- define "turngate.policyConfigMapName" -}}
{{- if .Values.policy.existingConfigMap -}}
{{- .Values.policy.existingConfigMap -}}
{{- else -}}
{{- printf "%s-turngate-policy" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end }}

{{- define "turngate.isLoopback" -}}
{{- if has .Values.listen.host (list "127.0.0.1" "::1" "localhost") }}true{{ end -}}
{{- end }}

{{/* host:port an app in the same pod dials; a wildcard listener is dialled on loopback. */}}
{{- define "turngate.clientAuthority" -}}
{{- $host := .Values.listen.host -}}
{{- if eq $host "0.0.0.0" }}{{ $host = "127.0.0.1" }}{{ else if eq $host "::" }}{{ $host = "::1" }}{{ end -}}
{{- if contains ":" $host }}{{ $host = printf "[%s]" $host }}{{ end -}}
{{- printf "%s:%d" $host (.Values.listen.port | int) -}}
{{- end }}

{{/* Names and labels of this chart's own objects (they need the root context). */}}
{{- define "turngate.exampleAgentName" -}}
{{- printf "%s-example-agent" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end }}

{{- define "turngate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/part-of: turngate
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}
