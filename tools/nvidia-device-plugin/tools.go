//go:build tools

// Package tools pins NVIDIA's k8s-device-plugin, the third-party device plugin the suite runs as a test subject
// (Makefile: bin/nvidia-device-plugin; tests/test_nvidia_device_plugin.py). It is never compiled; the import
// only keeps `go mod tidy` from dropping it.
package tools

import (
	_ "github.com/NVIDIA/k8s-device-plugin/cmd/nvidia-device-plugin"
)
