//go:build tools

// Package tools pins the main packages that tests/kube/cluster.sh builds for Kubeflow Trainer v2:
// the trainer controller manager v2.3.0 and the JobSet controller v0.12.0 it requires, so that
// `go mod tidy` keeps their dependencies in go.sum.
package tools

import (
	_ "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager"
	_ "sigs.k8s.io/jobset"
)
