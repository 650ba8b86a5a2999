{{/* The release's name prefix: the release name, with the chart's name when it does not hold it. */}}
{{- define "mirrorwatch.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* A Kubernetes name of a link's: lower case, "_" and "." as "-" (link names allow letters, digits, . _ -). */}}
{{- define "mirrorwatch.linkSlug" -}}
{{- . | lower | replace "_" "-" | replace "." "-" | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "mirrorwatch.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of one component: (dict "root" $ "component" "monitor") */}}
{{- define "mirrorwatch.selectorLabels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* A component's PodDisruptionBudget: (dict "root" $ "component" "monitor"), as for selectorLabels */}}
{{- define "mirrorwatch.pdb" -}}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "mirrorwatch.fullname" .root }}-{{ .component }}
  labels:
    {{- include "mirrorwatch.labels" .root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
spec:
  maxUnavailable: {{ .root.Values.podDisruptionBudget.maxUnavailable }}
  selector:
    matchLabels:
      {{- include "mirrorwatch.selectorLabels" . | nindent 6 }}
{{- end -}}

{{- define "mirrorwatch.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "mirrorwatch.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The image of an engine: (dict "root" $ "engine" "python") */}}
{{- define "mirrorwatch.image" -}}
{{- $tag := default .root.Chart.AppVersion .root.Values.image.tag -}}
{{- if eq .engine "spark" -}}{{- $tag = printf "%s-spark" $tag -}}{{- end -}}
{{- printf "%s:%s" .root.Values.image.repository $tag -}}
{{- end -}}

{{/* The config file every component reads: the user's config with the chart's http and state_dir. */}}
{{- define "mirrorwatch.config" -}}
{{- $http := dict "host" "0.0.0.0" "port" (int .Values.http.port) -}}
{{- if .Values.http.webConfigSecret -}}
{{- $_ := set $http "web_config_file" "/etc/mirrorwatch/web/web.yml" -}}
{{- end -}}
{{- $config := mergeOverwrite (deepCopy .Values.config) (dict "http" $http "state_dir" "/var/lib/mirrorwatch") -}}
{{- toYaml $config -}}
{{- end -}}

{{/* What every mirrorwatch pod has: its service account, security, volumes; (dict "root" $ "grace" N) */}}
{{- define "mirrorwatch.podCommon" -}}
serviceAccountName: {{ include "mirrorwatch.serviceAccountName" .root }}
automountServiceAccountToken: false
terminationGracePeriodSeconds: {{ .grace }}
securityContext:
  {{- toYaml .root.Values.podSecurityContext | nindent 2 }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .root.Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .root.Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .root.Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
volumes:
  - name: config
    configMap:
      name: {{ include "mirrorwatch.fullname" .root }}-config
  - name: state
    emptyDir: {}
  - name: tmp
    emptyDir: {}
  {{- if .root.Values.http.webConfigSecret }}
  - name: web
    secret:
      secretName: {{ .root.Values.http.webConfigSecret }}
  {{- end }}
{{- end -}}

{{/* What every mirrorwatch container has: image, environment, security, mounts; (dict "root" $ "engine" E) */}}
{{- define "mirrorwatch.containerCommon" -}}
image: {{ include "mirrorwatch.image" . | quote }}
imagePullPolicy: {{ .root.Values.image.pullPolicy }}
env:
  - name: PYTHONUNBUFFERED
    value: "1"
  {{- with .root.Values.env }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with .root.Values.secrets }}
envFrom:
  {{- range . }}
  - secretRef:
      name: {{ . }}
  {{- end }}
{{- end }}
securityContext:
  {{- toYaml .root.Values.securityContext | nindent 2 }}
volumeMounts:
  - name: config
    mountPath: /etc/mirrorwatch/mirrorwatch.yaml
    subPath: mirrorwatch.yaml
    readOnly: true
  - name: state
    mountPath: /var/lib/mirrorwatch
  - name: tmp
    mountPath: /tmp
  {{- if .root.Values.http.webConfigSecret }}
  - name: web
    mountPath: /etc/mirrorwatch/web
    readOnly: true
  {{- end }}
{{- end -}}

{{- define "mirrorwatch.scheme" -}}
{{- ternary "HTTPS" "HTTP" (and (not (empty .Values.http.webConfigSecret)) .Values.http.tls) -}}
{{- end -}}

{{/* A probe: (dict "root" $ "probe" .Values.livenessProbe). With basic auth every path answers 401 without
credentials (as the exporters' web config does), which a probe cannot hold: it then only connects. */}}
{{- define "mirrorwatch.probe" -}}
{{- if and .root.Values.http.webConfigSecret .root.Values.http.basicAuth }}
tcpSocket:
  port: http
{{- else }}
httpGet:
  path: {{ .probe.path }}
  port: http
  scheme: {{ include "mirrorwatch.scheme" .root }}
{{- end }}
{{- with .probe.initialDelaySeconds }}
initialDelaySeconds: {{ . }}
{{- end }}
periodSeconds: {{ .probe.periodSeconds }}
timeoutSeconds: {{ .probe.timeoutSeconds }}
failureThreshold: {{ .probe.failureThreshold }}
{{- end -}}

{{/* The HTTP port with liveness on /healthz and readiness on /readyz: (root) */}}
{{- define "mirrorwatch.httpContainer" -}}
ports:
  - name: http
    containerPort: {{ .Values.http.port }}
    protocol: TCP
livenessProbe:
  {{- include "mirrorwatch.probe" (dict "root" . "probe" .Values.livenessProbe) | nindent 2 }}
readinessProbe:
  {{- include "mirrorwatch.probe" (dict "root" . "probe" .Values.readinessProbe) | nindent 2 }}
{{- end -}}
