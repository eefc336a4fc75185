{{/* Names, labels and the pod template shared by every Clarion stage. */}}

{{- define "clarion.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "clarion.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: clarion
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one component: pass (dict "root" $ "component" "harvester"). */}}
{{- define "clarion.selectorLabels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "clarion.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "clarion.secretEnv" -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ .ref.name }}
      key: {{ .ref.key }}
{{- end -}}

{{/*
The pod template of one stage. Pass a dict with:
  root (the chart context), component, binary, args, port, env (map),
  resources, needsDatabase (bool), volumes / mounts (lists, may be empty),
  nodeSelector, tolerations, affinity.
*/}}
{{- define "clarion.podTemplate" -}}
{{- $root := .root -}}
metadata:
  labels:
    {{- include "clarion.labels" $root | nindent 4 }}
    {{- include "clarion.selectorLabels" (dict "root" $root "component" .component) | nindent 4 }}
  annotations:
    checksum/config: {{ include (print $root.Template.BasePath "/configmap.yaml") $root | sha256sum }}
    {{- if $root.Values.metrics.podAnnotations }}
    prometheus.io/scrape: "true"
    prometheus.io/port: {{ .port | quote }}
    prometheus.io/path: /metrics
    {{- end }}
spec:
  {{- with $root.Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  automountServiceAccountToken: false
  securityContext:
    {{- toYaml $root.Values.podSecurityContext | nindent 4 }}
  terminationGracePeriodSeconds: {{ add $root.Values.shutdownGraceSeconds 10 }}
  {{- if $root.Values.topologySpread.enabled }}
  topologySpreadConstraints:
    {{- range $key := list "kubernetes.io/hostname" "topology.kubernetes.io/zone" }}
    - maxSkew: {{ $root.Values.topologySpread.maxSkew }}
      topologyKey: {{ $key }}
      whenUnsatisfiable: {{ $root.Values.topologySpread.whenUnsatisfiable }}
      labelSelector:
        matchLabels:
          {{- include "clarion.selectorLabels" (dict "root" $root "component" $.component) | nindent 10 }}
    {{- end }}
  {{- end }}
  containers:
    - name: {{ .component }}
      image: {{ include "clarion.image" $root }}
      imagePullPolicy: {{ $root.Values.image.pullPolicy }}
      command: [{{ .binary | quote }}]
      {{- with .args }}
      args:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      ports:
        - name: http
          containerPort: {{ .port }}
          protocol: TCP
      envFrom:
        - configMapRef:
            name: {{ include "clarion.fullname" $root }}
      env:
        - name: CLARION_HTTP_ADDR
          value: "0.0.0.0:{{ .port }}"
        {{- if .needsDatabase }}
        {{- include "clarion.secretEnv" (dict "name" "CLARION_DATABASE_URL" "ref" $root.Values.secrets.databaseUrl) | nindent 8 }}
        {{- end }}
        {{- include "clarion.secretEnv" (dict "name" "CLARION_AMQP_URL" "ref" $root.Values.secrets.amqpUrl) | nindent 8 }}
        {{- if $root.Values.secrets.extraCa.name }}
        - name: CLARION_EXTRA_CA_FILE
          value: /etc/clarion/extra-ca/ca.pem
        {{- end }}
        {{- range $name, $value := .env }}
        - name: {{ $name }}
          value: {{ $value | quote }}
        {{- end }}
        {{- with .extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      livenessProbe:
        httpGet: {path: /healthz, port: http}
        initialDelaySeconds: 5
        periodSeconds: 10
        failureThreshold: 3
      readinessProbe:
        httpGet: {path: /readyz, port: http}
        periodSeconds: 5
        failureThreshold: 2
      resources:
        {{- toYaml .resources | nindent 8 }}
      securityContext:
        {{- toYaml $root.Values.securityContext | nindent 8 }}
      volumeMounts:
        - name: tmp
          mountPath: /tmp
        {{- if $root.Values.secrets.extraCa.name }}
        - name: extra-ca
          mountPath: /etc/clarion/extra-ca
          readOnly: true
        {{- end }}
        {{- with .mounts }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
  volumes:
    - name: tmp
      emptyDir:
        sizeLimit: 64Mi
    {{- if $root.Values.secrets.extraCa.name }}
    - name: extra-ca
      secret:
        secretName: {{ $root.Values.secrets.extraCa.name }}
        items:
          - key: {{ $root.Values.secrets.extraCa.key }}
            path: ca.pem
    {{- end }}
    {{- with .volumes }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with .nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
