"""dpconform: conformance and load tests for Kubernetes device plugins.

The Python API (dpconform/api.py): `dpconform.run(...)` -> `RunReport`; `dpconform.load_report(path)`."""
__version__ = "0.1.0"

from dpconform.api import PUBLIC, CheckVerdict, RunError, RunReport, load_report, run  # noqa: E402

__all__ = ["__version__", *PUBLIC]
