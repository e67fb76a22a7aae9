"""dpconform: conformance and load tests for Kubernetes device plugins.

The Python API (dpconform/api.py): `dpconform.run(...)` -> `RunReport`; `dpconform.load_report(path)`.
Imported on first use: the bundled plugins (`python -m dpconform fakegpu`), started many times in a run,
do not pay for it."""
__version__ = "0.1.0"


def __getattr__(name: str):
    import importlib
    api = importlib.import_module("dpconform.api")
    if name == "__all__":
        return ["__version__", *api.PUBLIC]
    if name in api.PUBLIC:
        return getattr(api, name)
    raise AttributeError(f"module 'dpconform' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__getattr__("__all__")})
