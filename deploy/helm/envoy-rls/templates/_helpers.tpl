{{/*
Chart name, truncated to the 63 characters a label value allows.
*/}}
{{- define "envoy-rls.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full resource name: "<release>-<chart>", or the release name alone when it
already contains the chart name.
*/}}
{{- define "envoy-rls.fullname" -}}
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

{{- define "envoy-rls.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "envoy-rls.selectorLabels" -}}
app.kubernetes.io/name: {{ include "envoy-rls.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "envoy-rls.labels" -}}
helm.sh/chart: {{ include "envoy-rls.chart" . }}
{{ include "envoy-rls.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/component: rate-limit-service
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "envoy-rls.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "envoy-rls.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "envoy-rls.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/* The ConfigMap holding the rule files. */}}
{{- define "envoy-rls.rulesConfigMap" -}}
{{- .Values.rules.existingConfigMap | default (printf "%s-rules" (include "envoy-rls.fullname" .)) }}
{{- end }}

{{/*
Whether the container gets GOMEMLIMIT from its memory limit: when
resources.limits.memory is set and extraEnv does not set GOMEMLIMIT itself.
*/}}
{{- define "envoy-rls.goMemLimit" -}}
{{- $own := false }}
{{- range .Values.extraEnv }}
{{- if eq (toString .name) "GOMEMLIMIT" }}{{ $own = true }}{{ end }}
{{- end }}
{{- if and (dig "limits" "memory" "" .Values.resources) (not $own) }}true{{- end }}
{{- end }}

{{/* Whether the pod gets an HMAC secret file. */}}
{{- define "envoy-rls.hmacEnabled" -}}
{{- if or .Values.hmac.existingSecret .Values.hmac.secret }}true{{- end }}
{{- end }}

{{/* Whether the admin API and the console are on: a token file is given. */}}
{{- define "envoy-rls.adminTokenEnabled" -}}
{{- if or .Values.admin.token.existingSecret .Values.admin.token.value }}true{{- end }}
{{- end }}

{{/* The Secret holding the admin token file. */}}
{{- define "envoy-rls.adminTokenSecretName" -}}
{{- .Values.admin.token.existingSecret | default (printf "%s-admin-token" (include "envoy-rls.fullname" .)) }}
{{- end }}

{{/* The Secret holding the HMAC key. */}}
{{- define "envoy-rls.hmacSecretName" -}}
{{- .Values.hmac.existingSecret | default (printf "%s-hmac" (include "envoy-rls.fullname" .)) }}
{{- end }}

{{/*
Checks the values that would otherwise give a pod that cannot start or, worse,
one that starts and limits wrongly. Included by the Deployment, so every render
runs it; each failure says what to set.
*/}}
{{- define "envoy-rls.validate" -}}
{{- $store := .Values.store }}
{{- if not (has $store (list "memory" "redis")) }}
{{- fail (printf "store %q: must be memory or redis" $store) }}
{{- end }}
{{- if not (has .Values.defaultHeaders (list "full" "retry_after" "none")) }}
{{- fail (printf "defaultHeaders %q: must be full, retry_after or none" .Values.defaultHeaders) }}
{{- end }}
{{- if not (has .Values.logLevel (list "debug" "info" "warn" "error")) }}
{{- fail (printf "logLevel %q: must be debug, info, warn or error" .Values.logLevel) }}
{{- end }}
{{- if eq $store "redis" }}
{{- if not .Values.redis.addr }}
{{- fail "store: redis needs redis.addr (host:port, comma-separated for cluster seeds or sentinels)" }}
{{- end }}
{{- if not (or (include "envoy-rls.hmacEnabled" .) .Values.hmac.redisKey) }}
{{- fail "store: redis needs an HMAC secret shared by every replica (it keys the digests in Redis keys): set hmac.existingSecret to a Secret you manage, or pass hmac.secret with --set-file hmac.secret=<file>, or let the replicas share one stored in Redis with hmac.redisKey. The chart generates none, because a key that changes on upgrade would reset every limit." }}
{{- end }}
{{- if not (has .Values.redis.mode (list "auto" "standalone" "cluster" "sentinel")) }}
{{- fail (printf "redis.mode %q: must be auto, standalone, cluster or sentinel" .Values.redis.mode) }}
{{- end }}
{{- if and (eq .Values.redis.mode "sentinel") (not .Values.redis.sentinelMaster) }}
{{- fail "redis.mode: sentinel needs redis.sentinelMaster (the master name the sentinels monitor)" }}
{{- end }}
{{- if and (eq .Values.redis.mode "standalone") (contains "," .Values.redis.addr) }}
{{- fail (printf "redis.mode: standalone takes exactly one address, but redis.addr is %q: use auto or cluster for cluster seeds, sentinel for sentinels" .Values.redis.addr) }}
{{- end }}
{{- if and (or .Values.redis.tls.ca.existingSecret .Values.redis.tls.clientCert.existingSecret) (not .Values.redis.tls.enabled) }}
{{- fail "redis.tls.ca / redis.tls.clientCert are set but redis.tls.enabled is false: enable TLS or remove them" }}
{{- end }}
{{- end }}
{{- if and .Values.hmac.redisKey (include "envoy-rls.hmacEnabled" .) }}
{{- fail "hmac.redisKey is set together with hmac.existingSecret or hmac.secret: set one; a configured secret keeps the key out of Redis" }}
{{- end }}
{{- if and .Values.hmac.redisKey (ne $store "redis") }}
{{- fail "hmac.redisKey needs store: redis" }}
{{- end }}
{{- if and .Values.hmac.secret (not .Values.hmac.existingSecret) (lt (len .Values.hmac.secret) 16) }}
{{- fail (printf "hmac.secret holds %d bytes; the HMAC key must be at least 16" (len .Values.hmac.secret)) }}
{{- end }}
{{- if and (eq $store "memory") (not .Values.memory.allowPerPodLimits) }}
{{- if or .Values.autoscaling.enabled (gt (int .Values.replicaCount) 1) }}
{{- fail "store: memory counts per pod, so more than one replica (or autoscaling) multiplies every limit by the number of pods: use store: redis, or set memory.allowPerPodLimits=true if per-pod limits are what you want" }}
{{- end }}
{{- end }}
{{- if le (int .Values.terminationGracePeriodSeconds) (add (int .Values.drainTimeoutSeconds) (int .Values.preStopSleepSeconds)) }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must exceed preStopSleepSeconds + drainTimeoutSeconds (%d + %d), or Kubernetes kills the pod mid-drain" (int .Values.terminationGracePeriodSeconds) (int .Values.preStopSleepSeconds) (int .Values.drainTimeoutSeconds)) }}
{{- end }}
{{- if include "envoy-rls.adminTokenEnabled" . }}
{{- if and .Values.admin.token.value (not .Values.admin.token.existingSecret) (not (contains ":" .Values.admin.token.value)) }}
{{- fail "admin.token.value is the token file: one name:token line per token (e.g. ops:<a token of 16 characters or more>)" }}
{{- end }}
{{- if not .Values.podSecurityContext.fsGroup }}
{{- fail "admin.token needs podSecurityContext.fsGroup: a Secret volume's files are root's, and the non-root process reads the token file through the fsGroup (mode 0440, which envoy-rls accepts for a root-owned file of its own group)" }}
{{- end }}
{{- end }}
{{- if eq (int .Values.grpc.port) (int .Values.admin.port) }}
{{- fail (printf "grpc.port and admin.port are both %d: the two listeners need different ports" (int .Values.grpc.port)) }}
{{- end }}
{{- if and (not .Values.rules.existingConfigMap) (not .Values.rules.files) }}
{{- fail "no rules: set rules.files or rules.existingConfigMap" }}
{{- end }}
{{- range $name, $_ := .Values.rules.files }}
{{- if not (or (hasSuffix ".yaml" $name) (hasSuffix ".yml" $name)) }}
{{- fail (printf "rules.files key %q: rule file names must end in .yaml or .yml, or envoy-rls ignores them" $name) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The --replicas-hint: localFallback.replicasHint, or when 0 the most pods
that can run (autoscaling.maxReplicas with an HPA, else replicaCount, at
least 1), so that local shares add up to at most the limit.
*/}}
{{- define "envoy-rls.replicasHint" -}}
{{- if gt (int .Values.localFallback.replicasHint) 0 -}}
{{- int .Values.localFallback.replicasHint -}}
{{- else if .Values.autoscaling.enabled -}}
{{- max 1 (int .Values.autoscaling.maxReplicas) -}}
{{- else -}}
{{- max 1 (int .Values.replicaCount) -}}
{{- end -}}
{{- end -}}

{{/*
The rule-set bounds, as container args (12 spaces, like the args lists of
the Deployment and the rules-check Job, so that both apply the same bounds).
*/}}
{{- define "envoy-rls.ruleLimitArgs" -}}
{{- if gt (int64 .Values.rules.maxBytes) 0 }}
            - --config-max-bytes={{ int64 .Values.rules.maxBytes }}
{{- end }}
{{- if gt (int64 .Values.rules.maxDescriptors) 0 }}
            - --config-max-descriptors={{ int64 .Values.rules.maxDescriptors }}
{{- end }}
{{- end }}
