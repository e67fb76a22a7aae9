"""The conformance checks of CHECKS.md, one module per area. Run with `pytest conformance` or `dpconform run`."""
