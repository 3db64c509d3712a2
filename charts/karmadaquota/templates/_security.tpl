{{- /* Network and metrics security (docs/security.md): the args, token mount and client-CA
volume the two Deployments include. */ -}}

{{- define "karmadaquota.metricsAuthMode" -}}
{{- $mode := .Values.metricsAuth.mode -}}
{{- if not (has $mode (list "tokenReview" "none")) -}}
{{- fail (printf "metricsAuth.mode must be tokenReview or none, got %q" $mode) -}}
{{- end -}}
{{- $mode -}}
{{- end -}}

{{- /* the flag of --metrics-auth */ -}}
{{- define "karmadaquota.metricsAuthArgs" -}}
{{- if eq (include "karmadaquota.metricsAuthMode" .) "tokenReview" -}}
- --metrics-auth=tokenreview  # a bearer token the host API server authorizes for get /metrics
{{- else -}}
- --metrics-auth=none  # /metrics answers 127.0.0.1 only (kubectl port-forward)
{{- end -}}
{{- end -}}

{{- /* the host ServiceAccount token is mounted only to review scrapers' tokens */ -}}
{{- define "karmadaquota.automountToken" -}}
{{- eq (include "karmadaquota.metricsAuthMode" .) "tokenReview" -}}
{{- end -}}

{{- define "karmadaquota.clientCAArgs" -}}
{{- if .Values.webhook.clientCA.secretName -}}
- --client-ca-file=/var/client-ca/{{ .Values.webhook.clientCA.key }}
{{- end -}}
{{- end -}}

{{- define "karmadaquota.clientCAMount" -}}
{{- if .Values.webhook.clientCA.secretName -}}
- name: client-ca
  mountPath: /var/client-ca
  readOnly: true
{{- end -}}
{{- end -}}

{{- define "karmadaquota.clientCAVolume" -}}
{{- if .Values.webhook.clientCA.secretName -}}
- name: client-ca
  secret:
    secretName: {{ .Values.webhook.clientCA.secretName }}
    items:
      - {key: {{ .Values.webhook.clientCA.key }}, path: {{ .Values.webhook.clientCA.key }}}
{{- end -}}
{{- end -}}
