"""dpconform: conformance and load tests for Kubernetes device plugins."""
__version__ = "0.1.0"
