package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
)

// listen serves run-time control on the unix socket at path ("": none) in the protocol of the reference
// plugins' control channel (plugin_under_test/control_socket.py: one JSON object per line, one answered per
// line), with the fake NVML's operations, so `dpconform nvml-plugin health --control PATH GPU HEALTH` is a
// --health-hook for a plugin on this library too:
//
//	{"op": "xid", "device": GPU, "xid": N}  an XID critical error event (eventData N) to the sets watching GPU
//	{"op": "recover", "device": GPU}        a GPU recovery action event (NONE: recovered) to the sets watching
//	{"op": "status"}                        each GPU's index, uuid, numa and how many event sets listen on it
//
// GPU is its index or its UUID.
func listen(path string) {
	if path == "" {
		return
	}
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "mock-nvml: control socket %s: %v\n", path, err)
		return
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
}

func serve(c net.Conn) {
	defer c.Close()
	lines := bufio.NewScanner(c)
	out := json.NewEncoder(c)
	for lines.Scan() {
		var req map[string]any
		if err := json.Unmarshal(lines.Bytes(), &req); err != nil {
			_ = out.Encode(map[string]any{"ok": false, "error": "not a JSON object: " + err.Error()})
			continue
		}
		_ = out.Encode(answer(req))
	}
}

func answer(req map[string]any) map[string]any {
	switch req["op"] {
	case "status":
		return status()
	case "xid", "recover":
		i := find(fmt.Sprint(req["device"]))
		if i < 0 {
			return map[string]any{"ok": false, "error": fmt.Sprintf("no GPU %v", req["device"])}
		}
		if req["op"] == "recover" {
			n := post(i, eventRecoveryAction, recoveryActionNone)
			reply := map[string]any{"ok": n > 0, "device": devices[i].uuid, "index": i, "delivered": n}
			if n == 0 {
				reply["unsupported"] = true
				reply["error"] = "no event set listens for GPU recovery events on this GPU: the plugin does not recover devices"
			}
			return reply
		}
		xid, ok := req["xid"].(float64)
		if !ok {
			return map[string]any{"ok": false, "error": "xid: a number"}
		}
		n := post(i, eventXidCritical, uint64(xid))
		return map[string]any{"ok": true, "device": devices[i].uuid, "index": i, "xid": int(xid), "delivered": n}
	}
	return map[string]any{"ok": false, "error": fmt.Sprintf("unknown op %v (xid, recover, status)", req["op"])}
}

func find(gpu string) int {
	for i, g := range devices {
		if g.uuid == gpu || strconv.Itoa(i) == gpu {
			return i
		}
	}
	return -1
}

func status() map[string]any {
	mu.Lock()
	defer mu.Unlock()
	listeners := func(i int, bit uint64) int {
		n := 0
		for _, s := range sets {
			if s.watched[i]&bit != 0 {
				n++
			}
		}
		return n
	}
	var gpus []map[string]any
	for i, g := range devices {
		gpus = append(gpus, map[string]any{"index": i, "uuid": g.uuid, "numa": g.numa,
			"listeners": listeners(i, eventXidCritical), "recoveryListeners": listeners(i, eventRecoveryAction)})
	}
	return map[string]any{"ok": true, "initialized": inits > 0, "eventSets": len(sets), "devices": gpus}
}
