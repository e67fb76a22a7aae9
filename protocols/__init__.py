"""Neutral protocol modules: what the suite and the reference plugins both speak, so that neither imports
the other (the layering test, tests/test_layers.py). control_socket: the JSON-lines control channel of the
bundled plugins' health hooks; trace: the fake GPU's one-line-per-kubelet-call trace the differential
tests read."""
