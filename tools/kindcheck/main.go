// Command kindcheck decodes kind cluster configs exactly as `kind create cluster --config` does,
// strictly (an unknown or misspelt field is an error), without creating anything.
//
// Usage: kindcheck FILE...     exit 0: every file decodes; 1: the first failure, as "FILE: error"
//
// kind's loader (sigs.k8s.io/kind/pkg/internal/apis/config/encoding.Parse: apiVersion/kind check,
// go.yaml.in/yaml/v3 with KnownFields(true) into v1alpha4.Cluster, conversion to the internal
// type) is internal to kind and cannot be imported. Its public entry point is the create option
// cluster.CreateWithRawConfig, and Provider.Create applies its options in order before touching
// the container runtime. So kindcheck passes CreateWithRawConfig(file) followed by
// CreateWithConfigFile(<a path that does not exist>): a config kind rejects returns kind's own
// decode error; a config kind accepts gets as far as the second option, whose "file not found"
// means "decoded". Nothing reaches docker: the provider is constructed without detection
// (ProviderWithDocker runs no command) and Create returns at the second option either way.
// The pin is sigs.k8s.io/kind v0.33.0 (go.mod); tests/test_kind_configs.py proves a typo fails.
package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"sigs.k8s.io/kind/pkg/cluster"
)

// decode returns nil when kind v0.33.0 accepts raw as a cluster config, else kind's error.
func decode(raw []byte, sentinel string) error {
	p := cluster.NewProvider(cluster.ProviderWithDocker())
	err := p.Create("kindcheck", cluster.CreateWithRawConfig(raw), cluster.CreateWithConfigFile(sentinel))
	if err == nil {
		return errors.New("kindcheck: unexpected: kind's create went past the sentinel option")
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil // kind parsed raw and moved on to the sentinel file: accepted
	}
	return err
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: kindcheck FILE...   (decodes kind v1alpha4 cluster configs strictly)")
		os.Exit(2)
	}
	dir, err := os.MkdirTemp("", "kindcheck-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "kindcheck:", err)
		os.Exit(2)
	}
	defer os.RemoveAll(dir)
	sentinel := filepath.Join(dir, "absent.yaml") // never created
	rc := 0
	for _, path := range os.Args[1:] {
		raw, err := os.ReadFile(path)
		if err == nil {
			err = decode(raw, sentinel)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
			rc = 1
			continue
		}
		fmt.Printf("%s: ok\n", path)
	}
	os.RemoveAll(dir)
	os.Exit(rc)
}
