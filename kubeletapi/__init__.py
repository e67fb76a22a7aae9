"""The kubelet's gRPC APIs, generated from k8s.io/kubelet v0.34.4 (see generate.py).

Short names used across the project:
    dp, dp_grpc    deviceplugin v1beta1 (Registration, DevicePlugin)
    pr, pr_grpc    podresources v1 (PodResourcesLister)
    reg, reg_grpc  pluginregistration v1
    dra, dra_grpc  dra v1 (DRAPlugin: NodePrepareResources, NodeUnprepareResources)
    drab, drab_grpc  dra v1beta1 (the same service, the version kubelets before v1.34 speak)
    drah, drah_grpc  dra-health v1alpha1 (DRAResourceHealth: NodeWatchResources)
"""
from kubeletapi.deviceplugin.v1beta1 import api_pb2 as dp
from kubeletapi.deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc
from kubeletapi.podresources.v1 import api_pb2 as pr
from kubeletapi.podresources.v1 import api_pb2_grpc as pr_grpc
from kubeletapi.pluginregistration.v1 import api_pb2 as reg
from kubeletapi.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from kubeletapi.dra.v1 import api_pb2 as dra
from kubeletapi.dra.v1 import api_pb2_grpc as dra_grpc
from kubeletapi.dra.v1beta1 import api_pb2 as drab
from kubeletapi.dra.v1beta1 import api_pb2_grpc as drab_grpc
from kubeletapi.drahealth.v1alpha1 import api_pb2 as drah
from kubeletapi.drahealth.v1alpha1 import api_pb2_grpc as drah_grpc
from kubeletapi import constants

__all__ = ["dp", "dp_grpc", "pr", "pr_grpc", "reg", "reg_grpc", "dra", "dra_grpc", "drab", "drab_grpc", "drah",
           "drah_grpc", "constants"]
