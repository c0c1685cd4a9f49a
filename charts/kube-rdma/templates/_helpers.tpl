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

{{/* An image reference from (dict "image" <image values> "tag" <default tag>): by digest when one is given. */}}
{{- define "kube-rdma.imageRef" -}}
{{- if .image.digest -}}
{{- printf "%s@%s" .image.repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository (default .tag .image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "kube-rdma.image" -}}
{{- include "kube-rdma.imageRef" (dict "image" .Values.image "tag" .Chart.AppVersion) -}}
{{- end -}}

{{/* ServiceAccount of a component; call with (dict "root" $ "component" "agent" "key" "agent"). */}}
{{- define "kube-rdma.serviceAccountName" -}}
{{- $sa := (index .root.Values .key).serviceAccount -}}
{{- if $sa.name -}}
{{- $sa.name -}}
{{- else if $sa.create -}}
{{- include "kube-rdma.componentName" . -}}
{{- else -}}
{{- fail (printf "%s.serviceAccount: create is false, so name must name an existing ServiceAccount" .key) -}}
{{- end -}}
{{- end -}}

{{/* Pod labels: the component's labels plus its podLabels. */}}
{{- define "kube-rdma.podLabels" -}}
{{ include "kube-rdma.componentLabels" . }}
{{- with (index .root.Values .key).podLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* nodeSelector of a node component (device plugin, agent): rdmaNodeLabel plus its own nodeSelector. */}}
{{- define "kube-rdma.nodeComponentSelector" -}}
{{- $sel := dict -}}
{{- if .root.Values.rdmaNodeLabel.key -}}
{{- $_ := set $sel .root.Values.rdmaNodeLabel.key .root.Values.rdmaNodeLabel.value -}}
{{- end -}}
{{- $sel = merge (deepCopy ((index .root.Values .key).nodeSelector | default dict)) $sel -}}
{{- if $sel -}}
{{ toYaml $sel }}
{{- end -}}
{{- end -}}

{{/* Address a daemon's /metrics listens on: loopback behind kube-rbac-proxy, else every address. */}}
{{- define "kube-rdma.metricsListen" -}}
{{- $c := index .root.Values .key -}}
{{- if .root.Values.metrics.rbacProxy.enabled -}}
{{- printf "127.0.0.1:%v" (index .root.Values.metrics.rbacProxy.upstreamPorts .key) -}}
{{- else -}}
{{- printf "0.0.0.0:%v" $c.metrics.port -}}
{{- end -}}
{{- end -}}

{{/* Arguments every daemon takes: log format, then the component's extraArgs. */}}
{{- define "kube-rdma.commonArgs" -}}
- --log-format={{ .root.Values.logFormat }}
{{- with (index .root.Values .key).extraArgs }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
The kube-rbac-proxy sidecar in front of a daemon's metrics (metrics.rbacProxy.enabled): TLS on the
component's metrics port, TokenReview + SubjectAccessReview (get on the /metrics non-resource URL)
for /metrics, /healthz and /livez passed through unauthenticated for the kubelet's probes (any
other path is 404, as the daemons answer it). Its API token is
projected into this container only; the daemon itself gets none it does not already have.
*/}}
{{- define "kube-rdma.rbacProxyContainer" -}}
{{- $p := .root.Values.metrics.rbacProxy -}}
{{- $c := index .root.Values .key -}}
- name: kube-rbac-proxy
  image: {{ include "kube-rdma.imageRef" (dict "image" $p.image "tag" "latest") }}
  imagePullPolicy: IfNotPresent
  args:
    - --secure-listen-address=0.0.0.0:{{ $c.metrics.port }}
    - --upstream=http://127.0.0.1:{{ index $p.upstreamPorts .key }}/
    - --allow-paths=/metrics,/healthz,/livez
    - --ignore-paths=/healthz,/livez
    - --tls-cert-file=/etc/kube-rbac-proxy/tls/tls.crt
    - --tls-private-key-file=/etc/kube-rbac-proxy/tls/tls.key
  ports:
    - name: metrics
      containerPort: {{ $c.metrics.port }}
      protocol: TCP
  securityContext:
    {{- include "kube-rdma.containerSecurityContext" (dict "root" false) | nindent 4 }}
  resources:
    {{- toYaml $p.resources | nindent 4 }}
  volumeMounts:
    - name: rbac-proxy-token
      mountPath: /var/run/secrets/kubernetes.io/serviceaccount
      readOnly: true
    - name: rbac-proxy-tls
      mountPath: /etc/kube-rbac-proxy/tls
      readOnly: true
{{- end -}}

{{/* The projected API token of the kube-rbac-proxy sidecar (the pod itself mounts none), and its
serving certificate. */}}
{{- define "kube-rdma.rbacProxyVolume" -}}
{{ include "kube-rdma.apiTokenVolume" "rbac-proxy-token" }}
- name: rbac-proxy-tls
  secret:
    secretName: {{ include "kube-rdma.metricsTlsSecret" .root }}
    items:
      - key: tls.crt
        path: tls.crt
      - key: tls.key
        path: tls.key
{{- end -}}

{{/* The Secret (tls.crt, tls.key, ca.crt) of kube-rbac-proxy's serving certificate. */}}
{{- define "kube-rdma.metricsTlsSecret" -}}
{{- .Values.metrics.rbacProxy.tls.secretName | default (include "kube-rdma.componentName" (dict "root" . "component" "metrics-tls")) -}}
{{- end -}}

{{/* The name Prometheus verifies kube-rbac-proxy's certificate against (tlsConfig.serverName). */}}
{{- define "kube-rdma.metricsServerName" -}}
{{- .Values.metrics.rbacProxy.tls.serverName | default (printf "%s-metrics.%s.svc" (include "kube-rdma.fullname" .) .Release.Namespace) -}}
{{- end -}}

{{/*
A volume named by the argument holding what an automounted token would (the pod's ServiceAccount
token, bound to the pod and so to its node; the cluster CA; the namespace), for the one container
that talks to the API server.
*/}}
{{- define "kube-rdma.apiTokenVolume" -}}
- name: {{ . }}
  projected:
    sources:
      - serviceAccountToken:
          path: token
          expirationSeconds: 3600
      - configMap:
          name: kube-root-ca.crt
          items:
            - key: ca.crt
              path: ca.crt
      - downwardAPI:
          items:
            - path: namespace
              fieldRef:
                fieldPath: metadata.namespace
{{- end -}}

{{/*
A probe of a daemon (dict "root" $ "key" "agent" "probe" <probe>). Behind kube-rbac-proxy it goes
to the proxy over HTTPS, by number: a named port resolves only within the probed container.
*/}}
{{- define "kube-rdma.probe" -}}
{{- $probe := deepCopy .probe -}}
{{- if and .root.Values.metrics.rbacProxy.enabled (hasKey $probe "httpGet") -}}
{{- $_ := set $probe.httpGet "scheme" "HTTPS" -}}
{{- $_ := set $probe.httpGet "port" (index .root.Values .key).metrics.port -}}
{{- end -}}
{{ toYaml $probe }}
{{- end -}}

{{/*
The agent needs root only to change settings (Enforce, with CAP_NET_ADMIN) or to create the
per-device directory in the rdma_cm configfs; reading sysfs and DCB/RDMA netlink GETs needs neither.
*/}}
{{- define "kube-rdma.agentNeedsRoot" -}}
{{- if or .Values.agent.allowEnforce .Values.agent.readRdmaCmConfigfs -}}true{{- end -}}
{{- end -}}

{{/*
"true" when the API server serves admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy
(Kubernetes >= 1.30): the chart's policies scope to one node what RBAC grants cluster-wide.
`helm template` lists it only with `--api-versions
admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy`; without it the chart renders as for a
cluster without the API (docs/security.md, "Fail closed").
*/}}
{{- define "kube-rdma.policyApi" -}}
{{- if .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy" -}}true{{- end -}}
{{- end -}}

{{/*
How the agent's writes (its Node's label, its RdmaNodeState, Events about its Node) are held to
its own node: "policy" (the ValidatingAdmissionPolicies of node-label-policy.yaml), "unguarded"
(agent.unguardedNodeWrites: granted cluster-wide with no guard, knowingly), or "" (not granted:
the agent's role is read-only, the safe form). The chart fails closed: the writes are never granted
unguarded unless asked for.
*/}}
{{- define "kube-rdma.agentWrites" -}}
{{- if and (include "kube-rdma.policyApi" .) .Values.agent.nodeLabelPolicy.enabled -}}policy
{{- else if .Values.agent.unguardedNodeWrites -}}unguarded
{{- end -}}
{{- end -}}

{{/*
The DRA driver's writes (its node's ResourceSlices, the status of claims allocated on its node) are
granted only with the policies of dra-policy.yaml that hold them to its node and driver: "true" then.
*/}}
{{- define "kube-rdma.draWrites" -}}
{{- if include "kube-rdma.policyApi" . -}}true{{- end -}}
{{- end -}}

{{/*
The render fails where the agent would get no writes for a reason the chart knows (an old
cluster, the policy switched off): a read-only agent cannot publish anything, fails every pass on
403 and is restarted by its liveness probe. Where only the API list is missing (`helm template`
without --api-versions, on a version that has the API) the safe form renders.
*/}}
{{- define "kube-rdma.validateAgentWrites" -}}
{{- if and .Values.agent.enabled (not (include "kube-rdma.agentWrites" .)) -}}
{{- $how := "set agent.unguardedNodeWrites=true to grant them anyway (every agent's token may then label any Node and write any RdmaNodeState: docs/security.md), or agent.enabled=false" -}}
{{- if not .Values.agent.nodeLabelPolicy.enabled -}}
{{- fail (printf "agent.nodeLabelPolicy.enabled=false: the agent's writes to its Node and RdmaNodeState would not be held to its own node, so the chart does not grant them, and without them the agent cannot run; %s" $how) -}}
{{- else if semverCompare "<1.30-0" .Capabilities.KubeVersion.Version -}}
{{- fail (printf "Kubernetes %s does not serve admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy (>= 1.30), which holds the agent's writes to its Node and RdmaNodeState to its own node (RBAC cannot), so the chart does not grant them, and without them the agent cannot run; upgrade the cluster, or %s" .Capabilities.KubeVersion.Version $how) -}}
{{- end -}}
{{- end -}}
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

{{/*
Pool name -> full resource name (as JSON), as the device plugin will advertise it: from `pools`
with `resourcePrefix`, or read from `rawConfig` with the defaults of the file's own format
(device-plugin/src/config/): ours `kuberdma.io`, sriov-network-device-plugin `intel.com` (its
--resource-prefix default), k8s-rdma-shared-dev-plugin `rdma`; a per-entry `resourcePrefix` wins.
*/}}
{{- define "kube-rdma.poolResources" -}}
{{- $out := dict -}}
{{- if .Values.rawConfig -}}
{{- $raw := fromYaml .Values.rawConfig -}}
{{- if hasKey $raw "Error" -}}
{{- fail (printf "rawConfig is neither JSON nor YAML: %s" (get $raw "Error")) -}}
{{- end -}}
{{- $entries := list -}}
{{- $default := "" -}}
{{- $key := "" -}}
{{- if hasKey $raw "pools" -}}
{{- $entries = $raw.pools -}}{{- $default = $raw.resourcePrefix | default "kuberdma.io" -}}{{- $key = "name" -}}
{{- else if hasKey $raw "resourceList" -}}
{{- $entries = $raw.resourceList -}}{{- $default = "intel.com" -}}{{- $key = "resourceName" -}}
{{- else if hasKey $raw "configList" -}}
{{- $entries = $raw.configList -}}{{- $default = "rdma" -}}{{- $key = "resourceName" -}}
{{- else -}}
{{- fail "rawConfig has none of `pools` (kube-rdma), `resourceList` (sriov-network-device-plugin) or `configList` (k8s-rdma-shared-dev-plugin)" -}}
{{- end -}}
{{- range $i, $e := $entries -}}
{{- $name := get $e $key | toString -}}
{{- if not $name -}}
{{- fail (printf "rawConfig: entry %d has no `%s`" $i $key) -}}
{{- end -}}
{{- $_ := set $out $name (printf "%s/%s" ($e.resourcePrefix | default $default) $name) -}}
{{- end -}}
{{- else -}}
{{- range .Values.pools -}}
{{- $_ := set $out .name (printf "%s/%s" (.resourcePrefix | default $.Values.resourcePrefix) .name) -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* Checks JSON schema cannot express: unique pool names, known pools, Enforce allowed, the agent's writes guarded. */}}
{{- define "kube-rdma.validate" -}}
{{- include "kube-rdma.validateAgentWrites" . -}}
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
{{- $resources := include "kube-rdma.poolResources" . | fromJson -}}
{{- range .Values.networks -}}
{{- if and (not .pool) (not $.Values.dra.enabled) -}}
{{- fail (printf "network %q has no pool: in device plugin mode its resourceName annotation names the pool's resource (DRA mode needs none: the pod's claim picks the VF)" .name) -}}
{{- end -}}
{{- if and .pool (not (hasKey $resources .pool)) -}}
{{- fail (printf "network %q uses pool %q, which is not in %s (pools there: %s)" .name .pool (ternary "rawConfig" "`pools`" (not (empty $.Values.rawConfig))) (keys $resources | sortAlpha | join ", ")) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.metrics.serviceMonitor.enabled .Values.metrics.podMonitor.enabled -}}
{{- fail "enable metrics.serviceMonitor or metrics.podMonitor, not both: every target would be scraped twice" -}}
{{- end -}}
{{- range .Values.profiles -}}
{{- if and (eq (toString (dig "mode" "" .spec)) "Enforce") (not $.Values.agent.allowEnforce) -}}
{{- fail (printf "profile %q is in Enforce mode: set agent.allowEnforce=true so the agent gets CAP_NET_ADMIN" .name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
