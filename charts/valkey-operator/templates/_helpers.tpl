{{/* The labels every object of a controller carries (deploy/components/*). */}}
{{- define "valkey-operator.labels" -}}
app.kubernetes.io/name: valkey-operator
app.kubernetes.io/component: {{ . }}
app.kubernetes.io/part-of: valkey-operator
{{- end }}

{{- define "valkey-operator.selector" -}}
app.kubernetes.io/name: valkey-operator
app.kubernetes.io/component: {{ . }}
{{- end }}

{{/* The watched namespaces, comma-separated and sorted (watchNamespaces and the older
single watchNamespace); empty for all. */}}
{{- define "valkey-operator.watched" -}}
{{- $all := .Values.watchNamespaces | default list -}}
{{- with .Values.watchNamespace }}{{ $all = append $all . }}{{ end -}}
{{- $all | uniq | sortAlpha | join "," -}}
{{- end }}

{{/* repository:tag, with @digest when pinned. */}}
{{- define "valkey-operator.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- .Values.image.repository }}:{{ $tag }}{{ with .Values.image.digest }}@{{ . }}{{ end }}
{{- end }}

{{/*
A controller's ServiceAccount, its ClusterRole (rules from the controller's file) granted
cluster-wide or in each watched namespace only, its leader-election Lease rights, Deployment
and metrics Service.
Arguments: root (the chart's context), name (e.g. node-controller), values (its values),
rules (its ClusterRole rules, YAML).
*/}}
{{- define "valkey-operator.controller" -}}
{{- $root := .root -}}
{{- $name := .name -}}
{{- $full := printf "valkey-operator-%s" $name -}}
{{- $ns := $root.Release.Namespace -}}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ $full }}
  namespace: {{ $ns }}
  labels:
    {{- include "valkey-operator.labels" $name | nindent 4 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ $full }}
  labels:
    {{- include "valkey-operator.labels" $name | nindent 4 }}
rules:
  {{- .rules | nindent 2 }}
---
{{- $watched := include "valkey-operator.watched" $root }}
{{- if not $watched }}
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ $full }}
  labels:
    {{- include "valkey-operator.labels" $name | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ $full }}
subjects:
  - kind: ServiceAccount
    name: {{ $full }}
    namespace: {{ $ns }}
---
{{- else }}
{{- range splitList "," $watched }}
# The ClusterRole granted in a watched namespace only.
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $full }}
  namespace: {{ . }}
  labels:
    {{- include "valkey-operator.labels" $name | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ $full }}
subjects:
  - kind: ServiceAccount
    name: {{ $full }}
    namespace: {{ $ns }}
---
{{- end }}
{{- end }}
# Leader election: the Lease lives in the operator namespace.
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $full }}-leader-election
  namespace: {{ $ns }}
  labels:
    {{- include "valkey-operator.labels" $name | nindent 4 }}
rules:
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    verbs: ["get", "create", "update", "patch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $full }}-leader-election
  namespace: {{ $ns }}
  labels:
    {{- include "valkey-operator.labels" $name | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ $full }}-leader-election
subjects:
  - kind: ServiceAccount
    name: {{ $full }}
    namespace: {{ $ns }}
---
{{ include "valkey-operator.deployment" . }}
{{- if $root.Values.metrics.service.enabled }}
---
# Exposes /metrics (and /healthz, /readyz) of the controller's pods.
apiVersion: v1
kind: Service
metadata:
  name: {{ $full }}-metrics
  namespace: {{ $ns }}
  labels:
    {{- include "valkey-operator.labels" $name | nindent 4 }}
spec:
  type: ClusterIP
  selector:
    {{- include "valkey-operator.selector" $name | nindent 4 }}
  ports:
    - name: http
      port: 8080
      targetPort: http
      protocol: TCP
{{- if $root.Values.metrics.serviceMonitor.enabled }}
---
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: {{ $full }}
  namespace: {{ $ns }}
  labels:
    {{- include "valkey-operator.labels" $name | nindent 4 }}
    {{- with $root.Values.metrics.serviceMonitor.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  selector:
    matchLabels:
      {{- include "valkey-operator.selector" $name | nindent 6 }}
  endpoints:
    - port: http
      path: /metrics
      interval: {{ $root.Values.metrics.serviceMonitor.interval }}
      # Per-object series carry the object's namespace: keep it (docs/monitoring.md).
      honorLabels: true
{{- end }}
{{- end }}
{{- end }}

{{/* A controller's Deployment: the same pod as deploy/components/<name>/deployment.yaml. */}}
{{- define "valkey-operator.deployment" -}}
{{- $root := .root -}}
{{- $name := .name -}}
{{- $values := .values -}}
{{- $full := printf "valkey-operator-%s" $name -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ $full }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "valkey-operator.labels" $name | nindent 4 }}
spec:
  replicas: {{ $values.replicas }}
  revisionHistoryLimit: 3
  selector:
    matchLabels:
      {{- include "valkey-operator.selector" $name | nindent 6 }}
  strategy:
    type: RollingUpdate
    rollingUpdate:
      maxSurge: 1
      maxUnavailable: 0
  template:
    metadata:
      labels:
        {{- include "valkey-operator.labels" $name | nindent 8 }}
      {{- with $values.podAnnotations }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      serviceAccountName: {{ $full }}
      automountServiceAccountToken: true
      enableServiceLinks: false
      terminationGracePeriodSeconds: 30
      {{- with $values.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $values.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $values.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $values.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      # Leader and standby on different Nodes where there are several.
      topologySpreadConstraints:
        - maxSkew: 1
          topologyKey: kubernetes.io/hostname
          whenUnsatisfiable: ScheduleAnyway
          labelSelector:
            matchLabels:
              {{- include "valkey-operator.selector" $name | nindent 14 }}
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        runAsGroup: 65532
        seccompProfile:
          type: RuntimeDefault
      containers:
        - name: {{ $name }}
          image: {{ include "valkey-operator.image" $root }}
          {{- with $root.Values.image.pullPolicy }}
          imagePullPolicy: {{ . }}
          {{- end }}
          command:
            - /usr/local/bin/{{ $name }}
          env:
            - name: LOG_FORMAT
              value: {{ $root.Values.logFormat | quote }}
            - name: RUST_LOG
              value: {{ $values.logLevel | quote }}
            # The pod's own address: probes and Prometheus reach it there.
            - name: POD_IP
              valueFrom:
                fieldRef:
                  fieldPath: status.podIP
            - name: HTTP_ADDR
              value: $(POD_IP):8080
            - name: LEADER_ELECT
              value: "true"
            - name: POD_NAMESPACE
              valueFrom:
                fieldRef:
                  fieldPath: metadata.namespace
            - name: POD_NAME
              valueFrom:
                fieldRef:
                  fieldPath: metadata.name
            {{- with include "valkey-operator.watched" $root }}
            - name: WATCH_NAMESPACES
              value: {{ . | quote }}
            {{- end }}
            {{- with .env }}
            {{- . | nindent 12 }}
            {{- end }}
            {{- with $values.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          ports:
            - name: http
              containerPort: 8080
              protocol: TCP
          livenessProbe:
            httpGet:
              path: /healthz
              port: http
            initialDelaySeconds: 5
            periodSeconds: 10
            timeoutSeconds: 2
            failureThreshold: 3
          readinessProbe:
            httpGet:
              path: /readyz
              port: http
            periodSeconds: 5
            timeoutSeconds: 2
            failureThreshold: 3
          resources:
            {{- toYaml $values.resources | nindent 12 }}
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities:
              drop:
                - ALL
          {{- with .volumeMounts }}
          volumeMounts:
            {{- . | nindent 12 }}
          {{- end }}
      {{- with .volumes }}
      volumes:
        {{- . | nindent 8 }}
      {{- end }}
{{- end }}
