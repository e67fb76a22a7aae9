# Thin on purpose: the harness lives in fixtures/ (DESIGN.md). Plugins listed here are loaded before the
# command line is parsed, so their options work from the repo root (`pytest -m load --load-profile full`).
pytest_plugins = ["dpconform.fixtures.pytest_plugin", "dpconform.scenarios.pytest_options"]
