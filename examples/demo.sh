#!/usr/bin/env bash
# The main job on the bundled examples, from a fresh checkout:
#   1. set up a virtual environment with k8sddp,
#   2. render the example DDPJob spec into a guarded PyTorchJob,
#   3. validate it under the strict profile (passes),
#   4. validate an unguarded PyTorchJob (rejected, the missing variables named).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${K8SDDP_DEMO_OUT:-$(mktemp -d)}
mkdir -p "$out"

if [ ! -x .venv/bin/k8sddp ]; then
  echo "== setting up .venv (once)"
  python3 -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e .
fi
k8sddp=.venv/bin/k8sddp

echo "== k8sddp render examples/ddpjob.yaml --out $out/demo.yaml"
$k8sddp render examples/ddpjob.yaml --out "$out/demo.yaml"
echo "   wrote $out/demo.yaml ($(wc -l <"$out/demo.yaml") lines)"

echo "== k8sddp validate --profile strict $out/demo.yaml"
$k8sddp validate --profile strict "$out/demo.yaml"

echo "== k8sddp validate examples/unguarded-pytorchjob.yaml   (expected: rejected, exit 1)"
set +e
$k8sddp validate examples/unguarded-pytorchjob.yaml
rc=$?
set -e
if [ "$rc" -ne 1 ]; then
  echo "demo: expected exit 1 for the unguarded manifest, got $rc" >&2
  exit 1
fi
echo "== demo finished: the guarded job passes, the unguarded one is refused (exit $rc)"
