#!/usr/bin/env bash
# The main job on the bundled examples, from a fresh checkout:
#   1. set up a virtual environment with k8sddp,
#   2. render the example DDPJob spec into a guarded PyTorchJob,
#   3. validate it under the strict profile (passes),
#   4. validate an unguarded PyTorchJob (rejected, the missing variables named),
#   5. submit the example locally (`k8sddp submit --local`: two pods on this machine, run as the
#      Kubeflow operator would run them, guarded training, checkpoints on the local "PVC"), when the
#      training runtime and torch are available (K8SDDP_DEMO_LOCAL=0 skips it).
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
echo "== the guarded job passes, the unguarded one is refused (exit $rc)"

if [ "${K8SDDP_DEMO_LOCAL:-1}" != 0 ] && $k8sddp launch --help >/dev/null 2>&1; then
  if ! .venv/bin/python -c "import torch" 2>/dev/null; then
    echo "== installing the train extra (torch 2.13.0, CPU) into .venv for the local run (once)"
    .venv/bin/python -m pip install -q "torch==2.13.0" -e ".[train]" || true
  fi
  if .venv/bin/python -c "import torch" 2>/dev/null; then
    echo "== k8sddp submit --local examples/ddpjob.yaml  (2 pods x 1 process, CPU/gloo; logs and checkpoints in $out/local)"
    $k8sddp submit --local --local-dir "$out/local" --timeout 15m \
      --set spec.nodes=2 --set spec.procsPerNode=1 examples/ddpjob.yaml
    echo "   checkpoints: $(ls "$out/local/pvc/demo-checkpoints/k8sddp/checkpoints" 2>/dev/null | tr '\n' ' ')"
  else
    echo "== skipping submit --local: torch is not installable here"
  fi
else
  echo "== skipping submit --local (K8SDDP_DEMO_LOCAL=0, or the training runtime is not installed)"
fi
echo "== demo finished"
