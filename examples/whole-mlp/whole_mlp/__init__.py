"""A Flower app that trains its own MLP whole, with its own loss and metric, so any record can be forgotten exactly."""
