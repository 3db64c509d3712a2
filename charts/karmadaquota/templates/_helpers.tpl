{{/* Prefix of every object's name, here and on karmada-apiserver. */}}
{{- define "karmadaquota.fullname" -}}
{{- default "karmadaquota" .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "karmadaquota.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object; (dict "root" $ "component" "webhook") adds the component. */}}
{{- define "karmadaquota.labels" -}}
helm.sh/chart: {{ include "karmadaquota.chart" .root }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/part-of: karmadaquota
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{- end -}}

{{/* Labels of the objects on karmada-apiserver (the hook Jobs manage them, not Helm). */}}
{{- define "karmadaquota.karmadaLabels" -}}
app.kubernetes.io/managed-by: karmadaquota-install
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: karmadaquota
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* Pod selector of a component: (dict "root" $ "component" "webhook"). */}}
{{- define "karmadaquota.selectorLabels" -}}
app.kubernetes.io/name: {{ include "karmadaquota.fullname" .root }}-{{ .component }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end -}}

{{- define "karmadaquota.image" -}}
{{- $registry := default .Values.image.registry .Values.global.imageRegistry -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if $registry -}}
{{ $registry }}/{{ .Values.image.repository }}:{{ $tag }}
{{- else -}}
{{ .Values.image.repository }}:{{ $tag }}
{{- end -}}
{{- end -}}

{{- define "karmadaquota.imagePullSecrets" -}}
{{- with .Values.global.imagePullSecrets }}
imagePullSecrets:
  {{- range . }}
  - name: {{ . }}
  {{- end }}
{{- end }}
{{- end -}}

{{/* The webhook's Service name and the host karmada-apiserver calls it at. */}}
{{- define "karmadaquota.webhookService" -}}
{{ include "karmadaquota.fullname" . }}-webhook
{{- end -}}

{{- define "karmadaquota.webhookHost" -}}
{{- if .Values.karmadaApiserver.webhookURLHost -}}
{{ .Values.karmadaApiserver.webhookURLHost }}
{{- else -}}
{{ include "karmadaquota.webhookService" . }}.{{ .Release.Namespace }}.svc
{{- end -}}
{{- end -}}

{{/* The names the serving certificate is valid for, one per line. */}}
{{- define "karmadaquota.webhookDNSNames" -}}
{{- $svc := include "karmadaquota.webhookService" . -}}
{{- $ns := .Release.Namespace -}}
{{ $svc }}
{{ $svc }}.{{ $ns }}
{{ $svc }}.{{ $ns }}.svc
{{ $svc }}.{{ $ns }}.svc.{{ .Values.clusterDomain }}
{{- with .Values.karmadaApiserver.webhookURLHost }}
{{ . }}
{{- end }}
{{- end -}}

{{/* The Secret the webhook serves from (tls.crt, tls.key) and the hook reads ca.crt from. */}}
{{- define "karmadaquota.certSecretName" -}}
{{- if eq .Values.certificates.mode "existingSecret" -}}
{{- required "certificates.existingSecret.name is required with certificates.mode=existingSecret" .Values.certificates.existingSecret.name -}}
{{- else -}}
{{- default (printf "%s-webhook-cert" (include "karmadaquota.fullname" .)) .Values.certificates.secretName -}}
{{- end -}}
{{- end -}}

{{- define "karmadaquota.checkMode" -}}
{{- $modes := list "selfSigned" "existingSecret" "certManager" -}}
{{- if not (has .Values.certificates.mode $modes) -}}
{{- fail (printf "certificates.mode must be one of %s, not %q" (join ", " $modes) .Values.certificates.mode) -}}
{{- end -}}
{{- end -}}

{{/*
The kubeconfig Secret a component mounts: (dict "root" $ "component" "webhook").
Prints "<secret name> <key>".
*/}}
{{- define "karmadaquota.kubeconfigRef" -}}
{{- $c := index .root.Values .component -}}
{{- if $c.kubeconfig.content -}}
{{ include "karmadaquota.fullname" .root }}-{{ .component }}-kubeconfig karmada.config
{{- else if $c.kubeconfig.secretName -}}
{{ $c.kubeconfig.secretName }} {{ $c.kubeconfig.key }}
{{- else if .root.Values.componentCredentials.enabled -}}
{{ include "karmadaquota.issuedSecret" (dict "root" .root "component" .component) }} karmada.config
{{- else -}}
{{ .root.Values.karmadaApiserver.kubeconfigSecret.name }} {{ .root.Values.karmadaApiserver.kubeconfigSecret.key }}
{{- end -}}
{{- end -}}

{{/* The host Secret the hooks write a component's issued kubeconfig into (componentCredentials). */}}
{{- define "karmadaquota.issuedSecret" -}}
{{ include "karmadaquota.fullname" .root }}-{{ .component }}-karmada
{{- end -}}

{{/*
`install` flags that issue the components' kubeconfigs (componentCredentials), one per line:
--issue-kubeconfig for each component without a kubeconfig of its own, --token-ttl, and
--member-secrets-role. Empty when nothing is to be issued.
*/}}
{{- define "karmadaquota.issueArgs" -}}
{{- $root := . -}}
{{- $name := include "karmadaquota.fullname" . -}}
{{- $cc := .Values.componentCredentials -}}
{{- if $cc.enabled }}
{{- range $component := list "webhook" "controller" }}
{{- $c := index $root.Values $component }}
{{- if not (or $c.kubeconfig.content $c.kubeconfig.secretName) }}
- --issue-kubeconfig={{ $root.Values.karmadaApiserver.namespace }}/{{ $name }}-{{ $component }}={{ include "karmadaquota.issuedSecret" (dict "root" $root "component" $component) }}
{{- end }}
{{- end }}
- --token-ttl={{ $cc.tokenTTL }}
{{- if $cc.narrowMemberSecrets }}
- --member-secrets-role={{ .Values.karmadaApiserver.clusterSecretsNamespace }}/{{ $name }}-controller-cluster-secrets
{{- end }}
{{- end }}
{{- end -}}

{{/*
Host RBAC rules on the issued Secrets: create (which resourceNames cannot restrict) and the
given verbs on their names. (dict "root" $ "verbs" (list "get" "update")).
*/}}
{{- define "karmadaquota.issuedSecretRules" -}}
- apiGroups: [""]
  resources: [secrets]
  verbs: [create]
- apiGroups: [""]
  resources: [secrets]
  resourceNames:
    {{- range splitList "\n" (include "karmadaquota.issuedSecrets" .root | trim) }}
    - {{ . }}
    {{- end }}
  verbs: {{ toJson .verbs }}
{{- end -}}

{{/* The issued Secrets the hooks write (names, one per line). */}}
{{- define "karmadaquota.issuedSecrets" -}}
{{- $root := . -}}
{{- if .Values.componentCredentials.enabled }}
{{- range $component := list "webhook" "controller" }}
{{- $c := index $root.Values $component }}
{{- if not (or $c.kubeconfig.content $c.kubeconfig.secretName) }}
{{ include "karmadaquota.issuedSecret" (dict "root" $root "component" $component) }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/* A Secret volume mounting one key of a kubeconfig Secret as karmada.config. */}}
{{- define "karmadaquota.kubeconfigVolume" -}}
{{- $ref := splitList " " (include "karmadaquota.kubeconfigRef" .) -}}
- name: karmada-config
  secret:
    secretName: {{ index $ref 0 }}
    items:
      - key: {{ index $ref 1 }}
        path: karmada.config
{{- end -}}

{{/* The restricted securityContexts every container of the chart runs under. */}}
{{- define "karmadaquota.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "karmadaquota.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: [ALL]
{{- end -}}

{{/* Pod scheduling of a component or the hooks: pass the values block. */}}
{{- define "karmadaquota.scheduling" -}}
{{- with .priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* topologySpreadConstraints with the component's labelSelector filled in. */}}
{{- define "karmadaquota.topologySpread" -}}
{{- $c := index .root.Values .component -}}
{{- $selector := include "karmadaquota.selectorLabels" . | fromYaml -}}
{{- with $c.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- range . }}
  - {{ toYaml (merge (deepCopy .) (dict "labelSelector" (dict "matchLabels" $selector))) | indent 4 | trim }}
  {{- end }}
{{- end }}
{{- end -}}

{{/* The --log-format (and --log-level) global flags, before the command. */}}
{{- define "karmadaquota.globalArgs" -}}
- --log-format={{ .Values.logFormat }}
{{- with .Values.logLevel }}
- --log-level={{ . }}
{{- end }}
{{- end -}}

{{- define "karmadaquota.tmpVolume" -}}
- name: tmp
  emptyDir:
    sizeLimit: 16Mi
{{- end -}}

{{- define "karmadaquota.tmpMount" -}}
# the kubeconfig loader writes inline certificate data to temporary files
- name: tmp
  mountPath: /tmp
{{- end -}}

{{- define "karmadaquota.podNameEnv" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- end -}}

{{/* --workload-kind for each of .Values.workloadKinds, and --evicted-cluster-grace: both
programs charge with the same kinds and release evicted replicas on the same rule. */}}
{{- define "karmadaquota.workloadKindArgs" -}}
{{- range .Values.workloadKinds }}
- --workload-kind={{ .apiVersion }}/{{ .kind }}={{ .resource }}:{{ .replicas }}:{{ .podTemplate }}
{{- end }}
{{- range .Values.podlessKinds }}
- --podless-kind={{ .apiVersion }}/{{ .kind }}
{{- end }}
- --evicted-cluster-grace={{ .Values.evictedClusterGrace }}
{{- end -}}

{{/* Read the declared kinds' templates (kube/templates.py watches them); `verbs` as given. */}}
{{- define "karmadaquota.workloadKindRules" -}}
{{- $verbs := .verbs }}
{{- range .kinds }}
- apiGroups: [{{ (splitList "/" .apiVersion) | initial | join "/" | quote }}]
  resources: [{{ .resource }}]
  verbs: {{ $verbs }}
{{- end }}
{{- end -}}
