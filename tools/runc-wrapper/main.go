// runc-wrapper runs runc without the capabilities this host cannot grant.
//
// A workaround, not a runtime: on a host whose capability bounding set lacks a capability (this
// project's VMs lack CAP_SYS_RESOURCE), a privileged container asks for every capability and runc
// fails with "unable to apply caps: operation not permitted". Before handing over to the real runc,
// this program deletes from the container's capability sets every capability missing from its own
// bounding set: in the bundle's config.json for `create` and `run`, in the `--process` file for `exec`.
// Everything else passes through unchanged (the same arguments, runc's own exit status). Register it with
// Docker: `dockerd --add-runtime dpconform-runc=PATH --default-runtime dpconform-runc`.
//
// The real runc: $RUNC_WRAPPER_REAL, else /usr/sbin/runc, else /usr/bin/runc.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// capNames: Linux capability numbers (include/uapi/linux/capability.h) to the names the OCI spec uses.
var capNames = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE",
	"CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER", "CAP_SYS_MODULE",
	"CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE", "CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT",
	"CAP_SYS_NICE", "CAP_SYS_RESOURCE", "CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE",
	"CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG",
	"CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE",
}

// missing returns the capabilities (by OCI name) absent from this process's bounding set.
func missing() (map[string]bool, error) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "CapBnd:") {
			continue
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(line, "CapBnd:")), 16, 64)
		if err != nil {
			return nil, err
		}
		out := map[string]bool{}
		for i, name := range capNames {
			if mask&(1<<uint(i)) == 0 {
				out[name] = true
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("no CapBnd line in /proc/self/status")
}

// strip deletes the `drop` capabilities from each set of an OCI capabilities object.
func strip(caps map[string]any, drop map[string]bool) bool {
	changed := false
	for set, v := range caps {
		list, ok := v.([]any)
		if !ok {
			continue
		}
		kept := list[:0:0]
		for _, c := range list {
			if s, ok := c.(string); ok && drop[s] {
				changed = true
				continue
			}
			kept = append(kept, c)
		}
		caps[set] = kept
	}
	return changed
}

// rewrite strips `drop` from the capabilities found at `path` (keys) inside the JSON file.
func rewrite(file string, drop map[string]bool, path ...string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	node := doc
	for _, key := range path {
		next, ok := node[key].(map[string]any)
		if !ok {
			return nil // no such object: nothing asked for
		}
		node = next
	}
	if !strip(node, drop) {
		return nil
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	info, err := os.Stat(file)
	if err != nil {
		return err
	}
	return os.WriteFile(file, out, info.Mode().Perm())
}

// flagValue finds `--name VALUE`, `--name=VALUE` or `-short VALUE` among the arguments after the subcommand.
func flagValue(args []string, name, short string) string {
	for i, a := range args {
		if (a == "--"+name || (short != "" && a == "-"+short)) && i+1 < len(args) {
			return args[i+1]
		}
		if strings.HasPrefix(a, "--"+name+"=") {
			return strings.TrimPrefix(a, "--"+name+"=")
		}
	}
	return ""
}

// subcommand returns the index of runc's subcommand (the first of create, run, exec), or -1.
func subcommand(args []string) int {
	for i, a := range args {
		if a == "create" || a == "run" || a == "exec" {
			return i
		}
	}
	return -1
}

func realRunc() string {
	for _, p := range []string{os.Getenv("RUNC_WRAPPER_REAL"), "/usr/sbin/runc", "/usr/bin/runc"} {
		if p == "" {
			continue
		}
		if self, err := os.Executable(); err == nil {
			if a, _ := filepath.EvalSymlinks(p); a == self {
				continue
			}
		}
		if info, err := os.Stat(p); err == nil && !info.IsDir() {
			return p
		}
	}
	return ""
}

func main() {
	args := os.Args[1:]
	if i := subcommand(args); i >= 0 {
		drop, err := missing()
		if err != nil {
			fmt.Fprintf(os.Stderr, "runc-wrapper: reading the bounding set: %v\n", err)
			os.Exit(1)
		}
		rest := args[i+1:]
		if args[i] == "exec" {
			if p := flagValue(rest, "process", "p"); p != "" {
				err = rewrite(p, drop, "capabilities")
			}
		} else {
			bundle := flagValue(rest, "bundle", "b")
			if bundle == "" {
				bundle = "."
			}
			err = rewrite(filepath.Join(bundle, "config.json"), drop, "process", "capabilities")
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "runc-wrapper: %v\n", err)
			os.Exit(1)
		}
	}
	runc := realRunc()
	if runc == "" {
		fmt.Fprintln(os.Stderr, "runc-wrapper: no runc found: set RUNC_WRAPPER_REAL or install runc")
		os.Exit(127)
	}
	if err := syscall.Exec(runc, append([]string{runc}, args...), os.Environ()); err != nil {
		fmt.Fprintf(os.Stderr, "runc-wrapper: exec %s: %v\n", runc, err)
		os.Exit(126)
	}
}
