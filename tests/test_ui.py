"""`resomap ui`: its error paths (fast), and a headless-Chromium walk through a real sweep in the MLflow UI
(marker `browser`, run by .ci/browser): a fresh browser opens the experiment on its runs table (model training,
not GenAI); the first link `resomap ui` prints opens the runs grouped by model and sorted by resolution, score and
latency as metric columns and the parent's one "best" = the report's answer across models; the sweep view's charts
against resolution, one line per model in its own hue, the score with its interval, every chart's highest point
clear of plotly's toolbar, and its parallel-coordinates view; a child's map whole in its image card; the
children's image grid, whose step slider shows the children trained at each resolution; a child's metric, parent
and confusion matrix; a closed-form child (lite0_linear) showing the fit chosen on validation; the parent's
accuracy against resolution (step = resolution), its image grid whose step moves one model's probe map across
resolutions, and the HTML report in its artifacts with a working slider. Screenshots go to $RESOMAP_SCREENSHOTS
or .ci/screenshots/."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import free_port
from resomap.cli import build_parser, main
from resomap.errors import ResoMapError
from resomap.summary.answer_text import answer_line, own_words
from resomap.summary.sweep_summary import SweepSummary
from resomap.tracking.views import group_id, model_colors, view_charts

REPO = Path(__file__).resolve().parents[1]
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
MODELS, RESOLUTIONS = ("tiny_cnn", "lite0_linear"), (32, 48)  # a gradient fit, a closed-form one
CHILDREN = [f"{m}@{r}" for m in MODELS for r in RESOLUTIONS]
EXPERIMENT, PARENT = "resomap-smoke", "sweep resomap-smoke"


# ---------------------------------------------------------------- fast: error paths


def _ui(args: list[str], capsys) -> tuple[int, str, str]:
    code = main(["ui", "--preset", "smoke", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_ui_binds_localhost_by_default():
    args = build_parser().parse_args(["ui"])
    assert args.host == "127.0.0.1"
    assert args.port == 5000


def test_ui_without_a_store_is_a_one_line_error(project: Path, capsys):
    code, out, err = _ui(["--port", str(free_port())], capsys)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("resomap: error: no MLflow store at ")
    assert "resomap sweep" in err
    assert not (project / "mlflow.db").exists()


def test_server_starts_on_a_new_store_and_takes_in_artifacts(project: Path):
    from resomap.config import load
    from resomap.tracking.ui import ui_command

    cfg = load("configs", "smoke", [])
    cmd = ui_command(cfg, "127.0.0.1", free_port(), serve=True)  # no mlflow.db yet: `resomap ui` refuses, this not
    assert cmd[cmd.index("--backend-store-uri") + 1] == f"sqlite:///{project / 'mlflow.db'}"
    assert "--serve-artifacts" in cmd and cmd[cmd.index("--artifacts-destination") + 1] == str(project / "mlartifacts")
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1" and build_parser().parse_args(["server"]).host == "127.0.0.1"
    with pytest.raises(ResoMapError, match=r"mlflow\.tracking_uri is the server http://10\.0\.0\.5:5000"):
        ui_command(
            load("configs", "smoke", ["mlflow.tracking_uri=http://10.0.0.5:5000"]), "127.0.0.1", 5000, serve=True
        )


def test_ui_on_a_taken_port_is_a_one_line_error(project: Path, capsys):
    (project / "mlflow.db").touch()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        code, out, err = _ui(["--port", str(port)], capsys)
    assert {sig: signal.getsignal(sig) for sig in before} == before  # the command leaves the process's handlers
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith(f"resomap: error: port {port} on 127.0.0.1 is taken")


def test_ui_starts_only_what_browsing_needs(project: Path, monkeypatch: pytest.MonkeyPatch):
    from resomap.config import load
    from resomap.tracking.ui import server_env, ui_command

    (project / "mlflow.db").touch()
    monkeypatch.delenv("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", raising=False)
    assert server_env()["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "false"  # no job runner, no task consumers
    monkeypatch.setenv("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "true")
    assert server_env()["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "true"  # the user's choice wins
    cfg = load("configs", None, [])
    cmd = ui_command(cfg, "127.0.0.1", free_port())
    assert cmd[1:3] == ["-m", "mlflow"] and cmd[cmd.index("--app-name") + 1] == "resomap"  # only its job runner
    monkeypatch.delenv("MLFLOW_SERVER_ENABLE_JOB_EXECUTION")
    cmd = ui_command(cfg, "127.0.0.1", free_port())
    assert cmd[1:3] == ["-m", "resomap.tracking.ui_server"]  # MLflow's app as resomap.tracking.ui_app serves it
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1"


def test_the_server_process_gives_mlflows_app_the_settings_mlflow_server_gives_it():
    """resomap.tracking.ui_server sets, before MLflow's server module is imported, the variables `mlflow server`
    sets for its uvicorn process; their names are written out there and must be MLflow's."""
    import mlflow.environment_variables as variables
    import mlflow.server.constants as constants

    from resomap.tracking import ui_server

    names = ("BACKEND_STORE_URI", "REGISTRY_STORE_URI", "ARTIFACT_ROOT", "SERVE_ARTIFACTS", "ARTIFACTS_DESTINATION")
    for name in names:
        assert getattr(ui_server, f"{name}_ENV_VAR") == getattr(constants, f"{name}_ENV_VAR")
    pairs = {"ALLOWED_HOSTS": "MLFLOW_SERVER_ALLOWED_HOSTS", "SGI_NAME": "_MLFLOW_SGI_NAME",
             "BOOT_ID": "_MLFLOW_SERVER_BOOT_ID", "IN_JOB_EXECUTOR": "_MLFLOW_IN_JOB_EXECUTOR",
             "WORKSPACES": "MLFLOW_ENABLE_WORKSPACES"}  # fmt: skip
    for ours, theirs in pairs.items():
        assert getattr(ui_server, f"{ours}_ENV_VAR") == getattr(variables, theirs).name
    store = "sqlite:////srv/mlflow.db"
    env = ui_server.server_settings(store, "mlflow-artifacts:/", True, "/srv/mlartifacts", ["a.example", "b:8443"])
    assert env[constants.BACKEND_STORE_URI_ENV_VAR] == env[constants.REGISTRY_STORE_URI_ENV_VAR] == store
    assert env[constants.SERVE_ARTIFACTS_ENV_VAR] == "true"
    assert env[constants.ARTIFACTS_DESTINATION_ENV_VAR] == "/srv/mlartifacts"
    assert env["MLFLOW_SERVER_ALLOWED_HOSTS"] == "a.example,b:8443"
    plain = ui_server.server_settings(store, "./mlruns")
    assert constants.SERVE_ARTIFACTS_ENV_VAR not in plain and "MLFLOW_SERVER_ALLOWED_HOSTS" not in plain


def _as_from_a_terminal(ignored: tuple[signal.Signals, ...] = ()):
    """A child's signal dispositions as a terminal gives them (or as `nohup` does, for `ignored`): whatever this
    test process inherited (a CI job started in the background has SIGINT ignored, and the child would keep that)."""

    def reset() -> None:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN if sig in ignored else signal.SIG_DFL)

    return reset


@contextlib.contextmanager
def _running_ui(project: Path, port: int, ignored: tuple[signal.Signals, ...] = (), args: tuple[str, ...] = ("ui",)):
    """`resomap ui` (or `args`) on `port` started as from a terminal (see `_as_from_a_terminal`): yields (the
    process, the processes of its server, the lines it printed before its address, its address line) once it
    printed its address. Whatever a check does, nothing is left behind."""
    import psutil

    cmd = [sys.executable, "-m", "resomap.cli", *args, "--preset", "smoke", "--port", str(port), "--workers", "1"]
    proc = subprocess.Popen(
        cmd,
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=_as_from_a_terminal(ignored),
    )
    server: list = []
    try:
        before = []
        line = proc.stdout.readline()
        while line and not line.startswith("MLflow UI: "):
            before.append(line)
            line = proc.stdout.readline()
        assert line.startswith("MLflow UI: "), "".join(before) + line + proc.stdout.read()
        server = list(psutil.Process(proc.pid).children(recursive=True))
        assert server, "no server process under resomap ui"
        yield proc, server, before, line
    finally:
        if proc.poll() is None:
            proc.kill()
        for child in server:
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()
        proc.wait(timeout=30)


def test_ui_on_every_interface_warns_once_and_prints_an_address_other_machines_can_use(project: Path):
    """`resomap ui --host 0.0.0.0` opens the store, which has no authentication, to the network: one warning line
    (the address, no authentication, how to restrict it) and the UI's address as another machine reaches it (this
    machine's address, not 0.0.0.0, which nobody can connect to); no server process is left behind."""
    import psutil

    (project / "mlflow.db").touch()
    port = free_port()
    with _running_ui(project, port, args=("ui", "--host", "0.0.0.0")) as (_, server, before, line):
        warned = [x for x in before if "WARNING" in x]
        assert len(warned) == 1 and len(before) == 2, before  # one warning, its second line the allowed hosts
        assert f"0.0.0.0:{port}" in warned[0] and "no authentication" in warned[0], warned
        assert "bind 127.0.0.1 or put it behind an authenticating proxy" in warned[0]
        address = line.split()[2]
        parts = urllib.parse.urlsplit(address)
        assert parts.scheme == "http" and parts.hostname not in ("0.0.0.0", None) and parts.port == port, line
        assert before[1].startswith(f"  it answers requests addressed to {parts.hostname}, "), before
        assert "any other host name is refused" in before[1]
        with urllib.request.urlopen(address + "/health", timeout=10) as resp:  # the printed address answers
            assert resp.status == 200
        # the MLflow UI's API answers a request addressed to the printed address (sent over loopback) and refuses
        # one addressed to another name
        assert _api_status(port, parts.netloc) == 200
        assert _api_status(port, f"evil.example:{port}") == 403
        # the page at / is refused to a foreign Host as the API is (it is served after MLflow's Host check)
        assert _api_status(port, parts.netloc, "/") == 200
        assert _api_status(port, f"127.0.0.1:{port}", "/") == 200
        for foreign in ("evil.example.com", f"evil.example.com:{port}"):
            assert _api_status(port, foreign, "/") == 403, foreign
    _, alive = psutil.wait_procs(server, timeout=30)  # killed on leaving (a clean stop: the slow tests below)
    assert not alive, [p.cmdline() for p in alive]


def _api_status(port: int, host_header: str, path: str = "/api/2.0/mlflow/experiments/search?max_results=1") -> int:
    """The status of an MLflow REST call (or a GET of another `path`) sent to 127.0.0.1:`port` with `host_header` as
    its Host header (as a client that was given that address would send it), whatever its answer."""
    query = f"http://127.0.0.1:{port}{path}"
    request = urllib.request.Request(query, headers={"Host": host_header})
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_allowed_hosts_name_this_machine_beyond_loopback_only(project: Path, monkeypatch: pytest.MonkeyPatch):
    """On 127.0.0.1 MLflow's default Host check is left as it is; beyond loopback (`resomap server` and `resomap
    ui` alike) the address `resomap server` prints is allowed with and without the port, with the names of
    --allowed-hosts, MLflow's own default (loopback, private addresses) and MLFLOW_SERVER_ALLOWED_HOSTS as written;
    never "*"."""
    from resomap.config import load
    from resomap.tracking.ui import reachable_host, ui_command

    monkeypatch.delenv("MLFLOW_SERVER_ALLOWED_HOSTS", raising=False)
    cfg, port = load("configs", "smoke", []), free_port()
    assert "--allowed-hosts" not in ui_command(cfg, "127.0.0.1", port, serve=True)
    printed = reachable_host("0.0.0.0")
    for serve in (True, False):
        (project / "mlflow.db").touch()  # `resomap ui` needs a store
        cmd = ui_command(cfg, "0.0.0.0", port, serve=serve, allowed=["mlflow.lab.example", "proxy.example:8443"])
        hosts = cmd[cmd.index("--allowed-hosts") + 1].split(",")
        for name in (printed, "mlflow.lab.example"):
            assert name in hosts and f"{name}:{port}" in hosts, hosts
        assert "proxy.example:8443" in hosts and "proxy.example" not in hosts  # a port given is kept as given
        assert {"localhost:*", "127.0.0.1:*", "10.*", "192.168.*"} <= set(hosts)  # MLflow's default still holds
        assert "*" not in hosts
    monkeypatch.setenv("MLFLOW_SERVER_ALLOWED_HOSTS", "mine.example, fd00::7")
    assert "--allowed-hosts" not in ui_command(cfg, "127.0.0.1", port)  # the variable alone: MLflow reads it
    cmd = ui_command(cfg, "127.0.0.1", port, allowed=["proxy.example"])  # a local proxy in front of loopback
    hosts = cmd[cmd.index("--allowed-hosts") + 1].split(",")
    assert {"proxy.example", f"proxy.example:{port}", "mine.example", "fd00::7", "127.0.0.1:*"} <= set(hosts)


@pytest.mark.parametrize("command", ["server", "ui"])
@pytest.mark.parametrize("value", ["", "a.example,,b.example", "*", "http://mlflow.example", "mlflow.example:99999"])
def test_a_malformed_allowed_host_is_a_one_line_error(project: Path, capsys, command: str, value: str):
    with pytest.raises(SystemExit) as exit_:
        main([command, "--host", "0.0.0.0", "--allowed-hosts", value, "--port", str(free_port())])
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"resomap {command}: error: argument --allowed-hosts: "), err
    assert "Traceback" not in err


@pytest.mark.slow  # 25-50 s here: a server on a new store, and the MLflow client imported
def test_server_on_every_interface_answers_the_address_it_prints(project: Path):
    """`resomap server --host 0.0.0.0` prints mlflow.tracking_uri=http://<this machine>:PORT, and MLflow 3 refuses
    a request whose Host header it does not allow (403). Traffic goes to 127.0.0.1 only, addressed (Host header) as
    a client given the printed URI addresses it: the MLflow client logs a run, a metric and an artifact and reads
    them back; a request addressed to the --allowed-hosts name is answered too, one to any other name is refused."""
    import mlflow.tracking.request_header.registry as headers
    from mlflow import MlflowClient
    from mlflow.tracking.request_header.abstract_request_header_provider import RequestHeaderProvider

    port = free_port()
    args = ("server", "--host", "0.0.0.0", "--allowed-hosts", "mlflow.lab.example")
    with _running_ui(project, port, args=args) as (proc, _, before, _):
        uri = proc.stdout.readline().strip().rpartition("mlflow.tracking_uri=")[2]
        printed = urllib.parse.urlsplit(uri)
        assert printed.scheme == "http" and printed.port == port and printed.hostname != "0.0.0.0", uri
        assert "mlflow.lab.example" in before[1] and "refused" in before[1], before

        class AsPrinted(RequestHeaderProvider):  # every MLflow request addressed as to the printed URI
            def in_context(self) -> bool:
                return True

            def request_headers(self) -> dict[str, str]:
                return {"Host": printed.netloc}

        headers._request_header_provider_registry.register(AsPrinted)
        try:
            client = MlflowClient(tracking_uri=f"http://127.0.0.1:{port}")
            exp = client.create_experiment("hosts")
            run = client.create_run(exp).info.run_id
            client.log_metric(run, "val_acc", 0.5, step=1)
            (project / "note.txt").write_text("logged")
            client.log_artifact(run, str(project / "note.txt"))  # through the server (--serve-artifacts)
            client.set_terminated(run)
            got = client.get_run(run)
            assert got.data.metrics == {"val_acc": 0.5} and got.info.status == "FINISHED"
            assert [a.path for a in client.list_artifacts(run)] == ["note.txt"]
            assert (project / "mlartifacts").is_dir()
        finally:
            found = headers._request_header_provider_registry._registry
            found[:] = [p for p in found if not isinstance(p, AsPrinted)]
        assert _api_status(port, f"mlflow.lab.example:{port}") == 200
        assert _api_status(port, "mlflow.lab.example") == 200  # as a proxy on the scheme's port sends it
        assert _api_status(port, f"{socket.gethostname()}:{port}") == 200
        for foreign in (f"evil.example:{port}", "evil.example", f"mlflow.lab.example.evil.example:{port}"):
            assert _api_status(port, foreign) == 403, foreign
            assert _api_status(port, foreign, "/") == 403, foreign
        assert _api_status(port, f"mlflow.lab.example:{port}", "/") == 200


@pytest.mark.parametrize("host", ["999.1.1.1", "203.0.113.254", "no-such-host.invalid"])
def test_ui_on_a_host_that_cannot_be_bound_is_a_one_line_error(project: Path, capsys, host: str):
    """An invalid address, an address of another machine and an unknown name are each named as such, not as a
    taken port."""
    (project / "mlflow.db").touch()
    code, out, err = _ui(["--host", host, "--port", str(free_port())], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"resomap: error: --host {host} is ")
    assert "taken" not in err
    why = {"999.1.1.1": "not a valid IP address", "203.0.113.254": "not an address of this machine"}
    assert why.get(host, "neither an IP address nor a host name this machine resolves") in err


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["INT", "TERM", "HUP"])
def test_a_signal_to_resomap_ui_stops_its_server_and_workers(project: Path, sig: signal.Signals):
    """`resomap ui` stopped by Ctrl-C, kill or a closed terminal leaves no process of its server behind and nothing
    listening on its port; the waiting wrapper never imports torch; the server's log is under .cache/."""
    import psutil

    (project / "mlflow.db").touch()
    port = free_port()
    with _running_ui(project, port) as (proc, server, _, _):
        maps = Path(f"/proc/{proc.pid}/maps").read_text()
        assert "libtorch" not in maps  # the wrapper only waits
        assert (project / ".cache" / "mlflow-ui.log").is_file() and not (project / "mlflow-ui.log").exists()
        proc.send_signal(sig)
        assert proc.wait(timeout=60) == 0
        _, alive = psutil.wait_procs(server, timeout=30)
        assert not alive, [p.cmdline() for p in alive]
        with socket.socket() as sock:
            assert sock.connect_ex(("127.0.0.1", port)) != 0  # nothing listens on the port any more


@pytest.mark.slow
def test_resomap_ui_under_nohup_outlives_a_closed_terminal(project: Path):
    """Started with SIGHUP ignored (`nohup resomap ui &`), the UI keeps serving when the terminal closes (SIGHUP);
    SIGTERM still stops it and its server."""
    import psutil

    (project / "mlflow.db").touch()
    port = free_port()
    with _running_ui(project, port, ignored=(signal.SIGHUP,)) as (proc, server, _, _):
        proc.send_signal(signal.SIGHUP)
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=3)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as resp:
            assert resp.status == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        _, alive = psutil.wait_procs(server, timeout=30)
        assert not alive, [p.cmdline() for p in alive]


# ---------------------------------------------------------------- browser: a sweep in the UI


def _stop(proc: subprocess.Popen) -> None:
    """Stop a process started in its own session, with everything it started (mlflow server -> uvicorn)."""
    for sig, wait_s in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        if proc.poll() is not None:
            break
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError):  # the group may outlive its leader
        os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture
def swept(project: Path) -> Path:
    """The project after a 2 models x 2 resolutions smoke sweep."""
    overrides = [f"sweep.models=[{','.join(MODELS)}]", f"sweep.resolutions=[{','.join(map(str, RESOLUTIONS))}]"]
    cmd = [sys.executable, "-m", "resomap.cli", "-q", "sweep", "--preset", "smoke", *overrides]
    done = subprocess.run(cmd, cwd=project, capture_output=True, text=True, timeout=420)
    assert done.returncode == 0, done.stdout + done.stderr
    return project


@pytest.fixture
def ui_url(swept: Path) -> Iterator[tuple[str, str]]:
    """(the UI's address, the experiment link `resomap ui` prints) while `resomap ui` runs."""
    port = free_port()
    cmd = [sys.executable, "-m", "resomap.cli", "ui", "--port", str(port), "--workers", "1"]
    log = swept / "resomap-ui.out"
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(cmd, cwd=swept, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        link = None
        while time.monotonic() < deadline and proc.poll() is None and link is None:
            printed = [line for line in log.read_text().splitlines() if "http://" in line]
            # the first link printed is the sweep's runs view; its charts and parallel coordinates follow
            link = printed[0].rsplit(": ", 1)[1] if len(printed) >= 4 else None
            if link is not None:
                assert printed[0].startswith("the runs of resomap-smoke: ") and "compareRunsMode=TABLE" in link
                assert printed[1].startswith("  its charts against resolution: ")
                assert printed[2].startswith("  its runs in parallel coordinates: ") and printed[3].startswith(
                    "MLflow UI"
                )
            time.sleep(0.5)
        if link is None:
            pytest.fail(f"resomap ui printed no experiment link (exit {proc.poll()}): {log.read_text()[-2000:]}")
        with urllib.request.urlopen(url + "/health", timeout=5) as resp:
            assert resp.status == 200
        yield url, link
    finally:
        _stop(proc)


@pytest.fixture
def browser(tmp_path: Path):
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        pytest.fail(f"missing {', '.join(missing)}; `bash .ci/browser` installs Chromium and runs these tests")
    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    flags = (
        "--headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage --disable-background-networking"
        " --disable-quic --no-first-run --disable-component-update --disable-sync --window-size=1440,900"
    )
    for flag in [*flags.split(), f"--user-data-dir={tmp_path / 'chromium-profile'}"]:
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=opts)
    try:
        driver.set_page_load_timeout(60)
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def shots() -> Path:
    folder = Path(os.environ.get("RESOMAP_SCREENSHOTS") or REPO / ".ci" / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("ui_*.png"):
        old.unlink()
    return folder


def _set_step(page: _Page, card, step: int) -> None:
    """Type a step into an MLflow image card's number box and wait for its slider to follow."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    box = card.find_element(By.CSS_SELECTOR, "input[type='number']")
    box.click()
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(str(step), Keys.TAB)
    slider = card.find_element(By.CSS_SELECTOR, "[role='slider']")
    page.wait.until(lambda d: slider.get_attribute("aria-valuenow") == str(step), f"slider not at {step}")


def _loaded_images(driver, card) -> list[str]:
    """The sources of the images an MLflow image card shows, loaded (naturalWidth > 0)."""
    script = (
        "return [...arguments[0].querySelectorAll('img')].filter(i => i.complete && i.naturalWidth > 0).map(i => i.src)"
    )
    return driver.execute_script(script, card)


def _image_runs(driver, card) -> set[str]:
    """The run ids of the images an MLflow image card shows, loaded (naturalWidth > 0)."""
    script = (
        "return [...arguments[0].querySelectorAll('img')].filter(i => i.complete && i.naturalWidth > 0)"
        ".map(i => new URL(i.src).searchParams.get('run_uuid'))"
    )
    return set(driver.execute_script(script, card))


# MLflow's lines of a chart (plotly traces: the faded copies and the seeds' bands are not hovered): each with its
# group (the model's: tracking.views.group_id), metric, x values, colour and dash
LINES = (
    "return arguments[0].data.filter(t => t.uuid && t.hoverinfo !== 'skip' && t.x && t.x.length)"
    ".map(t => ({group: t.uuid, metric: t.metricKey, x: t.x, y: t.y, colour: t.marker.color, dash: t.line.dash}))"
)
# the highest point of a chart's lines: its x, y, model, where it is drawn (viewport px) and its offset from the
# plot's centre (where the pointer goes), and the toolbar's box
HIGHEST = (
    "const p = arguments[0], L = p._fullLayout, s = L._size, r = p.getBoundingClientRect();"
    "let top = null;"
    "for (const t of p.data) { if (!t.uuid || t.hoverinfo === 'skip' || !t.x) continue;"
    "  t.x.forEach((x, i) => { if (top === null || t.y[i] > top.y) top = {x: x, y: t.y[i], group: t.uuid}; }); }"
    "top.model = top.group.replace('param.model.', '');"
    "top.px = r.left + s.l + L.xaxis.l2p(top.x); top.py = r.top + s.t + L.yaxis.l2p(top.y);"
    "top.dx = Math.round(top.px - (r.left + r.width / 2)); top.dy = Math.round(top.py - (r.top + r.height / 2));"
    "const m = p.querySelector('.modebar').getBoundingClientRect();"
    "top.toolbar = [m.left, m.top, m.right, m.bottom];"
    "return top;"
)


def _chart_card(page: _Page, title: str):
    """The sweep view's chart card titled `title` (MLflow titles a card by its metric keys), in view, drawn."""
    from selenium.webdriver.common.by import By

    card = page.visible(By.XPATH, f"//h4[@title='{title}']/ancestor::*[.//*[contains(@class, 'js-plotly-plot')]][1]")
    page.d.execute_script("arguments[0].scrollIntoView({block: 'center'})", card)
    plot = card.find_element(By.CSS_SELECTOR, ".js-plotly-plot")
    page.wait.until(lambda d: d.execute_script(LINES, plot), f"no line drawn in {title}")
    return card


def _hover_highest(page: _Page, plot) -> tuple[dict, bool, str]:
    """Point at a chart's highest point: (the point, whether plotly's toolbar, shown while pointing, covers it,
    the text of MLflow's tooltip)."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    top = page.d.execute_script(HIGHEST, plot)

    def pointed(d) -> str:  # from outside the plot onto it, then to the point, as a hand moves (again until shown)
        heading = plot.find_element(By.XPATH, "ancestor::*[.//h4][1]//h4")
        pointer = ActionChains(d).move_to_element(heading).move_to_element(plot).pause(0.3)
        pointer.move_to_element_with_offset(plot, top["dx"], top["dy"]).pause(0.5).perform()
        return "".join(e.text for e in d.find_elements(By.CSS_SELECTOR, "[data-testid='tooltip-container']"))

    tip = page.wait.until(pointed, f"no tooltip on the highest point {top}")
    under = "const e = document.elementFromPoint(arguments[0], arguments[1]); return !!(e && e.closest('.modebar'))"
    covered = page.d.execute_script(under, top["px"], top["py"])
    left, upper, right, lower = top["toolbar"]
    covered = covered or (left <= top["px"] <= right and upper - 4 <= top["py"] <= lower + 4)  # a marker's radius
    return top, covered, tip


def _hue(colour: str) -> float:
    """The hue (degrees) of a #rrggbb colour."""
    import colorsys

    return 360 * colorsys.rgb_to_hsv(*(int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)))[0]


class _Page:
    """The driver with bounded waits on explicit conditions, and numbered screenshots."""

    def __init__(self, driver, shots: Path, wait_s: float = 60):
        from selenium.webdriver.support.ui import WebDriverWait

        self.d, self.shots, self.n = driver, shots, 0
        self.wait = WebDriverWait(driver, wait_s, poll_frequency=0.25)

    def shot(self, name: str) -> Path:
        self.n += 1
        path = self.shots / f"ui_{self.n:02d}_{name}.png"
        assert self.d.save_screenshot(str(path)), path
        return path

    def visible(self, by: str, what: str):
        from selenium.webdriver.support import expected_conditions as ec

        return self.wait.until(ec.visibility_of_element_located((by, what)), f"not shown: {by} {what!r}")

    def clickable(self, by: str, what: str):
        from selenium.webdriver.support import expected_conditions as ec

        return self.wait.until(ec.element_to_be_clickable((by, what)), f"not clickable: {by} {what!r}")

    def text(self, text: str):
        return self.clickable("xpath", f"//*[normalize-space(text())='{text}']")

    def rendered_image(self, width: int):
        """The <img> that finished loading with this natural width (the artifact preview of a PNG)."""
        script = (
            "return [...document.images].filter(i => i.complete && i.naturalWidth === arguments[0]"
            " && i.getBoundingClientRect().width > 0)"
        )
        found = self.wait.until(lambda d: d.execute_script(script, width), f"no image {width}px wide rendered")
        return found[0]

    def open_artifact(self, folder: str, name: str, width: int) -> None:
        self.clickable("xpath", "//*[@role='tab' and normalize-space()='Artifacts']").click()
        self.text(folder).click()
        self.text(name).click()
        self.visible("xpath", f"//*[contains(normalize-space(), '{folder}/{name}')]")
        self.rendered_image(width)


@pytest.mark.browser
@pytest.mark.timeout(900)
def test_mlflow_ui_shows_sweep(ui_url: tuple[str, str], swept: Path, browser, shots: Path):
    from mlflow import MlflowClient
    from PIL import Image
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    url, link = ui_url
    client = MlflowClient(f"sqlite:///{swept / 'mlflow.db'}")
    exp = client.get_experiment_by_name(EXPERIMENT)
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    runs = {r.info.run_name: r for r in client.search_runs([exp.experiment_id])}
    assert set(runs) == {PARENT, *CHILDREN}
    parent = runs[PARENT].info.run_id
    child = runs["tiny_cnn@32"]
    page = _Page(browser, shots)

    # a fresh browser: the experiment list, then the experiment opens on its runs table (model training, not GenAI)
    browser.get(url + "/#/experiments")
    link_el = page.clickable(By.LINK_TEXT, EXPERIMENT)
    assert link_el.get_attribute("href").endswith(f"#/experiments/{exp.experiment_id}")
    page.shot("experiments")
    link_el.click()
    page.wait.until(lambda d: f"/experiments/{exp.experiment_id}/runs" in d.current_url, "not on the runs table")
    assert "workflowType=machine_learning" in browser.current_url
    page.visible(By.CSS_SELECTOR, f"[role='row'][row-id='{parent}']")
    assert not browser.find_elements(By.XPATH, "//*[normalize-space(text())='Detect Issues']"), "GenAI overview shown"
    page.shot("experiment_opens_on_runs")

    # the link `resomap ui` prints first: the sweep's runs grouped by model, each group sorted by resolution (a
    # metric, so numerically), score, its interval and latency as metric columns, the parent's one "best"
    browser.get(link)
    headers = lambda d: {h.get_attribute("col-id") for h in d.find_elements(By.CSS_SELECTOR, "[role='columnheader']")}  # noqa: E731
    wanted = {f"metrics.`{k}`" for k in ("score", "score_low", "score_high", "latency_ms", "convergence/undertrained")}
    wanted |= {"params.`model`", "params.`resolution`", "params.`seed`", "tags.`recommended`"}
    page.wait.until(lambda d: wanted <= headers(d), "columns missing")
    for model in MODELS:
        page.visible(By.XPATH, f"//*[normalize-space(text())='Group: {model}']")
        rows = [runs[f"{model}@{r}"].info.run_id for r in RESOLUTIONS]
        # MLflow's grouped rows are <group id>.<run id>
        found = [page.visible(By.CSS_SELECTOR, f"[role='row'][row-id='param.model.{model}.{i}']") for i in rows]
        indices = [int(row.get_attribute("row-index")) for row in found]
        assert indices == sorted(indices) and len(set(indices)) == len(indices), (model, indices)  # by resolution
    for name in CHILDREN:
        assert runs[name].data.tags["mlflow.parentRunId"] == parent
        assert runs[name].data.params["resolution"] == name.split("@")[1]

    def cell(run_id: str, column: str) -> str:
        found = browser.find_elements(By.CSS_SELECTOR, f"[role='row'][row-id$='.{run_id}'] [col-id='{column}']")
        return found[0].text if found else ""

    score = child.data.metrics["score"]
    assert score == round(child.data.metrics["test/accuracy"], 3) and cell(child.info.run_id, "metrics.`score`") == str(
        score
    )
    assert cell(child.info.run_id, "metrics.`latency_ms`") == str(child.data.metrics["latency_ms"])
    # the parent row (MLflow's group of runs without a model, opened): its "recommended" is the report's answer
    # across models, and resomap.best the configuration it names
    summary_dir = swept / "model_summaries" / "_sweep" / EXPERIMENT
    answer = json.loads((summary_dir / "summary.json").read_text())["answer"]
    best = runs[PARENT].data.tags["recommended"]
    if answer["available"]:
        assert best.startswith(f"use {answer['use']} (") and runs[PARENT].data.tags["resomap.best"] == answer["use"]
    else:
        assert best.startswith("no answer across models: ") and "resomap.best" not in runs[PARENT].data.tags
    page.wait.until(lambda d: cell(parent, "tags.`recommended`") == best, "the parent's recommendation not shown")
    page.shot("runs_grouped_by_model")
    # sorting by latency (a click on its header, a metric column: MLflow's store orders it by value) orders each
    # model's runs by their latency in the direction the header shows
    header = page.clickable(By.CSS_SELECTOR, "[role='columnheader'][col-id='metrics.`latency_ms`']")
    header.click()
    page.wait.until(lambda d: "latency_ms" in d.current_url, "not sorted by latency")
    descending = "orderByAsc=false" in browser.current_url

    def by_latency(d) -> bool:
        for model in MODELS:
            ids = [runs[f"{model}@{r}"].info.run_id for r in RESOLUTIONS]
            rows = d.find_elements(By.CSS_SELECTOR, ", ".join(f"[role='row'][row-id$='.{i}']" for i in ids))
            placed = sorted(
                {(int(r.get_attribute("row-index")), r.get_attribute("row-id").rsplit(".", 1)[1]) for r in rows}
            )
            values = [runs_by_id[i].data.metrics["latency_ms"] for _, i in placed]
            if len(values) != len(ids) or values != sorted(values, reverse=descending):
                return False
        return True

    runs_by_id = {r.info.run_id: r for r in runs.values()}
    page.wait.until(by_latency, "the runs are not ordered by latency")
    page.shot("runs_sorted_by_latency")

    # the sweep view's charts against resolution (its x axis titled so), one line per model in the colour resomap
    # gave it (colour-blind-safe hues that differ): the score with its interval pooled over the seeds (dashed and
    # dotted beside it), latency, each method's map agreement with its chance level, the costs
    browser.get(url + "/#/experiments")  # a route change first: a hash change within the runs page keeps its mode
    page.visible(By.LINK_TEXT, EXPERIMENT)
    browser.get(link.replace("compareRunsMode=TABLE", "compareRunsMode=CHART"))
    page.visible(By.XPATH, "//*[normalize-space(text())='against resolution']")
    card = _chart_card(page, "score vs score_low vs score_high")
    plot = card.find_element(By.CSS_SELECTOR, ".js-plotly-plot")
    drawn = page.wait.until(lambda d: d.execute_script(LINES, plot), "no line drawn")
    assert {tuple(t["x"]) for t in drawn} == {tuple(RESOLUTIONS)}, drawn  # at 32, 48 px
    assert sorted((t["group"], t["metric"]) for t in drawn) == sorted(
        (group_id(m), k) for m in MODELS for k in ("score", "score_low", "score_high")
    ), drawn
    assert {t["dash"] for t in drawn} == {"solid", "dash", "dot"}  # the score, its interval's bounds
    assert browser.execute_script("return arguments[0].layout.xaxis.title.text", plot) == "resolution"
    colours = {t["group"]: t["colour"] for t in drawn}
    assert colours == {group_id(m): c for m, c in model_colors([list(MODELS)]).items()}, colours
    hues = [_hue(c) for c in colours.values()]
    assert min(abs(hues[0] - hues[1]), 360 - abs(hues[0] - hues[1])) >= 30, colours  # distinct hues, not two pinks
    legend = card.text
    assert all(f"{m} (score{end})" in legend for m in MODELS for end in ("", "_low", "_high")), legend
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", card)
    page.shot("charts_score_against_resolution")
    # every chart's highest point can be hovered: plotly's toolbar shows over the top of a plot while the pointer is
    # on it, and the charts' y range leaves room above their values (tracking.views.chart_ranges)
    from resomap.config import load

    methods = load("configs", "smoke", []).explainability.methods
    for chart in view_charts(methods):
        keys = chart["selectedMetricKeys"]  # MLflow titles a card by its first 3 keys
        title = " vs ".join(keys[:3]) + (f" + {len(keys) - 3} more" if len(keys) > 3 else "")
        shown = _chart_card(page, title).find_element(By.CSS_SELECTOR, ".js-plotly-plot")
        top, covered, tip = _hover_highest(page, shown)
        assert not covered, (title, top)
        assert tip.startswith(f"resolution {top['x']}\n") and top["model"] in tip, (title, top, tip)
        if title.startswith("agreement/gradcam"):
            drawn = {t["metric"] for t in browser.execute_script(LINES, shown)}  # the floor and chance beside it
            assert {"agreement/gradcam", "agreement_shift_floor/gradcam", "agreement_chance/gradcam"} <= drawn, drawn
            page.shot("charts_agreement_hovered")
    # a colour picked by hand (MLflow keeps it in the browser, as resomap's page keeps its own) stays on a new visit
    pick = "const k = 'experimentRunColors', a = JSON.parse(localStorage.getItem(k)); a[arguments[0]] = arguments[1];"
    browser.execute_script(pick + "localStorage.setItem(k, JSON.stringify(a))", group_id(MODELS[0]), "#123456")
    browser.get(url + "/")  # a new page load (not a hash change): resomap's page sets the colours again
    page.visible(By.LINK_TEXT, EXPERIMENT)
    browser.get(link.replace("compareRunsMode=TABLE", "compareRunsMode=CHART"))
    plot = _chart_card(page, "score vs score_low vs score_high").find_element(By.CSS_SELECTOR, ".js-plotly-plot")
    again = {t["group"]: t["colour"] for t in page.wait.until(lambda d: d.execute_script(LINES, plot))}
    assert again == {**colours, group_id(MODELS[0]): "#123456"}, again

    # the parallel-coordinates view: model, resolution, seed -> score, latency over every run
    browser.get(url + "/#/experiments")
    page.visible(By.LINK_TEXT, EXPERIMENT)
    browser.get(
        link.replace("viewStateShareKey=resomap&", "viewStateShareKey=resomap-parallel&").replace("TABLE", "CHART")
    )
    # the view's one card (its section holds nothing else): plotly's parcoords draws each axis title as text.label
    title = "//h4[normalize-space()='Parallel Coordinates']"
    labels = "[.//*[local-name()='text' and contains(concat(' ', @class, ' '), ' label ')]]"
    parallel = page.visible(By.XPATH, f"{title}/ancestor::*{labels}[1]")
    axes = lambda d: {t.get_attribute("textContent") for t in parallel.find_elements(By.CSS_SELECTOR, "svg text.label")}  # noqa: E731
    page.wait.until(lambda d: {"model", "resolution", "seed", "score", "latency_ms"} <= axes(d), "axes missing")
    page.shot("parallel_coordinates")

    # the children's image grid (the experiment's chart view): its step slider moves a probe map across resolutions,
    # each step showing the children trained at that resolution
    browser.get(url + "/#/experiments")  # a route change first: a hash change within the runs page keeps its mode
    page.visible(By.LINK_TEXT, EXPERIMENT)
    browser.get(f"{url}/#/experiments/{exp.experiment_id}/runs?compareRunsMode=CHART&workflowType=machine_learning")
    page.visible(By.CSS_SELECTOR, "input[placeholder='Search metric charts']")
    if not browser.find_elements(By.LINK_TEXT, child.info.run_name):
        page.clickable(By.CSS_SELECTOR, "button[data-component-id*='runnamecellrenderer']").click()
    page.visible(By.LINK_TEXT, child.info.run_name)
    page.visible(By.CSS_SELECTOR, "input[placeholder='Search metric charts']").send_keys("probe/gradcam/00")
    grid = page.visible(By.XPATH, "//h4[@title='probe/gradcam/00']/ancestor::*[.//input][1]")
    within = (  # the card's topmost loaded picture, as drawn (MLflow fits it in a square box), whole in view
        "const imgs = [...arguments[0].querySelectorAll('img')].filter(i => i.naturalWidth > 0);"
        "const img = imgs.sort((a, b) => a.getBoundingClientRect().top - b.getBoundingClientRect().top)[0];"
        "let box = img.parentElement;"  # the card's scrolled part: the nearest ancestor that scrolls
        "const scrolls = (e) => /(auto|scroll)/.test(getComputedStyle(e).overflowY) && e.scrollHeight > e.clientHeight;"
        "while (box !== arguments[0] && !scrolls(box)) box = box.parentElement;"
        "const c = box.getBoundingClientRect(), r = img.getBoundingClientRect();"
        "const k = Math.min(r.width / img.naturalWidth, r.height / img.naturalHeight);"
        "const w = img.naturalWidth * k, h = img.naturalHeight * k;"
        "const top = r.top + (r.height - h) / 2, left = r.left + (r.width - w) / 2;"
        "const part = arguments[1] || 1;"  # the share of the picture, from its top, that must be in view
        "return h > 50 && top >= c.top && top + h * part <= c.bottom + 1 && left >= c.left && left + w <= c.right + 1"
    )
    from resomap.reports.probe_images import BESIDE_MAP, BESIDE_SIDE

    mapped = BESIDE_MAP / BESIDE_SIDE  # a probe picture's map and words: its top part
    for res in RESOLUTIONS:
        _set_step(page, grid, res)
        expected = {runs[f"{m}@{res}"].info.run_id for m in MODELS}
        shown = page.wait.until(lambda d, e=expected: _image_runs(d, grid) == e and e, f"children at {res} not shown")
        assert shown == expected
        page.shot(f"children_probe_map_step{res}")

    # a child run: its test accuracy, its parent, its dataset input, its confusion matrix
    assert [d.dataset.name for d in child.inputs.dataset_inputs] == ["synthetic"]
    page.clickable(By.LINK_TEXT, child.info.run_name).click()
    page.wait.until(lambda d: d.current_url.endswith(f"/runs/{child.info.run_id}"))
    metric = page.visible(By.XPATH, "//a[normalize-space()='test/accuracy']/ancestor::*[@role='row'][1]")
    shown = metric.text.split()[-1]
    assert float(shown) == pytest.approx(child.data.metrics["test/accuracy"]), metric.text
    page.visible(By.XPATH, "//*[normalize-space(text())='Parent run']")
    page.visible(By.XPATH, f"//a[normalize-space()='{PARENT}' and contains(@href, '/runs/{parent}')]")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", metric)
    page.shot("child_run_metrics")
    matrix = Path(child.info.artifact_uri.removeprefix("file://")) / "figures" / "confusion_matrix.png"
    page.open_artifact("figures", "confusion_matrix.png", Image.open(matrix).width)
    page.shot("child_confusion_matrix")

    # a closed-form child (lite0_linear: one fit per penalty of a grid, the best on validation kept): its run shows
    # the chosen fit, the one its convergence record and the summary name (val/loss and train/penalty_C of the
    # grid's row at the best epoch), no epoch metric, and the whole grid as penalty/* (step = the penalty's index)
    where = ("lite0_linear", max(RESOLUTIONS))
    fitted = runs["{}@{}".format(*where)]
    result = json.loads(next(swept.glob("model_summaries/*/{}/{}/seed*/result.json".format(*where))).read_text())
    best = result["convergence"]["best_epoch"]
    chosen = next(row for i, row in enumerate(result["history"]) if row.get("epoch", i) == best)
    summary_rows = json.loads((summary_dir / "summary.json").read_text())["rows"]
    row = next(r for r in summary_rows if (r["model"], r["resolution"]) == where)
    assert [c["penalty"] for c in row["convergence"]] == [chosen["train/penalty_C"]]  # what the summary says
    grid = sorted((m.step, m.value) for m in client.get_metric_history(fitted.info.run_id, "penalty/C"))
    assert grid == [(i, h["train/penalty_C"]) for i, h in enumerate(result["history"])]
    browser.get(f"{url}/#/experiments/{exp.experiment_id}/runs/{fitted.info.run_id}")
    box = page.visible(By.CSS_SELECTOR, "input[placeholder='Search metrics']")
    for key in ("epoch", "val/loss", "train/penalty_C"):
        box.send_keys(Keys.CONTROL, "a")
        box.send_keys(key)
        table = box.find_element(By.XPATH, "ancestor::*[.//*[@role='row']][1]")
        rows = lambda d, t=table: [r.text.split("\n") for r in t.find_elements(By.CSS_SELECTOR, "[role='row']")][1:]  # noqa: E731
        if key == "epoch":  # not one: nor convergence/best_epoch, nor per-fit seconds named by epochs
            page.wait.until(lambda d, t=table: "No metrics match" in t.text, "an epoch metric on a closed-form run")
            continue
        shown = page.wait.until(lambda d, k=key, f=rows: [r for r in f(d) if r[0] == k], f"{key} not shown")
        assert float(shown[0][1]) == pytest.approx(chosen[key]), (key, shown, chosen)
    page.shot("closed_form_child_chosen_fit")

    # the parent's charts: accuracy against resolution (step = resolution)
    browser.get(f"{url}/#/experiments/{exp.experiment_id}/runs/{parent}/model-metrics")
    search = page.visible(By.CSS_SELECTOR, "input[placeholder='Search metric charts']")
    search.send_keys(Keys.CONTROL, "a")  # the box keeps the last run page's search
    search.send_keys("by_resolution/tiny_cnn/test_accuracy")
    page.visible(By.XPATH, "//*[starts-with(normalize-space(text()), 'by_resolution/tiny_cnn')]")
    step_axis = "[.//*[local-name()='text' and normalize-space()='Step']]"  # the chart's x-axis title
    chart = page.visible(By.XPATH, f"//h4[@title='by_resolution/tiny_cnn/test_accuracy']/ancestor::*{step_axis}[1]")
    history = client.get_metric_history(parent, "by_resolution/tiny_cnn/test_accuracy")
    assert sorted(m.step for m in history) == list(RESOLUTIONS)
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", chart)
    page.shot("parent_accuracy_vs_resolution")

    # the parent's image grid: one probe map of one model; its step slider moves across resolutions
    key = "probe/lite0_linear/gradcam/00"  # the first image card (sections are sorted by key)
    card = page.visible(By.XPATH, f"//h4[@title='{key}']/ancestor::*[.//input][1]")
    # it opens at step 0 (MLflow's default) on the overview: the map at every resolution, titled "all resolutions"
    opened = page.wait.until(lambda d: _loaded_images(d, card), "the image card opens empty")
    assert card.find_element(By.CSS_SELECTOR, "[role='slider']").get_attribute("aria-valuenow") == "0"
    assert "step%2B0%2B" in opened[0] or "step+0+" in opened[0], opened[0]
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", card)
    # the card opens on the image: the run's name above it and no params (the parent has none), the whole image
    # inside the card's box
    assert runs[PARENT].data.params == {}
    assert page.wait.until(lambda d: d.execute_script(within, card), "the image is not whole in its card")
    # its overview is legible there: MLflow shows its copy at most 256 px wide, drawn at (nearly) that size, so the
    # labels (OVERVIEW_FONT px in the full picture) stay at least 9 px high on the screen
    from resomap.reports.probe_images import OVERVIEW_FONT, OVERVIEW_WIDTH

    shown_w = browser.execute_script(
        "return [...arguments[0].querySelectorAll('img')].find(i => i.naturalWidth > 0).getBoundingClientRect().width",
        card,
    )
    assert OVERVIEW_FONT * shown_w / OVERVIEW_WIDTH >= 9, shown_w
    page.shot("parent_probe_map_opened")
    sources = {0: opened[0]}
    for res in RESOLUTIONS:
        _set_step(page, card, res)
        at = lambda d, r=res: [s for s in _loaded_images(d, card) if f"step%2B{r}%2B" in s or f"step+{r}+" in s]  # noqa: E731
        sources[res] = page.wait.until(at, f"no image at step {res}")[0]
        browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", card)
        assert page.wait.until(lambda d: d.execute_script(within, card, mapped), f"the map at {res} px is cut")
        page.shot(f"parent_probe_map_step{res}")
    assert len(set(sources.values())) == len(RESOLUTIONS) + 1

    # the parent's overview: its description shows the decisions and, drawn in place, the accuracy figure with its
    # intervals (MLflow's own charts above read "Step"): a copy of the run's artifact, in view without a scroll
    # sideways, linking to the full-size file
    browser.get(f"{url}/#/experiments/{exp.experiment_id}/runs/{parent}")
    # it opens on the answer, in view before MLflow's "Show more": the answer across models (the `recommended` tag
    # in full); unfolded, the answer's paragraph and each model's own line follow it
    answer = page.visible(By.XPATH, "//*[normalize-space(text())='Answer']/ancestor::p[1]")
    best = runs[PARENT].data.tags["recommended"]
    assert best in " ".join(answer.text.split()), answer.text
    page.shot("parent_opens_on_the_answer")
    more = browser.find_elements(By.XPATH, "//*[normalize-space(text())='Show more']")  # MLflow folds long ones
    if more:
        more[0].click()
    said = json.loads((swept / "model_summaries" / "_sweep" / EXPERIMENT / "summary.json").read_text())["answer"]
    first = f"Use {said['use_model']} at {said['use_resolution']} px" if said["available"] else "No answer across"
    page.visible(By.XPATH, f"//p[starts-with(normalize-space(), '{first}')]")
    for model in MODELS:
        page.visible(By.XPATH, f"//li[starts-with(normalize-space(), '{model}: ')]")
    img = page.visible(By.CSS_SELECTOR, "img[src*='figures%2Foverview%2Faccuracy_vs_resolution.png']")
    loaded = "return arguments[0].complete && arguments[0].naturalWidth"
    figure = Path(runs[PARENT].info.artifact_uri.removeprefix("file://")) / "figures" / "accuracy_vs_resolution.png"
    full_width = Image.open(figure).width
    assert page.wait.until(lambda d: d.execute_script(loaded, img), "the figure is not loaded") == min(720, full_width)
    href = img.find_element(By.XPATH, "ancestor::a[1]").get_attribute("href")
    assert "get-artifact?path=figures%2Faccuracy_vs_resolution.png" in href and parent in href
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", img)
    box = browser.execute_script("const r = arguments[0].getBoundingClientRect(); return [r.left, r.right]", img)
    assert box[0] >= 0 and box[1] <= browser.execute_script("return window.innerWidth"), box
    page.shot("parent_overview_figure")

    # the parent's artifacts: the sweep's HTML report, whose slider changes the shown map
    browser.get(f"{url}/#/experiments/{exp.experiment_id}/runs/{parent}/artifacts")
    page.text("report.html").click()
    frame = page.visible(By.TAG_NAME, "iframe")
    browser.switch_to.frame(frame)
    try:
        slider = page.wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".strip input[type=range]"), "no slider")[0]
        strip = slider.find_element(By.XPATH, "..")
        shown_fig = "return Array.from(arguments[0].querySelectorAll('figure')).filter(f => !f.hidden)"
        before = browser.execute_script(shown_fig, strip)[0].get_attribute("data-res")
        browser.execute_script("arguments[0].value = 0; arguments[0].dispatchEvent(new Event('input'))", slider)
        after = browser.execute_script(shown_fig, strip)[0].get_attribute("data-res")
        assert (before, after) == (str(max(RESOLUTIONS)), str(min(RESOLUTIONS)))
        broken = "return Array.from(document.images).filter(i => !i.complete || i.naturalWidth === 0).length"
        assert browser.execute_script(broken) == 0
    finally:
        browser.switch_to.default_content()
    page.shot("parent_report")

    # back to the parent's overview: the summary tables and the accuracy-vs-resolution figure
    page.clickable(By.XPATH, "//*[@role='tab' and normalize-space()='Artifacts']")
    figure = Path(runs[PARENT].info.artifact_uri.removeprefix("file://")) / "figures" / "accuracy_vs_resolution.png"
    page.open_artifact("figures", "accuracy_vs_resolution.png", Image.open(figure).width)
    assert page.text("summary").is_displayed()
    page.shot("parent_summary_figure")

    # the report on its own, as a reader opens it: its first screen answers per model (the decision or why none),
    # the decisions in full follow with how each model trained and where it stands, then the tables; the
    # explanation findings and the paired-test table are on the page, in the summary's order
    summary_dir = swept / "model_summaries" / "_sweep" / EXPERIMENT
    data = json.loads((summary_dir / "summary.json").read_text())
    browser.get((summary_dir / "report.html").as_uri())
    fold = browser.execute_script("return window.innerHeight")
    answers = page.visible(By.XPATH, "//section[@id='answer']/ul").find_elements(By.XPATH, "./li")
    recs = [r for r in data["recommendations"] if r.get("sentence")]
    assert [li.text.split(": ")[0] for li in answers] == [r["model"] for r in recs]
    for li, rec in zip(answers, recs, strict=True):
        assert li.text.startswith(f"{rec['model']}: {own_words(rec)}"), li.text
    said = page.visible(By.XPATH, "//section[@id='answer']/p[1]").text  # the answer across models above them
    assert said == answer_line(data["answer"], SweepSummary.from_dict(data).rows), said
    assert all(li.rect["y"] + li.rect["height"] <= fold for li in answers), "an answer below the first screen"
    items = page.visible(By.XPATH, "//section[@id='decision']/ul").find_elements(By.XPATH, "./li")
    assert [li.text.split("\n")[0] for li in items] == [r["sentence"] for r in recs]
    for li in items:  # under each decision: how the model trained, where it stands against the majority class
        below = li.text.split("\n")[1:]
        assert below[0].startswith("training: ") and "undertrained" in below[0], li.text
        assert below[1].startswith("baselines: ") and "the majority class (" in below[1], li.text
    findings = (summary_dir / "explanations" / "findings.txt").read_text().split("\n")
    shown = page.visible(By.XPATH, "//section[@id='explanations']/ul")
    listed = [li.text for li in shown.find_elements(By.XPATH, "./li")]
    assert listed == [f for f in findings if f.strip()]
    cells = page.visible(By.XPATH, "//section[@id='paired']").find_elements(By.XPATH, ".//table[1]//td")
    assert len(cells) >= 8 and any("px" in c.text or "→" in c.text for c in cells), "no paired-test table"
    order = [page.visible(By.ID, key).rect["y"] for key in ("answer", "decision", "results", "explanations", "paired")]
    assert order == sorted(order)
    page.shot("report_first_screen")

    # last (MLflow keeps a run page's chart layout for the next run page it opens): the child's own image card shows
    # its map and words without a scroll; its params, printed above the picture, are the five that identify it
    browser.get(f"{url}/#/experiments/{exp.experiment_id}/runs/{child.info.run_id}/model-metrics")
    box = page.visible(By.CSS_SELECTOR, "input[placeholder='Search metric charts']")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys("probe/gradcam/00")
    own = page.visible(By.XPATH, "//h4[@title='probe/gradcam/00']/ancestor::*[.//input][1]")
    page.wait.until(lambda d: _loaded_images(d, own), "the child's image card is empty")  # at its one step
    assert page.wait.until(lambda d: d.execute_script(within, own, mapped), "the child's map is not whole in its card")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", own)
    page.shot("child_probe_map")
