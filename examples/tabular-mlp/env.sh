# Source me from this directory: `source env.sh` (after the venv that holds fedforget, torch and flwr).
# This app's own Flower home: `local`, its own local SuperLink (3 simulated nodes, on ports of its own), and
# `deploy`, the SuperLink deploy/loopback.sh starts on 127.0.0.1:39200; relative paths
# (store, test-data, the nodes' data) taken from this directory: `flwr run . local --stream`, then
# `fedforget forget/retrain/verify --store runs/tabular-mlp --federation local`.
APP_DIR=$(pwd)
export FEDFORGET_HOME="$APP_DIR" FLWR_HOME="$APP_DIR/.flwr"
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 FLWR_TELEMETRY_ENABLED=0
mkdir -p "$FLWR_HOME"
[ -f "$FLWR_HOME/config.toml" ] || cat > "$FLWR_HOME/config.toml" <<'TOML'
[superlink]
default = "local"

[superlink.local]
address = ":local:"
options.num-supernodes = 3
options.backend.client-resources.num-cpus = 1

[superlink.deploy]
address = "127.0.0.1:39200"
insecure = true
TOML
read -r FLWR_LOCAL_SUPERLINK_HTTP_API_PORT FLWR_LOCAL_CONTROL_API_PORT \
  < <(python -m fedforget.local_superlink ports "$APP_DIR")
export FLWR_LOCAL_SUPERLINK_HTTP_API_PORT FLWR_LOCAL_CONTROL_API_PORT
echo "tabular-mlp: FEDFORGET_HOME=$FEDFORGET_HOME, local SuperLink on 127.0.0.1:$FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"
