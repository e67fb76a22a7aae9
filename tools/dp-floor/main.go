// Command dp-floor is the harness floor of `make bench` and of plugin_allocate_burst: a device-plugin
// (deviceplugin v1beta1) gRPC server that does nothing, in Go, so that the load generator against it
// measures the generator and the transport, not a server slower than the plugins it should bound.
//
// Usage: dp-floor --socket PATH
//
// GetDevicePluginOptions answers empty options; Allocate answers one empty ContainerAllocateResponse
// per container request; every other RPC is Unimplemented. It never registers with a kubelet (the
// harness dials PATH directly). A stale socket at PATH is replaced; on SIGTERM or SIGINT the server
// stops and PATH is removed. scenarios/noop_plugin.py starts it (Makefile: bin/dp-floor).
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"google.golang.org/grpc"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type noop struct {
	pluginapi.UnimplementedDevicePluginServer
}

func (noop) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (noop) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{ContainerResponses: make([]*pluginapi.ContainerAllocateResponse, len(req.ContainerRequests))}
	for i := range resp.ContainerResponses {
		resp.ContainerResponses[i] = &pluginapi.ContainerAllocateResponse{}
	}
	return resp, nil
}

func main() {
	socket := flag.String("socket", "", "unix socket to serve on (required)")
	flag.Parse()
	if *socket == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: dp-floor --socket PATH")
		os.Exit(2)
	}
	if err := os.Remove(*socket); err != nil && !os.IsNotExist(err) {
		fmt.Fprintf(os.Stderr, "dp-floor: %v\n", err)
		os.Exit(1)
	}
	lis, err := net.Listen("unix", *socket)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dp-floor: %v\n", err)
		os.Exit(1)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, noop{})
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sigs
		srv.Stop() // closes the listener and every connection; Serve returns
	}()
	err = srv.Serve(lis)
	os.Remove(*socket)
	if err != nil && err != grpc.ErrServerStopped {
		fmt.Fprintf(os.Stderr, "dp-floor: %v\n", err)
		os.Exit(1)
	}
}
