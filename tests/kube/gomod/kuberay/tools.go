//go:build tools

// Package tools pins the KubeRay operator that tests/kube/cluster.sh builds, so that
// `go mod tidy` keeps its dependencies in go.sum.
package tools

import (
	_ "github.com/ray-project/kuberay/ray-operator"
)
