"""The harness floor of make bench (scenarios/bench.py) and its no-op servers (scenarios/noop_plugin.py):
bin/dp-floor (Go, tools/dp-floor; `make bin/dp-floor`, built by make node and make bench) answers the
device-plugin API as the Python server does; the bench refuses without it; its floor check and README
table render from a report. Nothing here builds a binary or runs a load generator.
"""
from __future__ import annotations

import os

import grpc
import pytest

from dpconform.fixtures import readme
from dpconform.kubeletapi import dp, dp_grpc
from dpconform.scenarios import bench, noop_plugin


def allocate_two(sock: str):
    """GetDevicePluginOptions and an Allocate with 2 container requests on `sock`."""
    with grpc.insecure_channel(f"unix://{sock}") as ch:
        stub = dp_grpc.DevicePluginStub(ch)
        opts = stub.GetDevicePluginOptions(dp.Empty(), timeout=5)
        resp = stub.Allocate(dp.AllocateRequest(container_requests=[
            dp.ContainerAllocateRequest(devices_ids=["noop-0"]),
            dp.ContainerAllocateRequest(devices_ids=["noop-1", "noop-2"])]), timeout=5)
        with pytest.raises(grpc.RpcError) as e:     # what the floor does not serve
            stub.PreStartContainer(dp.PreStartContainerRequest(devices_ids=["noop-0"]), timeout=5)
    return opts, resp, e.value.code()


def check_answers(opts, resp, prestart_code) -> None:
    assert opts == dp.DevicePluginOptions(), opts
    assert len(resp.container_responses) == 2, resp
    assert all(c == dp.ContainerAllocateResponse() for c in resp.container_responses), resp
    # Go embeds UnimplementedDevicePluginServer; the Python servicer's base class answers UNIMPLEMENTED too
    assert prestart_code == grpc.StatusCode.UNIMPLEMENTED, prestart_code


@pytest.mark.node     # bin/dp-floor: built by make node (and make bench), like bin/ghz
@pytest.mark.timeout(60)
def test_dp_floor_answers_and_removes_its_socket(tmp_path):
    if not noop_plugin.native_binary():
        pytest.skip("bin/dp-floor is not built (make bin/dp-floor)")
    with noop_plugin.running(tmp_path, native=True) as (sock, server):
        assert os.path.basename(server.args[0]) == "dp-floor", server.args
        assert os.path.exists(sock)
        check_answers(*allocate_two(sock))
        server.terminate()                       # SIGTERM: it stops and removes its own socket
        assert server.wait(timeout=10) == 0
        assert not os.path.lexists(sock), "bin/dp-floor left its socket behind on SIGTERM"
    assert not os.path.lexists(sock)


@pytest.mark.timeout(60)
def test_python_noop_server_answers_the_same(tmp_path):
    """The fallback of running() without bin/dp-floor (make test): same answers; stopped, socket gone."""
    with noop_plugin.running(tmp_path, native=False) as (sock, server):
        assert "dpconform.scenarios.noop_plugin" in server.args
        check_answers(*allocate_two(sock))
    assert server.poll() is not None and not os.path.lexists(sock)


def test_native_floor_required_without_binary(tmp_path, monkeypatch):
    monkeypatch.setattr(noop_plugin, "FLOOR", tmp_path / "no-dp-floor")
    assert noop_plugin.kind() == "python" and noop_plugin.kind(False) == "python"
    with pytest.raises(noop_plugin.FloorUnavailable, match=r"make bin/dp-floor"):
        with noop_plugin.running(tmp_path, native=True):
            pass
    assert not list(tmp_path.iterdir()), "nothing should have started"


def test_bench_refuses_without_dp_floor(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(noop_plugin, "FLOOR", tmp_path / "no-dp-floor")
    assert bench.main(["--out", str(tmp_path / "out")]) == 2
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "make bin/dp-floor" in out[0] and out[0].startswith("bench: refusing"), out
    assert not (tmp_path / "out").exists()


def summary(p50: float, single: float) -> dict:
    return {"count": 1000, "failures": 0, "rps": 1e6 / p50, "p50_us": p50, "p99_us": p50 * 3,
            "single": {"count": 300, "failures": 0, "rps": 1e6 / single, "p50_us": single, "p99_us": single * 2}}


def report() -> dict:
    r = {"generator": "ghz", "users": 8, "duration_s": 3.0, "machine": "2 CPUs, x86_64, load average 0.10",
         "allocate": {"harness floor": summary(300, 120) | {"server": "go"},
                      "fake GPU": summary(1100, 470),
                      "sample device plugin (Go)": summary(600, 200),    # x2.00 at 8, x1.67 alone
                      "slow at 8 only": summary(290, 400),                # x0.97 at 8: the floor does not bound
                      "NVML plugin, fake NVML": {"skipped": "not here"}},
         "admission": {"emulator": {"count": 10, "p50_us": 2000, "p99_us": 4000},
                       "real kubelet": {"skipped": "needs root"}},
         "catalogue": []}
    r["versus_floor"] = bench.versus_floor(r)
    return r


def test_versus_floor_and_its_lines():
    r = report()
    vs = r["versus_floor"]
    assert set(vs) == {"fake GPU", "sample device plugin (Go)", "slow at 8 only"}
    assert vs["fake GPU"] == {"single": 3.92, "single_verdict": "resolved", "burst": 3.67, "burst_verdict": "resolved"}
    assert vs["sample device plugin (Go)"]["single_verdict"] == "harness-bound"
    assert vs["sample device plugin (Go)"]["burst_verdict"] == "resolved"           # x2.00: not within x2
    assert vs["slow at 8 only"]["burst_verdict"] == "does not bound" and vs["slow at 8 only"]["burst"] == 0.97
    lines = bench.floor_lines(r)
    bad = [ln for ln in lines if "DOES NOT BOUND" in ln]
    assert bad == ["bench: THE FLOOR DOES NOT BOUND slow at 8 only at 8 callers: p50 / floor x0.97 <= 1 "
                   "(the no-op server is not faster than the plugin: the ratio says nothing)"], lines
    assert not any("below every plugin" in ln for ln in lines)
    assert bench.floor_exit_status(r) == 1, "a floor that does not bound fails make bench"
    del r["allocate"]["slow at 8 only"]
    r["versus_floor"] = bench.versus_floor(r)
    assert bench.floor_lines(r)[-1] == "bench: the floor is below every plugin measured, at 1 and at 8 callers"
    assert bench.floor_exit_status(r) == 0


def test_table_renders_as_markdown(tmp_path):
    lines = bench.table(report())
    assert "against the Go no-op server (bin/dp-floor)" in lines[0]
    rows = [ln for ln in lines if ln.startswith("|")]
    allocate = rows[:rows.index("| admission per pod | p50 | p99 | pods |")]
    widths = {ln.count("|") for ln in allocate}
    assert widths == {9}, allocate                        # 8 columns on every row, header and separator
    by_label = {ln.split(" | ")[0][2:]: ln for ln in allocate[2:]}
    assert by_label["harness floor"].endswith("| x1.00 | x1.00 | the floor |")
    assert by_label["fake GPU"] == "| fake GPU | 470 µs | 1.10 ms | 3.30 ms | 909 | x3.92 | x3.67 | resolved |"
    assert by_label["sample device plugin (Go)"].endswith("| x1.67 | x2.00 | harness-bound, resolved |")
    assert by_label["slow at 8 only"].endswith("| x3.33 | x0.97 | resolved, does not bound |")
    assert by_label["NVML plugin, fake NVML"] == "| NVML plugin, fake NVML | not run: not here | | | | | | |"
    # and it goes into a README between the markers as the bench writes it
    md = tmp_path / "README.md"
    md.write_text(f"# x\n\n{bench.BEGIN}\n\nold\n\n{bench.END}\n\nafter\n")
    assert readme.replace_section(bench.BEGIN, bench.END, "\n".join(lines), path=md)
    text = md.read_text()
    assert text.startswith("# x\n\n" + bench.BEGIN + "\n\nAllocate burst, 8 callers") and text.endswith(
        bench.END + "\n\nafter\n") and "old" not in text
