# `source env.sh` in this directory, with fedforget's venv active: this app's Flower home ($PWD/.flwr) with
# `local` (3 simulated nodes, SuperLink ports of this app's own) and `deploy` (deploy/loopback.sh's SuperLink),
# and FEDFORGET_HOME here, so that runs/tiny-lm and data/ resolve in this directory.
export FEDFORGET_HOME="$PWD" FLWR_HOME="$PWD/.flwr" FLWR_TELEMETRY_ENABLED=0
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1  # fedforget, torch and flwr come from the venv
if [ ! -f "$FLWR_HOME/config.toml" ]; then
  mkdir -p "$FLWR_HOME"
  printf '%s\n' '[superlink]' 'default = "local"' '' '[superlink.local]' 'address = ":local:"' \
    'options.num-supernodes = 3' 'options.backend.client-resources.num-cpus = 1' '' \
    '[superlink.deploy]' 'address = "127.0.0.1:39200"' 'insecure = true' > "$FLWR_HOME/config.toml"
fi
read -r FLWR_LOCAL_SUPERLINK_HTTP_API_PORT FLWR_LOCAL_CONTROL_API_PORT \
  < <(python -m fedforget.local_superlink ports "$PWD")
export FLWR_LOCAL_SUPERLINK_HTTP_API_PORT FLWR_LOCAL_CONTROL_API_PORT
echo "tiny-lm: FEDFORGET_HOME=$FEDFORGET_HOME, local SuperLink on 127.0.0.1:$FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"
