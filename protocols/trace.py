"""The fake GPU's RPC trace: with --log-level DEBUG it logs one line per kubelet call, "rpc-trace <JSON>";
the differential tests read those lines from its output to compare what each kubelet called."""
from __future__ import annotations

import json

TRACE_PREFIX = "rpc-trace "


def trace_line(rpc: str, **fields) -> str:
    return TRACE_PREFIX + json.dumps({"rpc": rpc, **fields}, sort_keys=True)


def parse_trace(line: str) -> dict | None:
    """The call a trace line records; None for any other line."""
    i = line.find(TRACE_PREFIX)
    return None if i < 0 else json.loads(line[i + len(TRACE_PREFIX):])
