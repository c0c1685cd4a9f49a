{{/* Names, labels and shared pieces of the kube-rdma chart. */}}

{{- define "kube-rdma.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kube-rdma.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Name of one component's objects: <fullname>-<component>, at most 63 characters. */}}
{{- define "kube-rdma.componentName" -}}
{{- printf "%s-%s" (include "kube-rdma.fullname" .root) .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kube-rdma.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "kube-rdma.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kube-rdma
{{- end -}}

{{/* Selector labels of one component; call with (dict "root" $ "component" "agent"). */}}
{{- define "kube-rdma.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kube-rdma.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "kube-rdma.componentLabels" -}}
{{ include "kube-rdma.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "kube-rdma.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/*
The agent needs root only to change settings (Enforce, with CAP_NET_ADMIN) or to create the
per-device directory in the rdma_cm configfs; reading sysfs and DCB/RDMA netlink GETs needs neither.
*/}}
{{- define "kube-rdma.agentNeedsRoot" -}}
{{- if or .Values.agent.allowEnforce .Values.agent.readRdmaCmConfigfs -}}true{{- end -}}
{{- end -}}

{{/* Container securityContext shared by every container; call with (dict "root" true/false "caps" list). */}}
{{- define "kube-rdma.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
{{- if .root }}
runAsUser: 0
runAsNonRoot: false
{{- else }}
runAsUser: 65532
runAsGroup: 65532
runAsNonRoot: true
{{- end }}
capabilities:
  drop: ["ALL"]
  {{- with .caps }}
  add: {{ toJson . }}
  {{- end }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The device plugin's configuration file: rawConfig verbatim, or our format from `pools` (keys pass through). */}}
{{- define "kube-rdma.devicePluginConfig" -}}
{{- if .Values.rawConfig -}}
{{ .Values.rawConfig }}
{{- else -}}
{{ toYaml (dict "resourcePrefix" .Values.resourcePrefix "pools" .Values.pools) }}
{{- end -}}
{{- end -}}

{{/* Checks JSON schema cannot express: unique pool names, known pools, Enforce allowed. */}}
{{- define "kube-rdma.validate" -}}
{{- if and .Values.rawConfig .Values.pools -}}
{{- fail "set either `pools` or `rawConfig`, not both (rawConfig replaces the generated device plugin config)" -}}
{{- end -}}
{{- $seen := dict -}}
{{- range .Values.pools -}}
{{- if hasKey $seen .name -}}
{{- fail (printf "pool %q is defined twice" .name) -}}
{{- end -}}
{{- $_ := set $seen .name true -}}
{{- end -}}
{{- range .Values.networks -}}
{{- if and (not $.Values.rawConfig) (not (hasKey $seen .pool)) -}}
{{- fail (printf "network %q uses pool %q, which is not in `pools`" .name .pool) -}}
{{- end -}}
{{- end -}}
{{- range .Values.profiles -}}
{{- if and (eq (toString (dig "mode" "" .spec)) "Enforce") (not $.Values.agent.allowEnforce) -}}
{{- fail (printf "profile %q is in Enforce mode: set agent.allowEnforce=true so the agent gets CAP_NET_ADMIN" .name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
