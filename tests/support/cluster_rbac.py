"""A kubeconfig bound to exactly deploy/dpconform-rbac.yaml's ClusterRole, for testing --backend kubeconfig
with least privilege: the role is applied through an admin kubeconfig, a token is requested for its
ServiceAccount, and a kubeconfig with the admin's cluster entry and that token is written."""
from __future__ import annotations

import copy
from pathlib import Path

import yaml
from kubernetes import client, config, utils
from kubernetes.client.rest import ApiException

from tests.support.conformance_runner import ROOT

RBAC = ROOT / "deploy" / "dpconform-rbac.yaml"
SA_NAMESPACE, SA_NAME = "dpconform-system", "dpconform"


def rbac_documents(without: str | None = None) -> list[dict]:
    """The shipped RBAC objects; `without` drops that resource (e.g. "nodes/proxy") from the ClusterRole."""
    docs = [d for d in yaml.safe_load_all(RBAC.read_text()) if d]
    if without:
        role = next(d for d in docs if d["kind"] == "ClusterRole")
        rules = []
        for r in role["rules"]:
            r = copy.deepcopy(r)
            r["resources"] = [x for x in r["resources"] if x != without]
            if r["resources"]:
                rules.append(r)
        role["rules"] = rules
    return docs


def restricted_kubeconfig(admin_kubeconfig: str, out: Path, without: str | None = None) -> str:
    """Apply the role (replacing an earlier one), and write a kubeconfig for its ServiceAccount to `out`."""
    api = config.new_client_from_config(config_file=admin_kubeconfig)
    try:
        rbac = client.RbacAuthorizationV1Api(api)
        for doc in rbac_documents(without):
            if doc["kind"] == "ClusterRole":
                try:
                    rbac.delete_cluster_role(doc["metadata"]["name"], _request_timeout=10)
                except ApiException as e:
                    if e.status != 404:
                        raise
            try:
                utils.create_from_dict(api, doc)
            except utils.FailToCreateError as e:
                if not all(x.status == 409 for x in e.api_exceptions):   # already there
                    raise
        token = client.CoreV1Api(api).create_namespaced_service_account_token(
            SA_NAME, SA_NAMESPACE, {"spec": {"expirationSeconds": 3600}}, _request_timeout=10).status.token
    finally:
        api.close()
    admin = yaml.safe_load(Path(admin_kubeconfig).read_text())
    ctx = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])["context"]
    cluster = next(c for c in admin["clusters"] if c["name"] == ctx["cluster"])
    kc = {"apiVersion": "v1", "kind": "Config", "clusters": [cluster],
          "users": [{"name": SA_NAME, "user": {"token": token}}],
          "contexts": [{"name": SA_NAME, "context": {"cluster": cluster["name"], "user": SA_NAME}}],
          "current-context": SA_NAME}
    out.write_text(yaml.safe_dump(kc))
    return str(out)
