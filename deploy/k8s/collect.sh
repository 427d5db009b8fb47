#!/bin/sh
# Copy a finished run's files from the master pod: records, health samples, run file, Locust CSVs.
#   deploy/k8s/collect.sh [destination]     (default: reports/k8s-<time>)
# then: llmload table <destination>/run --metrics
set -eu
dest="${1:-reports/k8s-$(date +%Y%m%d-%H%M%S)}"
pod="$(kubectl get pod -l app.kubernetes.io/component=master,app.kubernetes.io/name=llmload \
  -o jsonpath='{.items[0].metadata.name}')"
# the ladder writes "finished": true into run_run.json after its last rung
if ! kubectl exec "$pod" -- grep -q '"finished": true' /reports/run_run.json; then
  echo "collect.sh: the sweep on $pod has not finished yet (see the web UI on port 8089)" >&2
  exit 1
fi
mkdir -p "$dest"
kubectl cp "$pod:/reports" "$dest"
echo "collect.sh: copied to $dest; llmload table $dest/run --metrics"
