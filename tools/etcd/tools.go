//go:build tools

// Package tools pins etcd for the local cluster (Makefile: cluster-bins builds bin/etcd with
// `go build go.etcd.io/etcd/server/v3`: the module's root package is etcd's main).
// It is never compiled; the import only keeps `go mod tidy` from dropping its dependencies.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
)
