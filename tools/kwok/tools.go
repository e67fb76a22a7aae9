//go:build tools

// Package tools pins kwokctl for the local cluster (Makefile: cluster-bins builds bin/kwokctl).
// It is never compiled; the import only keeps `go mod tidy` from dropping its dependencies.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwokctl"
)
