// Wrapper module: mock-nvml (main.go, profiles.go), a libnvidia-ml.so.1 of our own over go-nvml's mock NVML
// servers, built with -buildmode=c-shared (Makefile: bin/mock-nvml/libnvidia-ml.so.1).
module dpconform.local/mock-nvml

go 1.26.0

require github.com/NVIDIA/go-nvml v0.13.4-1

require github.com/google/uuid v1.6.0 // indirect
