#!/usr/bin/env bash
# A real, kubelet-less Kubernetes control plane on 127.0.0.1 for the kube test tier.
#
#   tests/kube/cluster.sh build   build the binaries into the cache (once; reused when present)
#   tests/kube/cluster.sh up      build if needed, start everything, print `export KUBECONFIG=...`
#   tests/kube/cluster.sh env     print the exports of the running cluster
#   tests/kube/cluster.sh down    stop what `up` started (by pid) and remove its state
#   tests/kube/cluster.sh status  say which components run
#
# Components (each ONE entry below: a build line in BUILDS and a start_/ready_ pair named in
# COMPONENTS): etcd (go.etcd.io/etcd/server/v3, the version k8s.io/kubernetes pins),
# kube-apiserver and kube-controller-manager (job, garbage-collector, namespace, serviceaccount,
# serviceaccount-token controllers) and kubectl from k8s.io/kubernetes, the Kubeflow training
# operator v1.9 (PyTorchJob only) with its own validating webhook, JobSet v0.12.0
# (jobset-controller: the JobSet CRD, its mutating and validating webhooks for JobSets and their
# pods), the Kubeflow Trainer v2.3.0 controller manager (trainer-controller-manager: the
# TrainJob, TrainingRuntime and ClusterTrainingRuntime CRDs and webhooks; no runtime installed),
# the KubeRay operator (ray-operator v1.6.1 over the v1.7.0 CRDs: RayCluster, RayJob, RayService,
# RayCronJob; no webhook); helm and kubeconform are built for the chart tests and the validate
# benchmark. Every webhook is registered by URL on 127.0.0.1. There is no kubelet and no
# scheduler: pods stay Pending until a test patches their status subresource as a kubelet would.
#
# Environment: K8SDDP_KUBE_CACHE (default ~/.cache/k8sddp-kube: Go module cache, build cache,
# bin/, logs/), K8SDDP_KUBE_STATE (default $K8SDDP_KUBE_CACHE/run: certificates, kubeconfig,
# etcd data, pid files, component logs, the audit log), K8SDDP_REFERENCE (the shared reference
# folder with kubeflow/kubeflow.org_pytorchjobs.yaml and kuberay/ray.io_*.yaml; default
# ../shared/reference next to the repository, then /work/shared/reference; jobset/ and
# kubeflow-trainer/ hold the JobSet and Trainer CRDs).
# Exit codes: 0 ok, 2 usage, 3 a build or a component failed (its log is named).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
CACHE="${K8SDDP_KUBE_CACHE:-$HOME/.cache/k8sddp-kube}"
STATE="${K8SDDP_KUBE_STATE:-$CACHE/run}"
BIN="$CACHE/bin"
KUBE_VERSION="v1.36.3"   # tests/kube/gomod/kube/go.mod

# --- builds: "module-dir|binary|go package" (one line per binary; a module builds in one go) ---
BUILDS=(
  "kube|etcd|go.etcd.io/etcd/server/v3"
  "kube|kube-apiserver|k8s.io/kubernetes/cmd/kube-apiserver"
  "kube|kube-controller-manager|k8s.io/kubernetes/cmd/kube-controller-manager"
  "kube|kubectl|k8s.io/kubernetes/cmd/kubectl"
  "peers|training-operator|github.com/kubeflow/training-operator/cmd/training-operator.v1"
  "peers|helm|helm.sh/helm/v3/cmd/helm"
  "peers|kubeconform|github.com/yannh/kubeconform/cmd/kubeconform"
  "trainer|trainer-controller-manager|github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager"
  "trainer|jobset-controller|sigs.k8s.io/jobset"
  "kuberay|kuberay-operator|github.com/ray-project/kuberay/ray-operator"
)
# --- components started by `up`, in order; each has start_<name> and ready_<name> ---
COMPONENTS=(etcd kube-apiserver kube-controller-manager training-operator jobset-controller trainer-controller-manager kuberay-operator)
UP_OK=0

die() { echo "cluster.sh: $*" >&2; exit 3; }
log() { echo "cluster.sh: $*" >&2; }

go_env() {
  export GOMODCACHE="$CACHE/gomod" GOCACHE="$CACHE/gobuild" GOFLAGS="-buildvcs=false -mod=readonly"
  export CGO_ENABLED=0 GOTOOLCHAIN=local
}

# ldflags for one module: strip symbols; kubernetes binaries get their version stamped, as the
# release build does (hack/lib/version.sh), so `kubectl version` and discovery report it; helm
# gets the Kubernetes version of its client-go, as its Makefile does.
ldflags_for() {
  local flags="-s -w"
  if [ "$1" = kube ]; then
    local v=k8s.io/component-base/version minor="${KUBE_VERSION#v1.}"
    minor="${minor%%.*}"
    flags="$flags -X $v.gitVersion=$KUBE_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor"
    flags="$flags -X $v.gitTreeState=clean -X $v.buildDate=1970-01-01T00:00:00Z"
  elif [ "$1" = peers ]; then
    # helm's default Capabilities.KubeVersion and its lint deprecation checks follow the
    # client-go it is built with (its Makefile's LDFLAGS); unset they say v1.20.0
    local h=helm.sh/helm/v3/pkg
    flags="$flags -X $h/chartutil.k8sVersionMajor=1 -X $h/chartutil.k8sVersionMinor=36"
    flags="$flags -X $h/lint/rules.k8sVersionMajor=1 -X $h/lint/rules.k8sVersionMinor=36"
    flags="$flags -X helm.sh/helm/v3/internal/version.version=v3.21.4"
  fi
  echo "$flags"
}

missing_bins() {
  local line m b p out=""
  for line in "${BUILDS[@]}"; do
    IFS='|' read -r m b p <<<"$line"
    [ "$m" = "$1" ] && [ ! -x "$BIN/$b" ] && out="$out $b"
  done
  echo "${out# }"
}

# A module is rebuilt when a binary is missing or its go.mod, go.sum or ldflags changed since its
# last build.
cmd_build() {
  if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then export PATH="$PATH:/usr/local/go/bin"; fi
  go_env
  mkdir -p "$BIN" "$CACHE/logs"
  # one build at a time per cache (two test sessions, or CI and a developer)
  if command -v flock >/dev/null 2>&1; then
    exec 9>"$CACHE/.build.lock"
    if ! flock -n 9; then
      log "waiting for another build (a process holds $CACHE/.build.lock)"
      flock -w 7200 9 || die "another build holds $CACHE/.build.lock"
    fi
  fi
  local mod line m b p stamp want
  for mod in $(printf '%s\n' "${BUILDS[@]}" | cut -d'|' -f1 | uniq); do
    local pkgs=() bins=() missing=0
    for line in "${BUILDS[@]}"; do
      IFS='|' read -r m b p <<<"$line"
      [ "$m" = "$mod" ] || continue
      pkgs+=("$p"); bins+=("$b")
      [ -x "$BIN/$b" ] || missing=1
    done
    want="$( (cat "$HERE/gomod/$mod/go.mod" "$HERE/gomod/$mod/go.sum"; ldflags_for "$mod") | sha256sum | cut -c1-16)"
    stamp="$BIN/.$mod.stamp"
    if [ "$missing" = 0 ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
      continue
    fi
    if ! command -v go >/dev/null 2>&1; then
      [ "$missing" = 0 ] || die "go not found on PATH and $(missing_bins "$mod") not built in $BIN (Go >= 1.26 builds them)"
      log "go not found: using the binaries of module $mod already in $BIN (built from another go.sum)"
      continue
    fi
    log "building ${bins[*]} (module tests/kube/gomod/$mod; log $CACHE/logs/build-$mod.log)"
    local out="$CACHE/build-$mod.tmp" t0
    rm -rf "$out"; mkdir -p "$out"
    t0=$(date +%s)
    if ! (cd "$HERE/gomod/$mod" && go mod download && \
          go build -trimpath -ldflags="$(ldflags_for "$mod")" -o "$out/" "${pkgs[@]}") \
          >"$CACHE/logs/build-$mod.log" 2>&1; then
      tail -n 30 "$CACHE/logs/build-$mod.log" >&2
      die "building module $mod failed (log $CACHE/logs/build-$mod.log)"
    fi
    # go build names a binary after the package path's last element (a /vN suffix skipped).
    for line in "${BUILDS[@]}"; do
      IFS='|' read -r m b p <<<"$line"
      [ "$m" = "$mod" ] || continue
      local base="${p##*/}"
      if [[ "$base" =~ ^v[0-9]+$ ]]; then base="$(basename "$(dirname "$p")")"; fi
      mv -f "$out/$base" "$BIN/$b"
    done
    rm -rf "$out"
    echo "$want" >"$stamp"
    log "built module $mod in $(( $(date +%s) - t0 )) s"
  done
  # release the lock: the components `up` starts next must not inherit fd 9 (they would hold
  # the lock as long as the cluster runs and block every other `build`/`up` on this cache)
  exec 9>&-
}

# --- helpers -----------------------------------------------------------------------------------
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# pid_alive NAME: the recorded pid runs, and runs $BIN/NAME (a stale pid file from a crashed or
# rebooted cluster may name a pid the system has since given to an unrelated process: not ours)
pid_alive() {
  local p exe
  [ -f "$STATE/pids/$1" ] || return 1
  p="$(cat "$STATE/pids/$1")"
  kill -0 "$p" 2>/dev/null || return 1
  [ -r "/proc/$p/cmdline" ] || return 0
  exe="$(tr '\0' '\n' <"/proc/$p/cmdline" 2>/dev/null | head -n 1)"
  [ "$exe" = "$BIN/$1" ]
}

# spawn NAME CMD...: start a component in its own session, log to $STATE/logs/NAME.log.
# It returns once the child runs CMD: until then the pid is a fork of this shell, then setsid,
# and pid_alive (which checks the command line) took a component still starting for one that had
# exited (kube tier start-up failures with an empty log on a loaded machine).
spawn() {
  local name="$1"; shift
  setsid "$@" >"$STATE/logs/$name.log" 2>&1 </dev/null 9>&- &
  local pid=$! i
  echo "$pid" >"$STATE/pids/$name"
  for i in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || return 0
    [ "$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | head -n 1)" = "$1" ] && return 0
    sleep 0.05
  done
}

# wait_for NAME SECONDS CHECK...: poll CHECK until it succeeds; fail with the component's log.
wait_for() {
  local name="$1" secs="$2"; shift 2
  local end=$(( $(date +%s) + secs ))
  until "$@" >/dev/null 2>&1; do
    if ! pid_alive "$name"; then
      tail -n 40 "$STATE/logs/$name.log" >&2 || true
      die "$name exited during start-up (log $STATE/logs/$name.log)"
    fi
    if [ "$(date +%s)" -ge "$end" ]; then
      tail -n 40 "$STATE/logs/$name.log" >&2 || true
      die "$name not ready after ${secs}s (log $STATE/logs/$name.log)"
    fi
    sleep 0.3
  done
}

kctl() { "$BIN/kubectl" --kubeconfig "$STATE/kubeconfig" "$@"; }

# new_cert NAME CN SUBJ-EXTRA EXTFILE-LINES: a key and a certificate signed by the cluster CA.
new_cert() {
  local name="$1" subj="$2" ext="$3"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$STATE/pki/$name.key" -subj "$subj" \
    -out "$STATE/pki/$name.csr" 2>/dev/null
  printf '%b\n' "$ext" >"$STATE/pki/$name.ext"
  openssl x509 -req -in "$STATE/pki/$name.csr" -CA "$STATE/pki/ca.crt" -CAkey "$STATE/pki/ca.key" \
    -CAcreateserial -days 3650 -sha256 -extfile "$STATE/pki/$name.ext" -out "$STATE/pki/$name.crt" 2>/dev/null
  chmod 600 "$STATE/pki/$name.key"
}

# ECDSA P-256 keys (an RSA key costs about a second of CPU each on a busy 2-core machine).
make_pki() {
  mkdir -p "$STATE/pki"; chmod 700 "$STATE/pki"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 -subj "/CN=k8sddp-test-ca" \
    -keyout "$STATE/pki/ca.key" -out "$STATE/pki/ca.crt" 2>/dev/null
  local client="basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth"
  new_cert apiserver "/CN=kube-apiserver" \
    "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
  new_cert admin "/O=system:masters/CN=k8sddp-admin" "$client"
  new_cert controller-manager "/CN=system:kube-controller-manager" "$client"
  # service-account token signing key pair (ES256 tokens)
  openssl ecparam -name prime256v1 -genkey -noout -out "$STATE/pki/sa.key" 2>/dev/null
  openssl ec -in "$STATE/pki/sa.key" -pubout -out "$STATE/pki/sa.pub" 2>/dev/null
  chmod 600 "$STATE/pki/sa.key"
}

# write_kubeconfig FILE USER-CERT-NAME: a kubeconfig (mode 0600) with a client certificate.
write_kubeconfig() {
  local file="$1" user="$2"
  (umask 077
   cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: k8sddp-test
  cluster:
    server: https://127.0.0.1:$(cat "$STATE/ports/apiserver")
    certificate-authority: $STATE/pki/ca.crt
users:
- name: $user
  user:
    client-certificate: $STATE/pki/$user.crt
    client-key: $STATE/pki/$user.key
contexts:
- name: k8sddp-test
  context: {cluster: k8sddp-test, user: $user, namespace: default}
current-context: k8sddp-test
EOF
  )
  chmod 600 "$file"
}

reference_dir() {
  local c
  for c in "${K8SDDP_REFERENCE:-}" "$REPO/../shared/reference" /work/shared/reference; do
    if [ -n "$c" ] && [ -f "$c/kubeflow/kubeflow.org_pytorchjobs.yaml" ]; then echo "$c"; return 0; fi
  done
  return 1
}

# --- components --------------------------------------------------------------------------------
start_etcd() {
  local port peer
  port=$(free_port); peer=$(free_port); echo "$port" >"$STATE/ports/etcd"
  mkdir -p "$STATE/etcd"; chmod 700 "$STATE/etcd"
  spawn etcd "$BIN/etcd" --name k8sddp --data-dir "$STATE/etcd" \
    --listen-client-urls "http://127.0.0.1:$port" --advertise-client-urls "http://127.0.0.1:$port" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "k8sddp=http://127.0.0.1:$peer" --unsafe-no-fsync --log-level warn
}
ready_etcd() { curl -fsS "http://127.0.0.1:$(cat "$STATE/ports/etcd")/health"; }

start_kube-apiserver() {
  local port; port=$(free_port); echo "$port" >"$STATE/ports/apiserver"
  cat >"$STATE/audit-policy.yaml" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  resources: [{group: kubeflow.org}]
- level: None
EOF
  spawn kube-apiserver "$BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$(cat "$STATE/ports/etcd")" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$port" \
    --tls-cert-file "$STATE/pki/apiserver.crt" --tls-private-key-file "$STATE/pki/apiserver.key" \
    --client-ca-file "$STATE/pki/ca.crt" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$STATE/pki/sa.pub" --service-account-signing-key-file "$STATE/pki/sa.key" \
    --api-audiences https://kubernetes.default.svc.cluster.local \
    --service-cluster-ip-range 10.96.0.0/16 \
    --endpoint-reconciler-type none \
    --authorization-mode RBAC \
    --enable-admission-plugins ValidatingAdmissionWebhook,ValidatingAdmissionPolicy \
    --audit-policy-file "$STATE/audit-policy.yaml" --audit-log-path "$STATE/audit.log" \
    --audit-log-format json --audit-log-mode blocking \
    --profiling=false --v 1
}
ready_kube-apiserver() {
  [ -f "$STATE/kubeconfig" ] || write_kubeconfig "$STATE/kubeconfig" admin
  [ "$(curl -fsS --cacert "$STATE/pki/ca.crt" --cert "$STATE/pki/admin.crt" --key "$STATE/pki/admin.key" \
        "https://127.0.0.1:$(cat "$STATE/ports/apiserver")/readyz")" = ok ]
}

# The controllers the tests need; validatingadmissionpolicy-status-controller writes a policy's
# status.typeChecking (the API server itself does not).
KCM_CONTROLLERS="job-controller,garbage-collector-controller,namespace-controller,serviceaccount-controller"
KCM_CONTROLLERS="$KCM_CONTROLLERS,serviceaccount-token-controller,validatingadmissionpolicy-status-controller"

start_kube-controller-manager() {
  local port; port=$(free_port); echo "$port" >"$STATE/ports/controller-manager"
  write_kubeconfig "$STATE/controller-manager.kubeconfig" controller-manager
  spawn kube-controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig "$STATE/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$STATE/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$STATE/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$port" --leader-elect=false \
    --controllers "$KCM_CONTROLLERS" \
    --use-service-account-credentials \
    --service-account-private-key-file "$STATE/pki/sa.key" --root-ca-file "$STATE/pki/ca.crt" \
    --v 1
}
ready_kube-controller-manager() {
  curl -fsSk "https://127.0.0.1:$(cat "$STATE/ports/controller-manager")/healthz" &&
    kctl get serviceaccount default -n default
}

# The training operator's cert rotator (open-policy-agent/cert-controller) reads and refreshes the
# Secret kubeflow/training-operator-webhook-cert, injects its CA into the
# ValidatingWebhookConfiguration validator.training-operator.kubeflow.org, and waits for the
# kubelet to mount the Secret at /tmp/k8s-webhook-server/serving-certs (a fixed path in
# pkg/cert/cert.go) before it starts the controllers. Here the Secret is created with a CA and a
# serving certificate that the rotator accepts as valid (SAN training-operator.kubeflow.svc, CA
# SAN training-operator-ca, > 90 days), the certificate also names 127.0.0.1 so the webhook is
# called by URL on loopback, and this script does the kubelet's mount.
# RSA (the rotator parses its CA key with x509.ParsePKCS1PrivateKey); made in the background
# while etcd and the API server start.
make_operator_pki() {
  local d="$STATE/pki/operator"
  mkdir -p "$d"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/O=training-operator/CN=training-operator-ca" \
    -addext "subjectAltName=DNS:training-operator-ca" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,digitalSignature" \
    -keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null
  # the rotator parses its CA key as PKCS#1 (x509.ParsePKCS1PrivateKey), OpenSSL 3 writes PKCS#8
  openssl rsa -in "$d/ca.key" -traditional -out "$d/ca.key" 2>/dev/null
  openssl req -new -newkey rsa:2048 -nodes -keyout "$d/tls.key" -subj "/CN=training-operator.kubeflow.svc" \
    -out "$d/tls.csr" 2>/dev/null
  printf 'subjectAltName=DNS:training-operator.kubeflow.svc,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$d/ext"
  openssl x509 -req -in "$d/tls.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -days 3650 \
    -sha256 -extfile "$d/ext" -out "$d/tls.crt" 2>/dev/null
}

start_training-operator() {
  local ref; ref="$(reference_dir)" || die "no shared reference folder with kubeflow/kubeflow.org_pytorchjobs.yaml (set K8SDDP_REFERENCE)"
  kctl apply --server-side -f "$ref/kubeflow/kubeflow.org_pytorchjobs.yaml" >/dev/null
  local end=$(( $(date +%s) + 60 ))
  until [ "$(kctl get crd pytorchjobs.kubeflow.org -o jsonpath='{.status.conditions[?(@.type=="Established")].status}' 2>/dev/null)" = True ]; do
    [ "$(date +%s)" -lt "$end" ] || die "CRD pytorchjobs.kubeflow.org not established after 60s"
    sleep 0.3
  done
  local d="$STATE/pki/operator" wport mport hport
  wait "$OPERATOR_PKI_PID" || die "making the training operator's certificates failed"
  wport=$(free_port); mport=$(free_port); hport=$(free_port)
  echo "$hport" >"$STATE/ports/operator-health"
  kctl create namespace kubeflow --dry-run=client -o yaml | kctl apply -f - >/dev/null
  kctl -n kubeflow create secret generic training-operator-webhook-cert \
    --from-file "$d/ca.crt" --from-file "$d/ca.key" --from-file "$d/tls.crt" --from-file "$d/tls.key" \
    --dry-run=client -o yaml | kctl apply -f - >/dev/null
  kctl apply -f - >/dev/null <<EOF
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: validator.training-operator.kubeflow.org
webhooks:
- name: validator.pytorchjob.training-operator.kubeflow.org
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Fail
  clientConfig:
    url: https://127.0.0.1:$wport/validate-kubeflow-org-v1-pytorchjob
    caBundle: $(base64 -w0 "$d/ca.crt")
  rules:
  - apiGroups: [kubeflow.org]
    apiVersions: [v1]
    operations: [CREATE, UPDATE]
    resources: [pytorchjobs]
EOF
  # the kubelet's secret mount: where the rotator looks (fixed) and where the server reads
  mkdir -p "$STATE/operator-tmp/k8s-webhook-server/serving-certs" /tmp/k8s-webhook-server/serving-certs
  cp "$d/tls.crt" "$d/tls.key" "$STATE/operator-tmp/k8s-webhook-server/serving-certs/"
  [ -f /tmp/k8s-webhook-server/serving-certs/tls.crt ] || cp "$d/tls.crt" "$d/tls.key" /tmp/k8s-webhook-server/serving-certs/
  TMPDIR="$STATE/operator-tmp" MY_POD_NAMESPACE=kubeflow KUBECONFIG="$STATE/kubeconfig" \
    spawn training-operator "$BIN/training-operator" --enable-scheme pytorchjob \
    --webhook-server-port "$wport" --metrics-bind-address "127.0.0.1:$mport" \
    --health-probe-bind-address "127.0.0.1:$hport" --leader-elect=false
}
ready_training-operator() { curl -fsS "http://127.0.0.1:$(cat "$STATE/ports/operator-health")/readyz"; }

# The KubeRay operator (ray-operator v1.6.1: the newest the Go module proxy serves; v1.7.0's
# module zip is refused) over the v1.7.0 CRDs of the shared reference (RayCluster, RayJob,
# RayService, RayCronJob; v1.7.0 only adds optional fields to v1.6.1's). Out of cluster with the
# admin kubeconfig; flags from ray-operator/main.go at v1.6.1: --metrics-addr and
# --health-probe-bind-address (defaults :8080 and :8082, moved to free loopback ports),
# --enable-leader-election=false (v1.6.1's default is already false; said for the record),
# --feature-gates RayCronJob=true (alpha, off by default: without it the RayCronJob controller
# does not start); its validating webhook (names only) starts only with ENABLE_WEBHOOKS=true and
# is left off. RayClusterStatusConditions, RayJobDeletionPolicy and RayMultiHostIndexing are
# beta and on by default (pkg/features/features.go). With no kubelet the head and worker pods
# stay Pending; the RayCluster becomes `ready` (and a RayJob's submitter Job is created) only
# once a test writes every pod's status as Running and Ready.
kuberay_reference() {
  local c
  for c in "${K8SDDP_REFERENCE:-}" "$REPO/../shared/reference" /work/shared/reference; do
    if [ -n "$c" ] && [ -f "$c/kuberay/ray.io_rayjobs.yaml" ]; then echo "$c/kuberay"; return 0; fi
  done
  return 1
}

KUBERAY_CRDS="rayclusters rayjobs rayservices raycronjobs"

start_kuberay-operator() {
  local ref crd mport hport end
  ref="$(kuberay_reference)" || die "no shared reference folder with kuberay/ray.io_rayjobs.yaml (set K8SDDP_REFERENCE)"
  local files=()
  for crd in $KUBERAY_CRDS; do files+=(-f "$ref/ray.io_$crd.yaml"); done
  kctl apply --server-side "${files[@]}" >/dev/null
  end=$(( $(date +%s) + 60 ))
  for crd in $KUBERAY_CRDS; do
    until [ "$(kctl get crd "$crd.ray.io" -o jsonpath='{.status.conditions[?(@.type=="Established")].status}' 2>/dev/null)" = True ]; do
      [ "$(date +%s)" -lt "$end" ] || die "CRD $crd.ray.io not established after 60s"
      sleep 0.3
    done
  done
  mport=$(free_port); hport=$(free_port)
  echo "$hport" >"$STATE/ports/kuberay-health"
  KUBECONFIG="$STATE/kubeconfig" spawn kuberay-operator "$BIN/kuberay-operator" \
    --metrics-addr "127.0.0.1:$mport" --health-probe-bind-address "127.0.0.1:$hport" \
    --enable-leader-election=false --feature-gates RayCronJob=true \
    --log-stdout-encoder console
}
ready_kuberay-operator() { curl -fsS "http://127.0.0.1:$(cat "$STATE/ports/kuberay-health")/readyz"; }
# JobSet v0.12.0 and the Kubeflow Trainer v2.3.0 controller manager share one serving
# certificate signed by the cluster CA (SAN 127.0.0.1: their webhooks are called by URL on
# loopback, so the cluster CA is the webhook configurations' caBundle). Both read a
# Configuration file (jobset and trainer pkg/config): internal certificate management
# (open-policy-agent/cert-controller, which wants a Secret, a Service and a kubelet mount) off,
# leader election off, metrics off ("0"), webhook and health probe on free loopback ports. The
# webhook servers read tls.crt/tls.key from a folder: JobSet's webhook.certDir, and for the
# Trainer (its Configuration has no certDir) controller-runtime's default under $TMPDIR.
make_batch_pki() {
  [ -f "$STATE/batch-certs/tls.crt" ] && return 0
  new_cert batch "/CN=k8sddp-batch-webhooks" \
    "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost"
  mkdir -p "$STATE/batch-certs"
  cp "$STATE/pki/batch.crt" "$STATE/batch-certs/tls.crt"; cp "$STATE/pki/batch.key" "$STATE/batch-certs/tls.key"
}

# wait_established CRD...: every named CRD has condition Established (60 s at most).
wait_established() {
  local crd end=$(( $(date +%s) + 60 ))
  for crd in "$@"; do
    until [ "$(kctl get crd "$crd" -o jsonpath='{.status.conditions[?(@.type=="Established")].status}' 2>/dev/null)" = True ]; do
      [ "$(date +%s)" -lt "$end" ] || die "CRD $crd not established after 60s"
      sleep 0.3
    done
  done
}

# webhook_entry NAME PORT PATH GROUP VERSION RESOURCE OPERATIONS [LABEL]: one entry of a
# (Validating|Mutating)WebhookConfiguration, called by URL on loopback; LABEL: an objectSelector
# (the label must exist).
webhook_entry() {
  printf -- '- name: %s\n  admissionReviewVersions: [v1]\n  sideEffects: None\n  failurePolicy: Fail\n' "$1"
  printf '  clientConfig:\n    url: https://127.0.0.1:%s%s\n    caBundle: %s\n' "$2" "$3" "$(base64 -w0 "$STATE/pki/ca.crt")"
  printf '  rules:\n  - apiGroups: ["%s"]\n    apiVersions: [%s]\n    resources: [%s]\n    operations: [%s]\n' "$4" "$5" "$6" "$7"
  if [ -n "${8:-}" ]; then
    printf '  objectSelector:\n    matchExpressions: [{key: %s, operator: Exists}]\n' "$8"
  fi
}

# webhook_config KIND NAME: the head of a webhook configuration (entries follow).
webhook_config() {
  printf -- '---\napiVersion: admissionregistration.k8s.io/v1\nkind: %s\nmetadata: {name: %s}\nwebhooks:\n' "$1" "$2"
}

# JobSet v0.12.0 (the version Trainer v2.3.0's go.mod requires): its CRD and the webhooks of
# config/components/webhook (manifests.yaml, with patches/' objectSelector on the pod entries:
# only pods labelled jobset.sigs.k8s.io/jobset-name go to it). The Trainer's three CRDs are
# applied in the same kubectl call (the Trainer, started next, watches them and JobSets).
start_jobset-controller() {
  local ref; ref="$(reference_dir)" || die "no shared reference folder (set K8SDDP_REFERENCE)"
  local t="$ref/kubeflow-trainer" f
  for f in "$ref/jobset/jobset.x-k8s.io_jobsets.yaml" "$t/trainer.kubeflow.org_trainjobs.yaml" \
           "$t/trainer.kubeflow.org_trainingruntimes.yaml" "$t/trainer.kubeflow.org_clustertrainingruntimes.yaml"; do
    [ -f "$f" ] || die "$f missing (the JobSet v0.12.0 and Trainer v2.3.0 CRDs of the shared reference)"
  done
  kctl apply --server-side -f "$ref/jobset/jobset.x-k8s.io_jobsets.yaml" -f "$t/trainer.kubeflow.org_trainjobs.yaml" \
    -f "$t/trainer.kubeflow.org_trainingruntimes.yaml" -f "$t/trainer.kubeflow.org_clustertrainingruntimes.yaml" >/dev/null
  make_batch_pki
  local wport hport; wport=$(free_port); hport=$(free_port)
  echo "$hport" >"$STATE/ports/jobset-health"
  cat >"$STATE/jobset-config.yaml" <<EOF
apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
webhook: {port: $wport, host: 127.0.0.1, certDir: "$STATE/batch-certs"}
health: {healthProbeBindAddress: "127.0.0.1:$hport"}
metrics: {bindAddress: "0"}
leaderElection: {leaderElect: false}
internalCertManagement: {enable: false}
EOF
  { webhook_config MutatingWebhookConfiguration jobset-mutating-webhook-configuration
    webhook_entry mjobset.kb.io "$wport" /mutate-jobset-x-k8s-io-v1alpha2-jobset jobset.x-k8s.io v1alpha2 jobsets CREATE
    webhook_entry mpod.kb.io "$wport" /mutate--v1-pod "" v1 pods CREATE jobset.sigs.k8s.io/jobset-name
    webhook_config ValidatingWebhookConfiguration jobset-validating-webhook-configuration
    webhook_entry vjobset.kb.io "$wport" /validate-jobset-x-k8s-io-v1alpha2-jobset jobset.x-k8s.io v1alpha2 jobsets "CREATE, UPDATE"
    webhook_entry vpod.kb.io "$wport" /validate--v1-pod "" v1 pods CREATE jobset.sigs.k8s.io/jobset-name
  } | kctl apply -f - >/dev/null
  wait_established jobsets.jobset.x-k8s.io
  KUBECONFIG="$STATE/kubeconfig" spawn jobset-controller "$BIN/jobset-controller" \
    --config "$STATE/jobset-config.yaml" --metrics-bind-address 0 --zap-devel=false
}
ready_jobset-controller() { curl -fsS "http://127.0.0.1:$(cat "$STATE/ports/jobset-health")/readyz"; }

# The Kubeflow Trainer v2.3.0 controller manager (TrainJob, TrainingRuntime and
# ClusterTrainingRuntime controllers; the webhooks of manifests/base/webhook/manifests.yaml).
# No runtime is installed: tests apply the ones they use (`k8sddp runtime render`, the
# reference's stock torch-distributed).
start_trainer-controller-manager() {
  wait_established trainjobs.trainer.kubeflow.org trainingruntimes.trainer.kubeflow.org clustertrainingruntimes.trainer.kubeflow.org
  make_batch_pki
  local wport hport v=trainer.kubeflow.org; wport=$(free_port); hport=$(free_port)
  echo "$hport" >"$STATE/ports/trainer-health"
  cat >"$STATE/trainer-config.yaml" <<EOF
apiVersion: config.trainer.kubeflow.org/v1alpha1
kind: Configuration
webhook: {port: $wport, host: 127.0.0.1}
health: {healthProbeBindAddress: "127.0.0.1:$hport"}
metrics: {bindAddress: "0", secureServing: false}
leaderElection: {leaderElect: false}
certManagement: {enable: false}
EOF
  { webhook_config MutatingWebhookConfiguration "defaulter.$v"
    webhook_entry "defaulter.trainjob.$v" "$wport" /mutate-trainer-kubeflow-org-v1alpha1-trainjob "$v" v1alpha1 trainjobs "CREATE, UPDATE"
    webhook_config ValidatingWebhookConfiguration "validator.$v"
    webhook_entry "validator.clustertrainingruntime.$v" "$wport" /validate-trainer-kubeflow-org-v1alpha1-clustertrainingruntime "$v" v1alpha1 clustertrainingruntimes "CREATE, UPDATE"
    webhook_entry "validator.trainingruntime.$v" "$wport" /validate-trainer-kubeflow-org-v1alpha1-trainingruntime "$v" v1alpha1 trainingruntimes "CREATE, UPDATE"
    webhook_entry "validator.trainjob.$v" "$wport" /validate-trainer-kubeflow-org-v1alpha1-trainjob "$v" v1alpha1 trainjobs "CREATE, UPDATE"
  } | kctl apply -f - >/dev/null
  mkdir -p "$STATE/trainer-tmp/k8s-webhook-server/serving-certs"
  cp "$STATE/batch-certs/tls.crt" "$STATE/batch-certs/tls.key" "$STATE/trainer-tmp/k8s-webhook-server/serving-certs/"
  TMPDIR="$STATE/trainer-tmp" KUBECONFIG="$STATE/kubeconfig" \
    spawn trainer-controller-manager "$BIN/trainer-controller-manager" --config "$STATE/trainer-config.yaml"
}
ready_trainer-controller-manager() { curl -fsS "http://127.0.0.1:$(cat "$STATE/ports/trainer-health")/readyz"; }

# --- commands ----------------------------------------------------------------------------------
print_env() {
  echo "export KUBECONFIG=$STATE/kubeconfig"
  echo "export K8SDDP_KUBE_BIN=$BIN"
  echo "export K8SDDP_KUBE_STATE=$STATE"
  echo "export K8SDDP_KUBE_AUDIT_LOG=$STATE/audit.log"
}

any_running() {
  local c
  for c in "${COMPONENTS[@]}"; do pid_alive "$c" && return 0; done
  return 1
}

cmd_up() {
  if any_running; then
    log "a cluster is already running (state $STATE); \`$0 down\` stops it"
    print_env
    return 0
  fi
  for tool in openssl curl python3 setsid; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found on PATH"
  done
  # $STATE is wiped below: refuse a folder that is not a cluster state (K8SDDP_KUBE_STATE=$HOME)
  if [ -d "$STATE" ] && [ ! -d "$STATE/pids" ] && [ -n "$(ls -A "$STATE" 2>/dev/null)" ]; then
    echo "cluster.sh: $STATE exists and is not a cluster state folder (no pids/): not removing it; set K8SDDP_KUBE_STATE to a new or empty folder" >&2
    exit 2
  fi
  mkdir -p "$STATE" 2>/dev/null && [ -w "$STATE" ] ||
    { echo "cluster.sh: cannot create the state folder $STATE (K8SDDP_KUBE_STATE)" >&2; exit 2; }
  cmd_build
  rm -rf "$STATE"
  mkdir -p "$STATE"/{pids,logs,ports}; chmod 700 "$STATE"
  local t0 c; t0=$(date +%s)
  # a component that fails to start: stop the ones already started, keep the logs
  trap '[ "$UP_OK" = 1 ] || { log "start-up failed: stopping what was started (logs stay in $STATE/logs)"; stop_all >/dev/null; }' EXIT
  make_pki
  make_operator_pki & OPERATOR_PKI_PID=$!
  for c in "${COMPONENTS[@]}"; do
    "start_$c"
    if ! wait_for "$c" 120 "ready_$c"; then exit 3; fi
    log "$c ready ($(( $(date +%s) - t0 )) s)"
  done
  UP_OK=1
  print_env
}

# stop_all: SIGTERM each recorded component, newest first; SIGKILL after 10 s. Prints the count.
stop_all() {
  local c i pid stopped=0
  for (( i=${#COMPONENTS[@]}-1; i>=0; i-- )); do
    c="${COMPONENTS[$i]}"
    if pid_alive "$c"; then
      pid="$(cat "$STATE/pids/$c")"
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      kill -KILL "$pid" 2>/dev/null || true
      stopped=$((stopped + 1))
    fi
  done
  echo "$stopped"
}

cmd_down() {
  local stopped; stopped="$(stop_all)"
  if [ -d "$STATE/pids" ]; then rm -rf "$STATE"; fi
  log "stopped $stopped component(s)"
}

cmd_status() {
  local c
  for c in "${COMPONENTS[@]}"; do
    if pid_alive "$c"; then echo "$c running (pid $(cat "$STATE/pids/$c"))"; else echo "$c stopped"; fi
  done
}

case "${1:-}" in
  build) cmd_build ;;
  up) cmd_up ;;
  down) cmd_down ;;
  env)
    any_running || { echo "cluster.sh: no cluster running (state $STATE)" >&2; exit 3; }
    print_env ;;
  status) cmd_status ;;
  *) echo "usage: $0 build|up|down|env|status" >&2; exit 2 ;;
esac
