"""The kubelet's gRPC APIs, generated from k8s.io/kubelet v0.34.4 (see generate.py).

Short names used across the project:
    dp, dp_grpc    deviceplugin v1beta1 (Registration, DevicePlugin)
    pr, pr_grpc    podresources v1 (PodResourcesLister)
    reg, reg_grpc  pluginregistration v1
    dra, dra_grpc  dra v1 (DRAPlugin: NodePrepareResources, NodeUnprepareResources)
    drab, drab_grpc  dra v1beta1 (the same service, the version kubelets before v1.34 speak)
    drah, drah_grpc  dra-health v1alpha1 (DRAResourceHealth: NodeWatchResources)
"""
from dpconform.kubeletapi.deviceplugin.v1beta1 import api_pb2 as dp
from dpconform.kubeletapi.deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc
from dpconform.kubeletapi.podresources.v1 import api_pb2 as pr
from dpconform.kubeletapi.podresources.v1 import api_pb2_grpc as pr_grpc
from dpconform.kubeletapi.pluginregistration.v1 import api_pb2 as reg
from dpconform.kubeletapi.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from dpconform.kubeletapi.dra.v1 import api_pb2 as dra
from dpconform.kubeletapi.dra.v1 import api_pb2_grpc as dra_grpc
from dpconform.kubeletapi.dra.v1beta1 import api_pb2 as drab
from dpconform.kubeletapi.dra.v1beta1 import api_pb2_grpc as drab_grpc
from dpconform.kubeletapi.drahealth.v1alpha1 import api_pb2 as drah
from dpconform.kubeletapi.drahealth.v1alpha1 import api_pb2_grpc as drah_grpc
from dpconform.kubeletapi import constants

__all__ = ["dp", "dp_grpc", "pr", "pr_grpc", "reg", "reg_grpc", "dra", "dra_grpc", "drab", "drab_grpc", "drah",
           "drah_grpc", "constants"]
