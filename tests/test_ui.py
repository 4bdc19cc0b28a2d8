"""`resomap ui`: its error paths (fast), and a headless-Chromium walk through a real sweep in the MLflow UI
(marker `browser`, run by .ci/browser): experiment -> parent run with nested children -> a child's metric and
confusion matrix -> the parent's summary figure. Screenshots go to $RESOMAP_SCREENSHOTS or .ci/screenshots/."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from resomap.cli import build_parser, main

REPO = Path(__file__).resolve().parents[1]
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
MODELS, RESOLUTIONS = ("tiny_cnn", "simple_cnn"), (32, 48)
CHILDREN = [f"{m}@{r}" for m in MODELS for r in RESOLUTIONS]
EXPERIMENT, PARENT = "resomap-smoke", "sweep resomap-smoke"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copytree(REPO / "configs", tmp_path / "configs")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path


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
    code, out, err = _ui(["--port", str(_free_port())], capsys)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("resomap: error: no MLflow store at ")
    assert "resomap sweep" in err
    assert not (project / "mlflow.db").exists()


def test_ui_on_a_taken_port_is_a_one_line_error(project: Path, capsys):
    (project / "mlflow.db").touch()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, out, err = _ui(["--port", str(port)], capsys)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith(f"resomap: error: port {port} on 127.0.0.1 is taken")


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
def ui_url(swept: Path) -> Iterator[str]:
    port = _free_port()
    cmd = [sys.executable, "-m", "resomap.cli", "ui", "--port", str(port), "--workers", "1"]
    log = swept / "resomap-ui.out"
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(cmd, cwd=swept, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                time.sleep(1)
        else:
            pytest.fail(f"resomap ui did not come up (exit {proc.poll()}): {log.read_text()[-2000:]}")
        yield url
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
        " --disable-quic --no-first-run --disable-component-update --disable-sync --window-size=1600,1000"
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
def test_mlflow_ui_shows_sweep(ui_url: str, swept: Path, browser, shots: Path):
    from mlflow import MlflowClient
    from PIL import Image
    from selenium.webdriver.common.by import By

    client = MlflowClient(f"sqlite:///{swept / 'mlflow.db'}")
    exp = client.get_experiment_by_name(EXPERIMENT)
    runs = {r.info.run_name: r for r in client.search_runs([exp.experiment_id])}
    assert set(runs) == {PARENT, *CHILDREN}
    parent = runs[PARENT].info.run_id
    child = runs["tiny_cnn@32"]
    page = _Page(browser, shots)

    # the experiment list links to the sweep's experiment
    browser.get(ui_url + "/#/experiments")
    link = page.clickable(By.LINK_TEXT, EXPERIMENT)
    assert link.get_attribute("href").endswith(f"#/experiments/{exp.experiment_id}")
    page.shot("experiments")
    link.click()
    page.wait.until(lambda d: f"/experiments/{exp.experiment_id}" in d.current_url)

    # the runs table (model-training view): the parent on top, its children nested under it
    browser.get(f"{ui_url}/#/experiments/{exp.experiment_id}/runs?workflowType=machine_learning")
    parent_row = page.visible(By.CSS_SELECTOR, f"[role='row'][row-id='{parent}']")
    assert PARENT in parent_row.text
    child_rows = f"[role='row'][row-id='{child.info.run_id}']"
    assert not browser.find_elements(By.CSS_SELECTOR, child_rows), "children shown before expanding the parent"
    page.shot("runs_collapsed")
    parent_row.find_element(By.CSS_SELECTOR, "button[data-component-id*='runnamecellrenderer']").click()
    page.visible(By.CSS_SELECTOR, child_rows)
    parent_link = page.visible(By.LINK_TEXT, PARENT)
    parent_index = int(parent_row.get_attribute("row-index"))
    for name in CHILDREN:
        run_id = runs[name].info.run_id
        assert runs[name].data.tags["mlflow.parentRunId"] == parent
        link = page.visible(By.LINK_TEXT, name)
        assert link.get_attribute("href").endswith(f"/runs/{run_id}")
        assert link.location["x"] > parent_link.location["x"], f"{name} is not indented under the parent"
        row = browser.find_element(By.CSS_SELECTOR, f"[role='row'][row-id='{run_id}']")
        assert parent_index < int(row.get_attribute("row-index")) <= parent_index + len(CHILDREN)
    page.shot("runs_nested")

    # a child run: its test accuracy, its parent, its confusion matrix
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

    # back up to the parent: the summary tables and the accuracy-vs-resolution figure
    page.clickable(By.XPATH, "//*[@role='tab' and normalize-space()='Overview']").click()
    page.clickable(By.LINK_TEXT, PARENT).click()
    page.wait.until(lambda d: d.current_url.rstrip("/").split("/runs/")[-1].startswith(parent))
    figure = Path(runs[PARENT].info.artifact_uri.removeprefix("file://")) / "figures" / "accuracy_vs_resolution.png"
    page.open_artifact("figures", "accuracy_vs_resolution.png", Image.open(figure).width)
    assert page.text("summary").is_displayed()
    page.shot("parent_summary_figure")
