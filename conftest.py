# Thin on purpose: the harness lives in fixtures/ (DESIGN.md).
pytest_plugins = ["fixtures.pytest_plugin"]
