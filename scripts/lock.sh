#!/usr/bin/env bash
# Refresh requirements.lock: the exact versions scripts/setup.sh installs (for every platform and Python >= 3.10),
# so a fresh machine gets the versions the README's numbers were measured with. Run after changing
# requirements.txt or pyproject.toml, then rerun scripts/setup.sh. Usage: bash scripts/lock.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.local/bin:$PATH"
command -v uv >/dev/null 2>&1 || python3 -m pip install --quiet --user uv
uv pip compile pyproject.toml --extra dev --extra ray --extra lite --universal --python-version 3.10 --quiet \
  --custom-compile-command "bash scripts/lock.sh" -o requirements.lock
echo "lock: requirements.lock refreshed ($(grep -c '==' requirements.lock) pins)"
