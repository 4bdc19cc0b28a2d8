"""Worker process for the local-gpus executor: reads a trial spec (JSON) on stdin, runs it, prints the result
as one JSON line on stdout (logs go to stderr); given {"probe": [trial specs]}, the ETA's cost probe of those
trials instead (resomap.sweep.executors.probe_from_specs). Ctrl-C or SIGTERM leaves its trial resumable and ends
it with exit code 130 or 143 (resomap.interrupts)."""

from __future__ import annotations

import json
import logging
import sys

from resomap import interrupts
from resomap.sweep.executors import probe_from_specs, run_trial_from_spec


def main() -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)-7s %(message)s")
    with interrupts.handled():
        try:
            return _run(json.loads(sys.stdin.read()))
        except KeyboardInterrupt:
            return interrupts.exit_code()


def _run(spec: dict) -> int:
    if "probe" in spec:
        sys.stdout.write(json.dumps(probe_from_specs(spec["probe"]), default=str) + "\n")
        return 0
    result = run_trial_from_spec(spec)
    interrupts.check()
    sys.stdout.write(json.dumps(result, default=str) + "\n")
    return 0 if result.get("status") == "FINISHED" else 1


if __name__ == "__main__":
    sys.exit(main())
