//go:build tools

// Package tools pins the main packages that tests/kube/cluster.sh builds, so that
// `go mod tidy` keeps their dependencies in go.sum.
package tools

import (
	_ "github.com/kubeflow/training-operator/cmd/training-operator.v1"
	_ "github.com/yannh/kubeconform/cmd/kubeconform"
	_ "helm.sh/helm/v3/cmd/helm"
)
