"""Packaging: one import namespace, `dpconform`.

The source folders stay at the top of the repository (so `pytest conformance` and the paths in the
docs keep working), but installed they are sub-packages of `dpconform`: `dpconform.fixtures`,
`dpconform.conformance`, ... A wheel therefore holds one top-level name and never shadows another
distribution's package (the PyPI `fixtures`, for one). Metadata lives in pyproject.toml.
"""
from setuptools import find_namespace_packages, setup

FOLDERS = ("fixtures", "conformance", "scenarios", "plugin_under_test", "kubeletapi", "protocols")

# dpconform/ itself and its own sub-packages (dpconform.commands: the command entry points)
packages = ["dpconform", *(f"dpconform.{p}" for p in find_namespace_packages(where="dpconform",
                                                                            exclude=["*__pycache__*"]))]
package_dir = {"dpconform": "dpconform"}
for folder in FOLDERS:
    for sub in [folder, *(f"{folder}.{p}" for p in find_namespace_packages(where=folder, exclude=["*__pycache__*"]))]:
        packages.append(f"dpconform.{sub}")
    package_dir[f"dpconform.{folder}"] = folder

# the Go wrapper modules (go.mod, go.sum) `dpconform bins` builds from: data only, no Python
packages.append("dpconform.tools")
package_dir["dpconform.tools"] = "tools"

setup(packages=packages, package_dir=package_dir)
