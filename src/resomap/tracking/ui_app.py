"""The web app `resomap ui` serves: MLflow's own, opening on its model-training view.

MLflow 3.17 chooses between its GenAI and model-training views with a switch kept in the browser (localStorage
`mlflow.workflowType_v1`, GenAI unless the user flipped it); the experiment's `mlflow.experimentKind` tag, which
ResoMap sets, is not what its UI reads while that switch exists. So the page at `/` is MLflow's index.html with
one line of script that sets the switch to model training when the browser has no choice stored yet (DEFAULTS):
a user who picked GenAI keeps it. The same script gives each model's group of runs its colour (`colors_script`:
MLflow otherwise picks a group's colour by a hash of its id, and two models can come out in near hues). The page
is served only to a request whose Host header MLflow's own check allows (`host_allowed`); any other goes to MLflow,
which refuses it (403) as it refuses such an API call. Everything else is MLflow's app, untouched.

Registered as the `resomap` app of MLflow's `mlflow.app` entry-point group (pyproject.toml), started with
`mlflow server --app-name resomap`; MLflow's app is imported on the first request, so `mlflow server` itself does
not pay for it when it checks the entry point.
"""

from __future__ import annotations

import json
import os
from typing import Any

# browser settings of MLflow's UI given a value when the browser holds none: model-training view, and its
# assistant panel not opened by itself on the first visit (it would cover half of the runs table)
DEFAULTS = {"mlflow.workflowType_v1": "machine_learning", "mlflow.assistant.fab.autoOpenedOnFirstLoad_v1": True}
_SET_MISSING = "for(var k in d){if(localStorage.getItem(k)===null)localStorage.setItem(k,JSON.stringify(d[k]))}"
SCRIPT = "<script>try{var d=" + json.dumps(DEFAULTS) + ";" + _SET_MISSING + "}catch(e){}</script>"

# MLflow keeps a group's colour in localStorage "experimentRunColors" (group id -> colour; a user's pick from the runs
# table goes there too). The colours resomap set are remembered in OWN_COLORS, so a colour is replaced only where
# the browser holds none or still holds resomap's: a colour the user picked stays.
OWN_COLORS = "resomap.groupColors"
_SET_COLORS = (
    "var K='experimentRunColors',M='" + OWN_COLORS + "',a=JSON.parse(localStorage.getItem(K)||'{}'),"
    "m=JSON.parse(localStorage.getItem(M)||'{}');for(var g in w){if(!(g in a)||a[g]===m[g]){a[g]=w[g];m[g]=w[g]}}"
    "localStorage.setItem(K,JSON.stringify(a));localStorage.setItem(M,JSON.stringify(m))"
)


def colors_script(colors: dict[str, str]) -> str:
    """The script that sets each group's colour (group id -> colour) where the user picked none; "" for none."""
    if not colors:
        return ""
    return "<script>try{var w=" + json.dumps(colors, sort_keys=True) + ";" + _SET_COLORS + "}catch(e){}</script>"


def store_colors() -> dict[str, str]:
    """Group id -> colour of each model of the store's ResoMap experiments (resomap.tracking.views.model_colors
    over their MODELS_TAG, the most recently updated first); empty outside an MLflow server or when the store
    cannot be read (MLflow's own colours then)."""
    from mlflow.server.constants import BACKEND_STORE_URI_ENV_VAR

    from resomap.tracking.views import MODELS_TAG, group_id, held_models, model_colors

    if not os.environ.get(BACKEND_STORE_URI_ENV_VAR):  # not the server's process: no store of its own
        return {}
    try:
        from mlflow.server.handlers import _get_tracking_store

        found = _get_tracking_store().search_experiments(max_results=1000, order_by=["last_update_time DESC"])
    except Exception:  # the page works without them
        return {}
    lists = [held_models(e.tags.get(MODELS_TAG)) for e in found if MODELS_TAG in (e.tags or {})]
    return {group_id(m): c for m, c in model_colors(lists).items()}


def host_allowed(scope: dict) -> bool:
    """Whether MLflow's Host check (its DNS-rebinding protection: --allowed-hosts, MLFLOW_SERVER_ALLOWED_HOSTS or its
    default of loopback and private addresses) lets this request through, by MLflow's own rules and settings."""
    from mlflow.environment_variables import MLFLOW_SERVER_DISABLE_SECURITY_MIDDLEWARE
    from mlflow.server.fastapi_security import get_allowed_hosts
    from mlflow.server.security_utils import is_allowed_host_header

    if MLFLOW_SERVER_DISABLE_SECURITY_MIDDLEWARE.get() == "true":
        return True
    allowed = get_allowed_hosts()
    if not allowed or "*" in allowed:  # MLflow adds no Host check then
        return True
    host = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1")
    return is_allowed_host_header(allowed, host)


class ModelTrainingFirst:
    """ASGI app: GET / answers MLflow's index.html with SCRIPT in its head to a request MLflow's Host check allows;
    every other request goes to MLflow (a foreign Host: its 403)."""

    def __init__(self) -> None:
        self._mlflow: Any = None
        self._index: tuple[int, str] | None = None  # where the scripts go in MLflow's index.html, and the page

    @property
    def mlflow_app(self) -> Any:
        if self._mlflow is None:
            from mlflow.server.fastapi_app import app

            self._mlflow = app
        return self._mlflow

    def index(self) -> bytes | None:
        """MLflow's index.html with the scripts (the colours read from the store on every load, so a new sweep's
        models have theirs), or None when MLflow has none (it then answers / itself)."""
        if self._index is None:
            from mlflow.server import app as flask_app

            path = os.path.join(flask_app.static_folder, "index.html")
            if not os.path.isfile(path):
                return None
            with open(path, encoding="utf-8") as f:
                html = f.read()
            head = html.find("<head>")
            self._index = head + len("<head>") if head >= 0 else 0, html
        at, html = self._index
        return (html[:at] + SCRIPT + colors_script(store_colors()) + html[at:]).encode("utf-8")

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        app = self.mlflow_app
        page = scope["type"] == "http" and scope.get("path") == "/" and scope.get("method") in ("GET", "HEAD")
        if page and host_allowed(scope):
            body = self.index()
            if body is not None:
                headers = [
                    (b"content-type", b"text/html; charset=utf-8"),
                    (b"content-length", str(len(body)).encode()),
                    (b"cache-control", b"no-cache"),
                ]
                await send({"type": "http.response.start", "status": 200, "headers": headers})
                await send({"type": "http.response.body", "body": body if scope["method"] == "GET" else b""})
                return
        await app(scope, receive, send)


app = ModelTrainingFirst()
