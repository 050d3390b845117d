"""The coordinator: the ``fedforget`` CLI and what it does to stores and Flower runs."""
