package main

import (
	"fmt"
	"hash/fnv"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// profile is a node: its GPUs (go-nvml's configurations), their NUMA nodes and the driver it reports.
type profile struct {
	name      string
	gpu       gpus.Config
	numaNodes []int // per GPU
	driver    string
	cuda      int
	subsystem uint32
}

// The nodes DPCONFORM_MOCK_NVML_PROFILE names. A DGX has its eight GPUs on two NUMA nodes, four on each.
var profiles = map[string]*profile{
	"a100x8": {name: "a100x8", gpu: gpus.A100_SXM4_40GB, numaNodes: []int{0, 0, 0, 0, 1, 1, 1, 1},
		driver: "550.54.15", cuda: 12040, subsystem: 0x134f10de},
	"h100x8": {name: "h100x8", gpu: gpus.H100_SXM5_80GB, numaNodes: []int{0, 0, 0, 0, 1, 1, 1, 1},
		driver: "550.54.15", cuda: 12040, subsystem: 0x16c110de},
	"a100x2": {name: "a100x2", gpu: gpus.A100_PCIE_40GB, numaNodes: []int{0, 0},
		driver: "550.54.15", cuda: 12040, subsystem: 0x145f10de},
}

// profileName is the default profile's name for "".
func profileName(name string) string {
	if name == "" {
		return "a100x8"
	}
	return name
}

func (p *profile) server() *server.Server {
	s, err := server.New(server.WithGPUs(gpus.Multiple(len(p.numaNodes), p.gpu)...),
		server.WithDriverVersion(p.driver), server.WithNVMLVersion("12."+p.driver),
		server.WithCUDADriverVersion(p.cuda))
	if err != nil {
		panic(fmt.Sprintf("mock-nvml: profile %s: %v", p.name, err))
	}
	return s
}

// uuid is GPU i's UUID: the same in every process (go-nvml's servers draw a random one per start; a real GPU
// keeps its own, and a device plugin advertises it as the device ID).
func (p *profile) uuid(i int) string {
	h := fnv.New128a()
	fmt.Fprintf(h, "%s/%d", p.name, i)
	b := h.Sum(nil)
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// busID is GPU i's PCI bus ID: a bus per GPU, the second NUMA node's from 0x80 on (as on a two-socket server).
func (p *profile) busID(i int) string {
	return fmt.Sprintf("0000:%02x:00.0", 0x07+i+0x80*p.numaNodes[i])
}

func (p *profile) numa(i int) int { return p.numaNodes[i] }
