"""The soak's scheduler units: deploy/soak.sh, the cron line, the systemd service + timer pair and
the Kubernetes CronJob parse, and every command, file and option they reference exists in this
repository (installed as /opt/llmload, or as /app in the image) or in Locust's parser."""

from __future__ import annotations

import configparser
import getpass
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from fixtures.locust_options import APP_DIR, locust_options
from fixtures.paths import REPO

from llmload.core.config import load_config
from llmload.servers.process import free_port

pytestmark = pytest.mark.untimed  # asserts nothing about time: `make test` runs it beside other work

DEPLOY = REPO / "deploy"
INSTALL = "/opt/llmload"  # where the cron and systemd units expect the repository
CRON_FIELD = re.compile(r"^(\*|\d+(-\d+)?)(/\d+)?(,(\*|\d+(-\d+)?)(/\d+)?)*$")


def in_repo(path: str, root: str = INSTALL) -> Path:
    """An absolute path under the install root, as a path in this repository."""
    assert path.startswith(root + "/"), path
    return REPO / path.removeprefix(root + "/")


def unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # systemd keys are case-sensitive
    parser.read_string((DEPLOY / "systemd" / name).read_text())
    return parser


def test_soak_script_is_valid_sh_and_uses_real_files():
    script = DEPLOY / "soak.sh"
    assert os.access(script, os.X_OK)
    subprocess.run(["sh", "-n", str(script)], check=True, timeout=10)
    text = script.read_text()
    for path in ("locustfiles/completions.py", "config/soak.yaml"):
        assert path in text and (REPO / path).is_file()
    assert load_config(REPO / "config" / "soak.yaml").soak is not None


@pytest.mark.parametrize("host", ["", "closed-port"])
def test_soak_script_exits_2_when_it_cannot_run(tmp_path, host):
    env = {
        **os.environ,
        "LLMLOAD_REPORTS": str(tmp_path),
        "LLMLOAD_VENV": str(Path(sys.executable).parent.parent),
        "LLMLOAD_HOST": f"http://127.0.0.1:{free_port()}" if host else "",
    }
    run = subprocess.run([str(DEPLOY / "soak.sh")], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stdout + run.stderr
    assert ("LLMLOAD_HOST" in run.stderr) if not host else list(tmp_path.glob("soak-*"))


def test_systemd_service_runs_the_soak_script_once():
    service = unit("llmload-soak.service")
    assert {"Unit", "Service"} <= set(service.sections())
    s = service["Service"]
    assert s["Type"] == "oneshot" and s["WorkingDirectory"] == INSTALL
    exec_start = in_repo(shlex.split(s["ExecStart"])[0])
    assert exec_start == DEPLOY / "soak.sh" and os.access(exec_start, os.X_OK)
    assert "LLMLOAD_HOST=" in s["Environment"] and s["EnvironmentFile"].startswith("-/")
    assert s["KillSignal"] == "SIGTERM" and re.fullmatch(r"\d+h", s["TimeoutStartSec"])


def test_systemd_timer_starts_the_service():
    timer = unit("llmload-soak.timer")
    assert timer["Timer"]["Unit"] == "llmload-soak.service"
    assert (DEPLOY / "systemd" / timer["Timer"]["Unit"]).is_file()
    assert timer["Timer"]["OnCalendar"] and timer["Install"]["WantedBy"] == "timers.target"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_systemd_analyze_verifies_the_units(tmp_path):
    """systemd's own checker, on copies pointing at this checkout and the current user."""
    for name in ("llmload-soak.service", "llmload-soak.timer"):
        text = (DEPLOY / "systemd" / name).read_text().replace(INSTALL, str(REPO))
        (tmp_path / name).write_text(text.replace("User=llmload", f"User={getpass.getuser()}"))
    units = [str(tmp_path / "llmload-soak.service"), str(tmp_path / "llmload-soak.timer")]
    run = subprocess.run(["systemd-analyze", "verify", *units], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and "llmload-soak" not in run.stderr, run.stderr


def test_cron_line_runs_the_soak_script():
    lines = [
        line
        for line in (DEPLOY / "cron" / "llmload-soak").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    env = dict(line.split("=", 1) for line in lines if re.match(r"^[A-Z_]+=", line))
    assert env["LLMLOAD_HOST"].startswith("http") and env["SHELL"] == "/bin/sh"
    (job,) = [line for line in lines if not re.match(r"^[A-Z_]+=", line)]
    fields = job.split(None, 6)  # /etc/cron.d format: 5 time fields, user, command
    assert all(CRON_FIELD.match(f) for f in fields[:5]), fields[:5]
    assert fields[5] == "llmload"
    command = shlex.split(fields[6])
    assert in_repo(command[0]) == DEPLOY / "soak.sh"
    assert "%" not in fields[6]  # cron turns % into newlines


def cronjob_docs() -> dict[str, dict[str, Any]]:
    docs = yaml.safe_load_all((DEPLOY / "k8s" / "soak-cronjob.yaml").read_text())
    return {d["kind"]: d for d in docs if d}


def test_cronjob_manifest_runs_the_soak_config_once_per_schedule():
    docs = cronjob_docs()
    cron = docs["CronJob"]
    assert cron["apiVersion"] == "batch/v1" and cron["metadata"]["name"] == "llmload-soak"
    spec = cron["spec"]
    assert all(CRON_FIELD.match(f) for f in spec["schedule"].split()) and len(spec["schedule"].split()) == 5
    assert spec["concurrencyPolicy"] == "Forbid"
    job = spec["jobTemplate"]["spec"]
    assert job["backoffLimit"] == 0  # a breached soak is not retried
    soak = load_config(REPO / "config" / "soak.yaml")
    assert job["activeDeadlineSeconds"] > soak.duration
    pod = job["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    (c,) = pod["containers"]
    assert c["command"] == ["sh", "-c"] and c["workingDir"] == APP_DIR
    args = shlex.split(c["args"][0].replace("$(date +%Y%m%d-%H%M%S)", "DATE"))
    assert args[:2] == ["exec", "locust"]
    assert (REPO / args[args.index("-f") + 1]).is_file()
    assert (REPO / args[args.index("--ladder") + 1]) == REPO / "config" / "soak.yaml"
    unknown = [a for a in args if a.startswith("--") and a not in locust_options()]
    assert unknown == []
    assert [e["name"] for e in c["env"]] == ["LOCUST_HOST"] and "--host" in locust_options()
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert str(Path(args[args.index("--csv") + 1]).parent) == mounts["reports"]
    (volume,) = pod["volumes"]
    assert volume["persistentVolumeClaim"]["claimName"] == docs["PersistentVolumeClaim"]["metadata"]["name"]


def test_image_holds_what_the_cronjob_runs():
    dockerfile = (DEPLOY / "k8s" / "Dockerfile").read_text()
    copied = re.findall(r"^COPY (\S+)", dockerfile, flags=re.M)
    assert copied == ["."]  # the whole checkout (.dockerignore leaves out the venv, reports, .git)
    ignored = (REPO / ".dockerignore").read_text().split()
    assert not {"locustfiles", "config", "llmload"} & set(ignored)


def test_cronjob_soak_serves_its_live_metrics_on_a_port_it_exposes():
    template = cronjob_docs()["CronJob"]["spec"]["jobTemplate"]["spec"]["template"]
    (c,) = template["spec"]["containers"]
    args = shlex.split(c["args"][0].replace("$(date +%Y%m%d-%H%M%S)", "DATE"))
    port = int(args[args.index("--metrics-port") + 1])
    assert {p["name"]: p["containerPort"] for p in c["ports"]}["metrics"] == port
    annotations = template["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(port) and annotations["prometheus.io/scrape"] == "true"
