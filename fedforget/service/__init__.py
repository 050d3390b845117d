"""``fedforget serve``: the forget service, an HTTP front of the same functions the CLI calls.

Other systems (a data-subject-request tool, a consent platform) submit forget requests, poll their
state and fetch signed receipts over HTTP; the service never holds its own copy of the forget,
status or receipt logic (``fedforget.unlearning``), only the HTTP contract around it: bearer tokens
(:mod:`.tokens`), idempotency keys and who asked (:mod:`.requests_db`), request states derived from
the ledger (:mod:`.states`), predictions from the served plan (:mod:`.predict`), a console and metrics.
"""
