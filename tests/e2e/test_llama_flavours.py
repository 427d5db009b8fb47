"""The real server's build is trusted only once it has generated tokens here.

A native llama.cpp build can answer `--version` and `/health`, then die with SIGILL on its first
prompt (the AMX matmul of repacked weights on some Intel Xeon VMs). These tests put fake builds
that fault in exactly that way where the builder would put real ones (`fake_llama_server.py`),
run the real probe against them (real processes, real HTTP on loopback) and check which flavour
`ensure_llama_server` chooses, what it says, what it rebuilds and that the server it hands out
answers a completion.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from fixtures.fake_llama_server import install_fake_build

from llmload.servers import llama_cpp
from llmload.servers.build_guard import Progress
from llmload.servers.llama_build import Build, binary_path
from llmload.servers.llama_cpp import BuildError, LlamaServer, chosen_flavour, ensure_llama_server
from llmload.servers.llama_probe import ProbeResult, probe

pytestmark = pytest.mark.untimed  # asserts nothing about time: `make test` runs it beside other work


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh llmload cache, and no flavour verified yet in this process."""
    monkeypatch.setenv("LLMLOAD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(llama_cpp, "_verified", {})
    return tmp_path / "cache"


@pytest.fixture
def gguf(tmp_path: Path) -> Path:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF fake")
    return model


def fake_builder(modes: dict[str, str], built: list[str]) -> Callable[[Build, Progress], Path]:
    """A builder that installs a fake llama-server of the given mode per build name."""

    def build(which: Build, progress: Progress) -> Path:
        built.append(which.name)
        return install_fake_build(binary_path(which), modes[which.name])

    return build


def counting_probe(calls: list[str]) -> Callable[[Path, Path, Sequence[str], Path], ProbeResult]:
    def check(binary: Path, gguf: Path, run_args: Sequence[str], log_path: Path) -> ProbeResult:
        calls.append(" ".join(run_args))
        return probe(binary, gguf, run_args, log_path)

    return check


def completion_tokens(url: str) -> int:
    body = json.dumps({"prompt": "hi", "max_tokens": 3, "temperature": 0}).encode()
    request = urllib.request.Request(f"{url}/v1/completions", data=body)
    with urllib.request.urlopen(request, timeout=30) as resp:
        return int(json.loads(resp.read())["usage"]["completion_tokens"])


def test_a_build_that_dies_on_its_first_completion_runs_with_no_repack(cache: Path, gguf: Path) -> None:
    built: list[str] = []
    lines: list[str] = []
    build = ensure_llama_server(lines.append, gguf=gguf, builder=fake_builder({"native": "repack"}, built))
    # a `--version` check (what trusted the binary before) would have passed it
    assert subprocess.run([str(build.binary), "--version"], capture_output=True, timeout=30).returncode == 0

    assert build.flavour.name == "native-no-repack"
    assert build.run_args == ("--no-repack",)
    assert built == ["native"], "the same binary, run without repacking: no rebuild"
    assert "native: killed by SIGILL on its first completion" in build.reason
    assert "native-no-repack: generated 4 tokens" in build.reason
    assert any("native: killed by SIGILL" in line and "trying the next flavour" in line for line in lines)
    choice = chosen_flavour()
    assert choice is not None and choice.flavour == "native-no-repack"

    with LlamaServer(build=build, gguf=gguf, parallel=1) as server:
        assert "--no-repack" in server.command()
        assert completion_tokens(server.url) == 3


def test_a_later_process_probes_the_kept_choice_again_without_rebuilding(
    cache: Path, gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    modes = {"native": "repack"}
    ensure_llama_server(gguf=gguf, builder=fake_builder(modes, []))
    monkeypatch.setattr(llama_cpp, "_verified", {})  # as a new process
    built: list[str] = []
    probes: list[str] = []
    again = ensure_llama_server(gguf=gguf, builder=fake_builder(modes, built), check=counting_probe(probes))
    assert again.flavour.name == "native-no-repack"
    assert built == [] and probes == ["--no-repack"], "the kept choice is probed first, and only it"
    assert "native: killed by SIGILL" in again.reason, "why it was chosen is still said"

    # the same process asks again: no second probe
    ensure_llama_server(gguf=gguf, builder=fake_builder(modes, built), check=counting_probe(probes))
    assert probes == ["--no-repack"]


def test_a_native_build_that_always_faults_is_rebuilt_portable(cache: Path, gguf: Path) -> None:
    built: list[str] = []
    build = ensure_llama_server(
        gguf=gguf, builder=fake_builder({"native": "always", "portable": "ok"}, built)
    )
    assert build.flavour.name == "portable"
    assert build.run_args == ()
    assert built == ["native", "portable"]
    assert "native: killed by SIGILL" in build.reason
    assert "native-no-repack: killed by SIGILL" in build.reason
    assert build.binary == binary_path(build.flavour.build) and "portable" in str(build.binary.parent)


def test_no_flavour_that_works_is_one_error_naming_each(cache: Path, gguf: Path) -> None:
    modes = {"native": "always", "portable": "always"}
    with pytest.raises(BuildError) as failed:
        ensure_llama_server(gguf=gguf, builder=fake_builder(modes, []))
    message = str(failed.value)
    for name in ("native", "native-no-repack", "portable", "portable-no-repack"):
        assert f"{name}: killed by SIGILL" in message
    assert chosen_flavour() is None


def test_a_binary_that_cannot_start_is_a_probe_failure_not_a_traceback(cache: Path, gguf: Path) -> None:
    def broken(which: Build, progress: Progress) -> Path:
        path = binary_path(which)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\nexit 3\n")
        path.chmod(0o755)
        return path

    with pytest.raises(BuildError, match="native: exited with code 3 before it was healthy"):
        ensure_llama_server(gguf=gguf, builder=broken)


def test_the_command_says_which_flavour_runs_and_why(
    cache: Path, gguf: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from llmload.cli import llama_server as command

    def ensure(progress: Progress, *, gguf: Path) -> llama_cpp.LlamaBuild:
        return ensure_llama_server(progress, gguf=gguf, builder=fake_builder({"native": "repack"}, []))

    monkeypatch.setattr(llama_cpp, "ensure_model", lambda: gguf)
    monkeypatch.setattr(llama_cpp, "ensure_llama_server", ensure)
    assert command.main(["build"]) == 0
    out = capsys.readouterr().out
    assert "flavour:      native-no-repack --no-repack" in out
    assert "native: killed by SIGILL on its first completion" in out
    assert command.main(["paths"]) == 0
    out = capsys.readouterr().out
    assert "flavour:      native-no-repack (chosen " in out and "native build:" in out


def test_a_server_that_cannot_be_had_is_an_error_line_not_a_traceback(
    cache: Path, gguf: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from llmload.cli import llama_server as command
    from llmload.core.exit_codes import SERVER_UNUSABLE

    def ensure(progress: Progress, *, gguf: Path) -> llama_cpp.LlamaBuild:
        return ensure_llama_server(
            progress, gguf=gguf, builder=fake_builder({"native": "always", "portable": "always"}, [])
        )

    monkeypatch.setattr(llama_cpp, "ensure_model", lambda: gguf)
    monkeypatch.setattr(llama_cpp, "ensure_llama_server", ensure)
    assert command.main(["build"]) == SERVER_UNUSABLE
    err = capsys.readouterr().err.strip().splitlines()
    assert "Traceback" not in "\n".join(err)
    assert err[-1].startswith("llmload llama-server: error: no flavour of llama-server generates tokens")
    assert all(line.startswith("llmload: llama-server ") for line in err[:-1]), "the rest: progress lines"


@pytest.mark.parametrize(
    "text", ["{not json", '{"flavour": "turbo", "chosen_at": "x", "tried": []}', '["native"]', ""]
)
def test_a_garbled_or_foreign_choice_file_is_chosen_again(cache: Path, gguf: Path, text: str) -> None:
    from llmload.servers.llama_build import machine_dir

    machine_dir().mkdir(parents=True, exist_ok=True)
    (machine_dir() / llama_cpp.CHOICE_FILE).write_text(text)
    probes: list[str] = []
    build = ensure_llama_server(
        gguf=gguf, builder=fake_builder({"native": "repack"}, []), check=counting_probe(probes)
    )
    assert probes == ["", "--no-repack"], "from the first flavour, as if no choice were kept"
    assert build.flavour.name == "native-no-repack"
    choice = chosen_flavour()
    assert choice is not None and choice.flavour == "native-no-repack", "the file is written anew"
