"""The Kubernetes manifests in deploy/k8s: they parse, hold the expected objects, agree with each
other (service name and port, worker count, mounts), and every command, file and option they
use exists in this repository or in `locust --help`."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from fixtures.locust_options import APP_DIR, locust_options
from fixtures.paths import REPO

from llmload.core.config import load_config, parse_config

K8S = REPO / "deploy" / "k8s"
SOAK = "soak-cronjob.yaml"  # applied on its own, not by the kustomization; tests/e2e/test_deploy_units.py


def sweep_manifests() -> list[Path]:
    return sorted(p for p in K8S.glob("*.yaml") if p.name != SOAK)


def documents() -> list[dict[str, Any]]:
    docs = []
    for path in sweep_manifests():
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    return docs


def find(kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d for d in documents() if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (c,) = deployment["spec"]["template"]["spec"]["containers"]
    return c


def arg_value(args: list[str], option: str) -> str:
    return args[args.index(option) + 1]


def test_objects_and_kinds():
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in documents() if "metadata" in d)
    assert kinds == [
        ("ConfigMap", "llmload-ladder"),
        ("Deployment", "llmload-master"),
        ("Deployment", "llmload-worker"),
        ("Service", "llmload-master"),
    ]
    assert all(d["apiVersion"] for d in documents())


def test_kustomization_lists_every_manifest():
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    manifests = {p.name for p in sweep_manifests()} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == manifests


def test_deployment_selectors_match_their_pods():
    for name in ("llmload-master", "llmload-worker"):
        spec = find("Deployment", name)["spec"]
        assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    service = find("Service", "llmload-master")["spec"]
    master_labels = find("Deployment", "llmload-master")["spec"]["template"]["metadata"]["labels"]
    assert service["selector"].items() <= master_labels.items()


@pytest.mark.parametrize("name", ["llmload-master", "llmload-worker"])
def test_commands_use_real_files_and_options(name):
    c = container(find("Deployment", name))
    assert c["command"] == ["locust"] and c["workingDir"] == APP_DIR
    args = c["args"]
    assert (REPO / arg_value(args, "-f")).is_file()
    unknown = [a for a in args if a.startswith("--") and a not in locust_options()]
    assert unknown == []
    for env in c.get("env", []):  # Locust reads LOCUST_<OPTION> for its options
        option = "--" + env["name"].removeprefix("LOCUST_").lower().replace("_", "-")
        assert env["name"].startswith("LOCUST_") and option in locust_options()


def test_workers_reach_the_master_service():
    master = container(find("Deployment", "llmload-master"))
    worker_deployment = find("Deployment", "llmload-worker")
    worker = container(worker_deployment)
    service = find("Service", "llmload-master")
    ports = {p["name"]: p for p in service["spec"]["ports"]}
    assert arg_value(worker["args"], "--master-host") == service["metadata"]["name"]
    assert arg_value(worker["args"], "--master-port") == str(ports["messages"]["port"])
    assert arg_value(master["args"], "--master-bind-port") == str(ports["messages"]["port"])
    container_ports = {p["name"]: p["containerPort"] for p in master["ports"]}
    assert container_ports["web"] == ports["web"]["port"] == 8089  # Locust's default web port
    assert int(arg_value(master["args"], "--expect-workers")) == worker_deployment["spec"]["replicas"]


def test_master_mounts_the_ladder_and_writes_reports_to_a_volume():
    deployment = find("Deployment", "llmload-master")
    c = container(deployment)
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    configmap = find("ConfigMap", "llmload-ladder")
    assert volumes["ladder"]["configMap"]["name"] == configmap["metadata"]["name"]
    ladder = Path(arg_value(c["args"], "--ladder"))
    assert str(ladder.parent) == mounts["ladder"] and ladder.name in configmap["data"]
    assert str(Path(arg_value(c["args"], "--csv")).parent) == mounts["reports"]
    assert "reports" in volumes


def test_configmap_ladder_is_valid_and_equals_the_repository_ladder():
    text = find("ConfigMap", "llmload-ladder")["data"]["sweep.yaml"]
    config = parse_config(yaml.safe_load(text), source="configmap")
    assert config == dataclasses.replace(load_config(REPO / "config" / "sweep.yaml"), source="configmap")


def test_image_and_collect_recipe_reference_real_paths():
    dockerfile = (K8S / "Dockerfile").read_text()
    for src in re.findall(r"^COPY (\S+)", dockerfile, flags=re.M):
        assert (REPO / src).exists(), src
    assert "pip install" in dockerfile and f"WORKDIR {APP_DIR}" in dockerfile
    collect = (K8S / "collect.sh").read_text()
    reports = str(Path(arg_value(container(find("Deployment", "llmload-master"))["args"], "--csv")).parent)
    assert f":{reports}" in collect and f"{reports}/run_run.json" in collect
    assert "llmload table" in collect


def test_the_master_serves_its_live_metrics_on_a_port_it_exposes():
    deployment = find("Deployment", "llmload-master")
    c = container(deployment)
    port = int(arg_value(c["args"], "--metrics-port"))
    assert {p["name"]: p["containerPort"] for p in c["ports"]}["metrics"] == port
    service_ports = {p["name"]: p for p in find("Service", "llmload-master")["spec"]["ports"]}
    assert service_ports["metrics"]["port"] == port and service_ports["metrics"]["targetPort"] == "metrics"
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(port) and annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/path"] == "/metrics"
