"""The ServerApp: the run config's ``method`` as a fedforget strategy, started with the action the run asks for
(``train``; ``retrain`` and ``propagate`` when the fedforget coordinator submits this app)."""

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedforget.strategies import start_from_context, strategy_for

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    strategy = strategy_for(context.run_config)  # e.g. FedAvgLoRA for method = "fedavg"
    result = start_from_context(strategy, grid, context)  # Flower's Result: what the store now serves
    print(f"tabular-mlp: the store serves {len(result.arrays)} arrays")
