"""The upstream sample plugin's Allocate creates /tmp/<device ID> (hard-coded in its source,
test/images/sample-device-plugin) and answers a Mount with that host path. When the plugin runs in a
container (the DaemonSet tests) the file lands in the container's /tmp, so the runtime makes the missing
host path itself, as a directory. Either shape is removed here.

Import as `from tests.support.sample_plugin_files import PATHS, remove`."""
from __future__ import annotations

import pathlib

PATHS = tuple(pathlib.Path("/tmp") / d for d in ("Dev-1", "Dev-2"))


def remove(paths) -> None:
    """Remove each path, a file or an empty directory; one already gone (another session's teardown)
    or a directory someone filled is left without error."""
    for p in paths:
        try:
            p.unlink()
        except FileNotFoundError:
            pass
        except IsADirectoryError:
            try:
                p.rmdir()
            except (FileNotFoundError, OSError):
                pass
