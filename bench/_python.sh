# Sourced by the bench's shell scripts: cd to the repository root and pick the python that runs them ($PYTHON, else
# the project's .venv, else python3) into $root and $python.
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
python="${PYTHON:-}"
if [[ -z "$python" ]]; then
  if [[ -x .venv/bin/python ]]; then python=.venv/bin/python; else python=python3; fi
fi
