"""The ServerApp: the run config's ``method`` (``sisa``) as a fedforget strategy, started with the action the run
asks for; the coordinator submits this same app to retrain after a forget and to verify."""

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedforget.strategies import start_from_context, strategy_for

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    result = start_from_context(strategy_for(context.run_config), grid, context)
    final = result.evaluate_metrics_serverapp.get(max(result.evaluate_metrics_serverapp, default=0), {})
    print(f"tiny-lm: served model's perplexity {final.get('perplexity', float('nan')):.1f}")
