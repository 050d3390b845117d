"""One package per method: its typed config, pure planning, server hooks, client handlers, serving and
coordinator extras. :mod:`fedforget.methods.registry` lists them; importing any method imports it, so the
run config's parser and the store's ledger know every method wherever one is in use."""

import fedforget.methods.registry  # noqa: F401 - hands the declarations in (fedforget.core.known_methods)
