"""Pure bookkeeping: no torch, no flwr. Everything here is tested in milliseconds."""
