//go:build tools

// Package tools pins ghz, the native gRPC load generator of plugin_allocate_burst and make bench
// (Makefile: bin/ghz). It is never compiled; the import only keeps `go mod tidy` from dropping it.
package tools

import (
	_ "github.com/bojand/ghz/cmd/ghz"
)
