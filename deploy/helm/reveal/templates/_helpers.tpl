{{/* The release's full name: the release name, or RELEASE-reveal when it lacks "reveal". */}}
{{- define "reveal.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The labels that select the pods: fixed for the life of a release. */}}
{{- define "reveal.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Every object's labels. */}}
{{- define "reveal.labels" -}}
{{ include "reveal.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: agent
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "reveal.serviceAccountName" -}}
{{- .Values.serviceAccount.name | default (include "reveal.fullname" .) -}}
{{- end -}}

{{- define "reveal.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* The probes recorded by default (`reveal probes`); --probes replaces this set, so the
ebpf probe, which is not in it, comes with all of them. */}}
{{- define "reveal.defaultProbes" -}}
cgroup,cpu,gpu,gpu_procs,interrupts,memory,netns,network,perf,power,pressure,qdisc,storage
{{- end -}}

{{/* --probes: the probes value, with ebpf added when enabled; empty for the default set. */}}
{{- define "reveal.probes" -}}
{{- $probes := .Values.probes -}}
{{- if .Values.ebpf.enabled -}}
{{- $base := $probes | default (splitList "," (include "reveal.defaultProbes" .)) -}}
{{- $probes = append (without $base "ebpf") "ebpf" -}}
{{- end -}}
{{- join "," $probes -}}
{{- end -}}

{{/* The arguments of `reveal watch`, one YAML list item a line. */}}
{{- define "reveal.args" -}}
- watch
- --state
- {{ .Values.stateDir | quote }}
- --listen
- {{ printf "%s:%v" .Values.listenHost .Values.listenPort | quote }}
- --learn
- {{ .Values.learn | quote }}
- --resolve-after
- {{ .Values.resolveAfter | quote }}
{{- with .Values.alertsFile }}
- --alerts-file
- {{ . | quote }}
{{- end }}
{{- with .Values.alertWebhook }}
- --alert-webhook
- {{ . | quote }}
{{- end }}
{{- with .Values.alertmanager.url }}
- --alertmanager
- {{ . | quote }}
{{- end }}
{{- with include "reveal.probes" . }}
- --probes
- {{ . | quote }}
{{- end }}
{{- if .Values.ebpf.enabled }}
{{- with .Values.ebpf.skip }}
- --probe-option
- {{ printf "ebpf.skip=%s" . | quote }}
{{- end }}
- --probe-option
- {{ printf "ebpf.launch_latency=%t" .Values.ebpf.launchLatency | quote }}
{{- end }}
{{- range .Values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}
