"""The web app `resomap ui` serves: MLflow's own, opening on its model-training view.

MLflow 3.17 chooses between its GenAI and model-training views with a switch kept in the browser (localStorage
`mlflow.workflowType_v1`, GenAI unless the user flipped it); the experiment's `mlflow.experimentKind` tag, which
ResoMap sets, is not what its UI reads while that switch exists. So the page at `/` is MLflow's index.html with
one line of script that sets the switch to model training when the browser has no choice stored yet (DEFAULTS):
a user who picked GenAI keeps it. Everything else is MLflow's app, untouched.

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


class ModelTrainingFirst:
    """ASGI app: GET / answers MLflow's index.html with SCRIPT in its head; every other request goes to MLflow."""

    def __init__(self) -> None:
        self._mlflow: Any = None
        self._index: bytes | None = None

    @property
    def mlflow_app(self) -> Any:
        if self._mlflow is None:
            from mlflow.server.fastapi_app import app

            self._mlflow = app
        return self._mlflow

    def index(self) -> bytes | None:
        """MLflow's index.html with the script, or None when MLflow has none (it then answers / itself)."""
        if self._index is None:
            from mlflow.server import app as flask_app

            path = os.path.join(flask_app.static_folder, "index.html")
            if not os.path.isfile(path):
                return None
            with open(path, encoding="utf-8") as f:
                html = f.read()
            head = html.find("<head>")
            at = head + len("<head>") if head >= 0 else 0
            self._index = (html[:at] + SCRIPT + html[at:]).encode("utf-8")
        return self._index

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        app = self.mlflow_app
        if scope["type"] == "http" and scope.get("path") == "/" and scope.get("method") in ("GET", "HEAD"):
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
