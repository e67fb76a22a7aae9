"""The kubelet's plugin-registration handshake with its DRA handler (fixtures/kubelet/pluginwatcher.py),
against small registration servers that answer as a DRA driver would, or break one step each."""
from __future__ import annotations

import os
import tempfile
from concurrent import futures

import grpc
import pytest

from dpconform.fixtures.kubelet.pluginwatcher import DraHandler, register_plugin
from dpconform.kubeletapi import reg, reg_grpc


class Registrar(reg_grpc.RegistrationServicer):
    def __init__(self, info: dict | None, notify: bool = True):
        self.info, self.notify, self.statuses = info, notify, []

    def GetInfo(self, request, context):
        if self.info is None:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "no GetInfo here")
        return reg.PluginInfo(**self.info)

    def NotifyRegistrationStatus(self, request, context):
        self.statuses.append((request.plugin_registered, request.error))
        if not self.notify:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "no NotifyRegistrationStatus here")
        return reg.RegistrationStatusResponse()


@pytest.fixture
def serve():
    servers, tmp = [], tempfile.mkdtemp(prefix="dpc-pw-", dir="/tmp")

    def start(info: dict | None, notify: bool = True, name: str = "driver.sock") -> tuple[str, Registrar]:
        path = os.path.join(tmp, name)
        r = Registrar(info, notify)
        s = grpc.server(futures.ThreadPoolExecutor(2))
        reg_grpc.add_RegistrationServicer_to_server(r, s)
        s.add_insecure_port("unix:" + path)
        s.start()
        servers.append(s)
        return path, r
    yield start
    for s in servers:
        s.stop(0).wait(5)
    for n in os.listdir(tmp):
        os.unlink(os.path.join(tmp, n))
    os.rmdir(tmp)


def dra_info(**kw) -> dict:
    return {"type": "DRAPlugin", "name": "gpu.dpconform.io", "endpoint": "", "supported_versions": ["v1.DRAPlugin"]} | kw


def test_a_dra_driver_registers(serve):
    path, r = serve(dra_info(supported_versions=["v1beta1.DRAPlugin", "v1.DRAPlugin"]))
    h = DraHandler()
    out = register_plugin(path, h)
    assert out.registered and out.error is None and out.notified == "", out
    assert out.endpoint == path and out.chosen_service == "v1beta1.DRAPlugin"   # the plugin's order decides
    assert r.statuses == [(True, "")]
    assert h.plugins == {"gpu.dpconform.io": [(path, "v1beta1.DRAPlugin")]}


@pytest.mark.parametrize("info, notified", [
    (dra_info(type="CSIPlugin"), "RegisterPlugin error -- no handler registered for plugin type: CSIPlugin at socket "),
    (dra_info(supported_versions=[]), "RegisterPlugin error -- plugin validation failed with err: invalid supported gRPC "
     "versions of DRA driver plugin gpu.dpconform.io at endpoint {path}: empty list of supported gRPC services "
     "(aka supported versions)"),
    (dra_info(supported_versions=["v1alpha4"]), "RegisterPlugin error -- plugin validation failed with err: invalid "
     "supported gRPC versions of DRA driver plugin gpu.dpconform.io at endpoint {path}: none of services supported by "
     'the plugin (["v1alpha4"]) are supported by the kubelet (["v1.DRAPlugin" "v1beta1.DRAPlugin"])'),
])
def test_refusals_are_notified_with_the_kubelets_text(serve, info, notified):
    path, r = serve(info)
    out = register_plugin(path, DraHandler())
    assert not out.registered and out.error
    assert r.statuses == [(False, notified.format(path=path) + (path if notified.endswith("socket ") else ""))]


def test_the_same_endpoint_twice_is_refused(serve):
    path, r = serve(dra_info())
    h = DraHandler()
    assert register_plugin(path, h).registered
    again = register_plugin(path, h)
    assert not again.registered
    assert again.error == (f"RegisterPlugin error -- plugin registration failed with err: endpoint {path} already "
                           "registered for DRA driver plugin gpu.dpconform.io")
    assert r.statuses[-1] == (False, again.error)


def test_getinfo_and_notify_failures(serve):
    path, _ = serve(None)
    out = register_plugin(path, DraHandler())
    assert out.error == (f"RegisterPlugin error -- failed to get plugin info using RPC GetInfo at socket {path}, "
                         "err: rpc error: code = Unimplemented desc = no GetInfo here")
    path2, _ = serve(dra_info(), notify=False, name="quiet.sock")
    out = register_plugin(path2, DraHandler())
    assert out.registered, "the handler has it before the status is sent"
    assert out.error == (f"RegisterPlugin error -- failed to send registration status at socket {path2}, err: : "
                         "rpc error: code = Unimplemented desc = no NotifyRegistrationStatus here")


def test_no_listener_fails_the_dial(tmp_path):
    path = str(tmp_path / "nobody.sock")
    out = register_plugin(path, DraHandler(), dial_timeout_s=0.2)
    assert not out.registered and out.error.startswith(f"RegisterPlugin error -- dial failed at socket {path}")
