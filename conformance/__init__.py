"""The conformance checks (the catalogue: docs/checks.md, `dpconform checks`), one module per area. Run with `pytest conformance` or `dpconform run`."""
