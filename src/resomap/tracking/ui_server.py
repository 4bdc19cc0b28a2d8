"""The server process `resomap ui` and `resomap server` start (`python -m resomap.tracking.ui_server`): MLflow's
app as `resomap.tracking.ui_app` serves it, run by uvicorn in this process, with the settings `mlflow server`
would give it.

`mlflow server` imports MLflow (its whole command line), opens the store, then starts uvicorn in a second process
that imports MLflow again before it answers: on an idle 2-core machine about 3 s of the 6.5 s `resomap ui` took to
answer (scripts/benchmark_ui.py). Here MLflow is imported once: the store is opened as `mlflow server` opens it
(`initialize_backend_stores`: a new store is created, a broken one fails here, before any request), then uvicorn
serves the app (several workers: uvicorn's own processes, as under `mlflow server`).

The settings reach MLflow's app through the environment variables `mlflow server` sets for its uvicorn process
(`mlflow.server._run_server`); MLflow reads some of them when `mlflow.server` is imported, so they are set first and
their names written out here (tests/test_ui.py checks them against MLflow's constants)."""

from __future__ import annotations

import argparse
import os
import uuid
from collections.abc import Sequence

APP = "resomap.tracking.ui_app:app"

# mlflow.server.constants (read when mlflow.server is imported: set before)
BACKEND_STORE_URI_ENV_VAR = "_MLFLOW_SERVER_FILE_STORE"
REGISTRY_STORE_URI_ENV_VAR = "_MLFLOW_SERVER_REGISTRY_STORE"
ARTIFACT_ROOT_ENV_VAR = "_MLFLOW_SERVER_ARTIFACT_ROOT"
SERVE_ARTIFACTS_ENV_VAR = "_MLFLOW_SERVER_SERVE_ARTIFACTS"
ARTIFACTS_DESTINATION_ENV_VAR = "_MLFLOW_SERVER_ARTIFACT_DESTINATION"
# mlflow.environment_variables
ALLOWED_HOSTS_ENV_VAR = "MLFLOW_SERVER_ALLOWED_HOSTS"
SGI_NAME_ENV_VAR = "_MLFLOW_SGI_NAME"
BOOT_ID_ENV_VAR = "_MLFLOW_SERVER_BOOT_ID"
IN_JOB_EXECUTOR_ENV_VAR = "_MLFLOW_IN_JOB_EXECUTOR"
WORKSPACES_ENV_VAR = "MLFLOW_ENABLE_WORKSPACES"


def server_settings(
    store: str,
    artifact_root: str,
    serve: bool = False,
    artifacts: str | None = None,
    allowed_hosts: Sequence[str] | None = None,
) -> dict[str, str]:
    """The environment `mlflow server --backend-store-uri store [--serve-artifacts --artifacts-destination
    artifacts] [--allowed-hosts ...]` gives its uvicorn process (mlflow.server._run_server), for the options ResoMap
    uses: the store (also the model registry's), the default artifact root it resolved, the allowed hosts when
    given; no job execution, no workspaces."""
    env = {
        BACKEND_STORE_URI_ENV_VAR: store,
        REGISTRY_STORE_URI_ENV_VAR: store,
        ARTIFACT_ROOT_ENV_VAR: artifact_root,
        SGI_NAME_ENV_VAR: "uvicorn",
        BOOT_ID_ENV_VAR: uuid.uuid4().hex,
        IN_JOB_EXECUTOR_ENV_VAR: "false",
        WORKSPACES_ENV_VAR: "false",
    }
    if serve:
        env[SERVE_ARTIFACTS_ENV_VAR] = "true"
        if artifacts:
            env[ARTIFACTS_DESTINATION_ENV_VAR] = artifacts
    if allowed_hosts:
        env[ALLOWED_HOSTS_ENV_VAR] = ",".join(allowed_hosts)
    return env


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m resomap.tracking.ui_server", description=__doc__.splitlines()[0])
    p.add_argument("--backend-store-uri", required=True)
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--serve-artifacts", action="store_true")
    p.add_argument("--artifacts-destination")
    p.add_argument("--allowed-hosts", help="comma-separated, as mlflow server takes them")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    from mlflow.utils.server_cli_utils import resolve_default_artifact_root  # imports no mlflow.server

    args = parse_args(argv)
    store, hosts = args.backend_store_uri, args.allowed_hosts.split(",") if args.allowed_hosts else None
    root = resolve_default_artifact_root(args.serve_artifacts, None, store)
    os.environ.update(server_settings(store, root, args.serve_artifacts, args.artifacts_destination, hosts))
    import uvicorn
    from mlflow.server.handlers import initialize_backend_stores

    initialize_backend_stores(store, store, root)  # as mlflow server does: a new store is created here
    uvicorn.run(APP, host=args.host, port=args.port, workers=args.workers, log_config=_log_config())


def _log_config() -> str:
    """MLflow's uvicorn logging settings (what `mlflow server` passes to uvicorn)."""
    import mlflow.server

    return os.path.join(os.path.dirname(mlflow.server.__file__), "uvicorn_log_config.yaml")


if __name__ == "__main__":
    main()
