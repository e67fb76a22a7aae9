//go:build tools

// Package tools pins crictl (sigs.k8s.io/cri-tools), the CRI client kind's node image carries
// (fixtures/cluster/kind_base.py builds it into the offline base image). Never compiled.
package tools

import (
	_ "sigs.k8s.io/cri-tools/cmd/crictl"
)
