"""One package per method: its typed config, pure planning, server hooks, client handlers, serving and
coordinator extras. :mod:`fedforget.methods.registry` lists them."""
