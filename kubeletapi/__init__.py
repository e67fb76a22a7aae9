"""The kubelet's gRPC APIs, generated from the newest supported release's k8s.io/kubelet (see generate.py).

Short names used across the project:
    dp, dp_grpc    deviceplugin v1beta1 (Registration, DevicePlugin)
    pr, pr_grpc    podresources v1 (PodResourcesLister)
    reg, reg_grpc  pluginregistration v1
    dra, dra_grpc  dra v1 (DRAPlugin: NodePrepareResources, NodeUnprepareResources)
    drab, drab_grpc  dra v1beta1 (the same service, the version older kubelets speak)
    drah, drah_grpc  dra-health v1alpha1 (DRAResourceHealth: NodeWatchResources)
    drah1, drah1_grpc  dra-health v1 (the same service, which newer kubelets also open)
"""
import importlib

# The stubs load on first use (PEP 562): a process that needs only `constants` (a health hook, a CLI's
# --help) does not pay for every generated module and gRPC.
_STUBS = {"dp": "deviceplugin.v1beta1.api_pb2", "dp_grpc": "deviceplugin.v1beta1.api_pb2_grpc",
          "pr": "podresources.v1.api_pb2", "pr_grpc": "podresources.v1.api_pb2_grpc",
          "reg": "pluginregistration.v1.api_pb2", "reg_grpc": "pluginregistration.v1.api_pb2_grpc",
          "dra": "dra.v1.api_pb2", "dra_grpc": "dra.v1.api_pb2_grpc",
          "drab": "dra.v1beta1.api_pb2", "drab_grpc": "dra.v1beta1.api_pb2_grpc",
          "drah": "drahealth.v1alpha1.api_pb2", "drah_grpc": "drahealth.v1alpha1.api_pb2_grpc",
          "drah1": "drahealth.v1.api_pb2", "drah1_grpc": "drahealth.v1.api_pb2_grpc"}


def __getattr__(name: str):
    if name == "constants":
        return importlib.import_module(f"{__name__}.constants")
    if name in _STUBS:
        module = importlib.import_module(f"{__name__}.{_STUBS[name]}")
        globals()[name] = module
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["dp", "dp_grpc", "pr", "pr_grpc", "reg", "reg_grpc", "dra", "dra_grpc", "drab", "drab_grpc", "drah",
           "drah_grpc", "drah1", "drah1_grpc", "constants"]
