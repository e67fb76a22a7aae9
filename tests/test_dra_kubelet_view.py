"""fixtures/dra/kubelet_view.py: the real kubelet's word on a DRA driver's registration, read from its
plugin manager's log lines and metric (texts of the kubelet: reconciler.go, exponential_backoff.go,
pluginmanager/metrics)."""
from dpconform.fixtures.dra.kubelet_view import in_actual_state, registration

SOCK = "/tmp/dpc-cl-x/kubelet/plugins_registry/gpu.dpconform.io-reg.sock"
STARTED = (f'I1204 03:40:00.100  123 reconciler.go:161] "OperationExecutor.RegisterPlugin started" '
           f'plugin={{"SocketPath":"{SOCK}","UUID":"u1","Handler":null,"Name":"","Endpoint":""}}')
FAILED = (f'E1204 03:40:00.200  123 goroutinemap.go:150] Operation for "{SOCK}" failed. No retries permitted until '
          '2026-12-04 03:40:00.7 +0000 UTC m=+3.1 (durationBeforeRetry 500ms). Error: RegisterPlugin error -- '
          'pluginHandler.ValidatePluginFunc failed')
IN_STATE = (f'# TYPE plugin_manager_total_plugins gauge\nplugin_manager_total_plugins{{socket_path="{SOCK}",'
            f'state="actual_state_of_world"}} 1\nplugin_manager_total_plugins{{socket_path="{SOCK}",'
            'state="desired_state_of_world"} 1\n')
DESIRED_ONLY = (f'plugin_manager_total_plugins{{socket_path="{SOCK}",state="desired_state_of_world"}} 1\n')


def test_registered_needs_a_start_since_the_mark_and_the_actual_state():
    assert registration(STARTED, IN_STATE, SOCK).registered
    # the socket survived a restart: the old kubelet's registration, nothing logged since the mark
    assert not registration("", IN_STATE, SOCK).registered
    assert not registration(STARTED, DESIRED_ONLY, SOCK).registered
    assert not registration(STARTED.replace(SOCK, SOCK + ".other"), IN_STATE, SOCK).registered


def test_a_failed_attempt_carries_the_kubelets_text():
    said = registration(STARTED + "\n" + FAILED, DESIRED_ONLY, SOCK)
    assert not said.registered and said.started
    assert said.error == "RegisterPlugin error -- pluginHandler.ValidatePluginFunc failed"
    # a later attempt that starts again clears the earlier failure
    assert registration("\n".join([STARTED, FAILED, STARTED]), IN_STATE, SOCK).registered


def test_actual_state_reads_the_labels_in_any_order():
    text = f'plugin_manager_total_plugins{{state="actual_state_of_world",socket_path="{SOCK}"}} 1'
    assert in_actual_state(text, SOCK) and not in_actual_state(text.replace("} 1", "} 0"), SOCK)


def test_a_failed_metrics_read_is_said_not_taken_for_not_registered():
    said = registration(STARTED, None, SOCK, "reading the kubelet's /metrics failed: ConnectionRefusedError: refused")
    assert not said.registered
    assert said.not_registered() == ("whether the kubelet registered this socket is unknown: reading the kubelet's "
                                     "/metrics failed: ConnectionRefusedError: refused (its registration started)")
    assert registration(STARTED, DESIRED_ONLY, SOCK).not_registered() == (
        "the kubelet has not registered this socket (its registration started)")
