//go:build tools

// Package tools keeps the kind command itself (package main at the module root of
// sigs.k8s.io/kind) in this module's requirements, so `go build sigs.k8s.io/kind` here builds the
// same pinned kind that kindcheck decodes with (Makefile: bin/kind; fixtures/cluster/kind.py builds
// it when no `kind` is on PATH). Never compiled.
package tools

import (
	_ "sigs.k8s.io/kind"
)
