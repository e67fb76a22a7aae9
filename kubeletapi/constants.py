"""Constants of the kubelet device-plugin API (k8s.io/kubelet, deviceplugin/v1beta1 constants.go)."""

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"

VERSION = "v1beta1"
SUPPORTED_VERSIONS = ("v1beta1",)

DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"   # the one place this path is spelled
DEVICE_PLUGIN_PATH = DEVICE_PLUGIN_DIR + "/"
KUBELET_SOCKET_NAME = "kubelet.sock"
KUBELET_SOCKET = DEVICE_PLUGIN_PATH + KUBELET_SOCKET_NAME
CHECKPOINT_NAME = "kubelet_internal_checkpoint"
POD_RESOURCES_PATH = "/var/lib/kubelet/pod-resources/"

PRE_START_CONTAINER_TIMEOUT_S = 30
DIAL_TIMEOUT_S = 10                 # DM client.go: the kubelet's dial during Register
ENDPOINT_STOP_GRACE_PERIOD_S = 300  # DM types.go endpointStopGracePeriod
MAX_DEVICE_ID_LEN = 63              # api.proto comment on Device.ID
