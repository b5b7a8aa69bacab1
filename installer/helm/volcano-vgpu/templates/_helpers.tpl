{{/* Names and labels. */}}
{{- define "volcano-vgpu.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 50 | trimSuffix "-" -}}
{{- end -}}

{{- define "volcano-vgpu.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "volcano-vgpu.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "volcano-vgpu.labels" -}}
app.kubernetes.io/name: {{ include "volcano-vgpu.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* selectorLabels: pass (list $ "component"). */}}
{{- define "volcano-vgpu.selectorLabels" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ include "volcano-vgpu.name" $ }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "volcano-vgpu.image" -}}
{{- $ := index . 0 -}}
{{- $img := index . 1 -}}
{{- $repo := $img.repository -}}
{{- $registry := $.Values.imageRegistry | default (($.Values.global | default dict).imageRegistry) -}}
{{- with $registry }}{{ $repo = printf "%s/%s" (trimSuffix "/" .) $repo }}{{ end -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $repo $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (default $.Chart.AppVersion $img.tag) -}}
{{- end -}}
{{- end -}}

{{/* seconds is a Go duration ("1m30s", "1.5h") in seconds, or -1 when it
     is not one. Pass the value. */}}
{{- define "volcano-vgpu.seconds" -}}
{{- $s := toString . -}}
{{- if not (regexMatch "^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$" $s) -}}
-1
{{- else -}}
{{- $unit := dict "ns" 0.000000001 "us" 0.000001 "µs" 0.000001 "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 -}}
{{- $total := 0.0 -}}
{{- range regexFindAll "[0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h)" $s -1 -}}
{{- $n := regexFind "^[0-9]+(\\.[0-9]+)?" . -}}
{{- $total = addf $total (mulf (float64 $n) (get $unit (trimPrefix $n .))) -}}
{{- end -}}
{{- $total -}}
{{- end -}}
{{- end -}}

{{/* durationAtLeast fails unless value is a duration of at least min
     seconds (and at most max seconds when max >= 0).
     Pass (list "path" value min max "what the binary says"). */}}
{{- define "volcano-vgpu.duration" -}}
{{- $path := index . 0 -}}{{ $v := index . 1 -}}{{ $min := index . 2 | float64 -}}{{ $max := index . 3 | float64 -}}
{{- $sec := include "volcano-vgpu.seconds" $v | float64 -}}
{{- if or (lt $sec 0.0) (lt $sec $min) (and (ge $max 0.0) (gt $sec $max)) -}}
{{- fail (printf "values: %s must be %s, got %v" $path (index . 4) $v) -}}
{{- end -}}
{{- end -}}

{{- define "volcano-vgpu.schedulerName" -}}
{{- if .Values.scheduler.schedulerName -}}
{{- .Values.scheduler.schedulerName -}}
{{- else if eq .Values.scheduler.mode "replace" -}}
volcano
{{- else -}}
volcano-vgpu
{{- end -}}
{{- end -}}

{{- define "volcano-vgpu.leaseName" -}}
{{- if .Values.scheduler.leaderElection.resourceName -}}
{{- .Values.scheduler.leaderElection.resourceName -}}
{{- else if eq .Values.scheduler.mode "replace" -}}
volcano
{{- else -}}
{{- include "volcano-vgpu.schedulerName" . -}}
{{- end -}}
{{- end -}}

{{- define "volcano-vgpu.leaseNamespace" -}}
{{- default .Release.Namespace .Values.scheduler.leaderElection.namespace -}}
{{- end -}}

{{- define "volcano-vgpu.schedulerSA" -}}{{ include "volcano-vgpu.fullname" . }}-scheduler{{- end -}}
{{- define "volcano-vgpu.devicePluginSA" -}}{{ include "volcano-vgpu.fullname" . }}-device-plugin{{- end -}}

{{/* The vgpu plugin's arguments, as written in volcano-scheduler.conf. */}}
{{- define "volcano-vgpu.vgpuArgs" -}}
{{- $v := .Values.scheduler.vgpu -}}
vgpu.devicePolicy: {{ $v.devicePolicy }}
vgpu.nodePolicy: {{ $v.nodePolicy }}
vgpu.topology: {{ $v.topology }}
vgpu.defaultCores: {{ $v.defaultCores }}
vgpu.weight: {{ $v.weight }}
vgpu.staleAfter: {{ $v.staleAfter }}
vgpu.resource.number: {{ .Values.resourceNames.number }}
vgpu.resource.memory: {{ .Values.resourceNames.memory }}
vgpu.resource.memoryPercentage: {{ .Values.resourceNames.memoryPercentage }}
vgpu.resource.cores: {{ .Values.resourceNames.cores }}
{{- end -}}

{{/* The device plugin's config file (version v1). */}}
{{- define "volcano-vgpu.devicePluginConfig" -}}
{{- $h := .Values.hostPaths -}}
{{- $c := deepCopy .Values.devicePlugin.config -}}
{{- $limiter := merge (dict "hostLibrary" (printf "%s/libvcuda.so" (trimSuffix "/" $h.limiter))) (default (dict) $c.limiter) -}}
{{- $owned := dict
  "version" "v1"
  "resourceNames" .Values.resourceNames
  "kubelet" (dict
    "devicePluginsDir" $h.devicePlugins
    "kubeletSocket" (printf "%s/kubelet.sock" (trimSuffix "/" $h.devicePlugins))
    "socketName" "volcano-vgpu.sock"
    "podResourcesSocket" (printf "%s/kubelet.sock" (trimSuffix "/" $h.podResources)))
  "stateDir" $h.state
  "limiter" $limiter
  "cdi" (merge (dict "specDir" $h.cdi "hookPath" (printf "%s/vgpu-cdi-hook" (trimSuffix "/" $h.limiter))) (default (dict) $c.cdi)) -}}
{{- if .Values.metrics.enabled }}{{ $_ := set $owned "metricsAddress" (printf ":%v" .Values.devicePlugin.metricsPort) }}{{ end -}}
{{- toYaml (merge $owned $c) -}}
{{- end -}}

{{/* knownKeys fails on a key of a values map that the chart does not know.
     Pass (list "path" map (list "key" …)). */}}
{{- define "volcano-vgpu.knownKeys" -}}
{{- $path := index . 0 -}}
{{- $known := index . 2 -}}
{{- range $k, $_ := (index . 1 | default (dict)) -}}
{{- if not (has $k $known) -}}
{{- fail (printf "values: %s.%s is not a setting of this chart; known: %s" $path $k (join ", " $known)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* oneOf fails unless value is one of the allowed strings. Pass (list "path" value (list …)). */}}
{{- define "volcano-vgpu.oneOf" -}}
{{- $v := index . 1 | toString -}}
{{- if not (has $v (index . 2)) -}}
{{- fail (printf "values: %s must be one of %s, got %q" (index . 0) (join ", " (index . 2)) $v) -}}
{{- end -}}
{{- end -}}

{{/* Device plugin policies (device-plugin-policy.yaml). */}}
{{- define "volcano-vgpu.celList" -}}
{{- range $i, $k := . }}{{ if $i }}, {{ end }}{{ $k | squote }}{{ end -}}
{{- end -}}

{{/* Pass (list "<CEL list of the annotation keys it may change>"). */}}
{{- define "volcano-vgpu.policyCommonVariables" -}}
- name: nodeNames
  expression: request.userInfo.?extra.orValue({})[?'authentication.kubernetes.io/node-name'].orValue([])
- name: node
  expression: "size(variables.nodeNames) == 1 ? variables.nodeNames[0] : ''"
- name: allowedAnnotations
  expression: {{ join "" . | quote }}
- name: oldAnnotations
  expression: oldObject.metadata.?annotations.orValue({})
- name: newAnnotations
  expression: object.metadata.?annotations.orValue({})
- name: changedAnnotations
  expression: >-
    variables.newAnnotations.filter(k, !(k in variables.oldAnnotations) || variables.oldAnnotations[k] != variables.newAnnotations[k])
    + variables.oldAnnotations.filter(k, !(k in variables.newAnnotations))
{{- end -}}

{{- define "volcano-vgpu.policyNoNode" -}}
- expression: variables.node != ''
  message: >-
    the device plugin's ServiceAccount token names no node (user extra authentication.kubernetes.io/node-name):
    it needs a pod-bound token on Kubernetes >= 1.30, or devicePlugin.nodeRestriction.enabled=false
  reason: Forbidden
{{- end -}}

{{- define "volcano-vgpu.policyMetadata" -}}
- expression: variables.changedAnnotations.all(k, k in variables.allowedAnnotations)
  messageExpression: >-
    'the device plugin may change only the annotations ' + variables.allowedAnnotations.join(', ')
    + ', not ' + variables.changedAnnotations.filter(k, !(k in variables.allowedAnnotations)).join(', ')
  reason: Forbidden
- expression: >-
    object.metadata.?labels.orValue({}) == oldObject.metadata.?labels.orValue({})
    && object.metadata.?finalizers.orValue([]) == oldObject.metadata.?finalizers.orValue([])
    && object.metadata.?ownerReferences.orValue([]) == oldObject.metadata.?ownerReferences.orValue([])
  message: the device plugin may not change labels, finalizers or owner references
  reason: Forbidden
- expression: object.spec == oldObject.spec
  message: the device plugin may not change a spec
  reason: Forbidden
{{- end -}}

{{/* The admission webhook's match condition (admission.MatchConditions in Go). */}}
{{- define "volcano-vgpu.admissionMatch" -}}
{{- $n := .Values.resourceNames -}}
{{- $list := printf "['%s', '%s', '%s', '%s']" $n.number $n.memory $n.memoryPercentage $n.cores -}}
{{- $asks := printf "c.?resources.?limits.orValue({}).exists(r, r in %s) || c.?resources.?requests.orValue({}).exists(r, r in %s)" $list $list -}}
object.metadata.?annotations.orValue({}).exists(k, k.startsWith('volcano-vgpu.io/') || k.startsWith('volcano.sh/vgpu-')) || object.spec.containers.exists(c, {{ $asks }}) || object.spec.?initContainers.orValue([]).exists(c, {{ $asks }})
{{- end -}}
