//go:build tools

// Package tools pins the Kubernetes programs the node backend builds (see Makefile: kube-bins).
// It is never compiled; the imports only keep `go mod tidy` from dropping their dependencies.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/test/images/sample-device-plugin"
)
