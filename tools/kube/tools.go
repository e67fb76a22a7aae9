//go:build tools

// Package tools pins the Kubernetes programs the backends build (see Makefile: kube-bins for the node
// backend, cluster-bins for the local cluster's control plane, bin/dra-test-driver for the DRA driver,
// kubeadm and kubectl for kind's offline node image).
// It is never compiled; the imports only keep `go mod tidy` from dropping their dependencies.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kubeadm"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/test/e2e/dra/test-driver"
	_ "k8s.io/kubernetes/test/images/sample-device-plugin"
)
