"""What the project's tests share: running the suite in a subprocess (conformance_runner), building a Go
helper once (make_built), the outcome rules a defect run is judged by (verdicts), the host's state around a
run (host), the mock NVML library (mock_nvml), and small fakes (fake_kubelet, the sample plugin's files,
the checkpoint history, the cluster's RBAC). No test module imports another: what two need lives here."""
