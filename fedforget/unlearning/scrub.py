"""The coordinator scrubs a request's raw record names where the request completes.

A request that named records keeps their openings (name, key) in ``record_names`` until it is complete:
retrained, acknowledged by every node that held its samples, its purge finished
(:func:`fedforget.store.purge.complete_requests`). What completes a request is a run the coordinator
submits (``retrain``, ``forget --propagate``) or a ``purge`` that finishes a pending one, so those commands
scrub right after it, under the coordinator's key, and say so; a run (which holds no key) never scrubs,
and a command that completes nothing writes nothing. A receipt issued before the scrub carries the names
(``record_openings``) and is deleted with them; ``fedforget receipt N`` issues it again without them.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from fedforget.store import Store


@dataclass
class Scrub:
    """What a scrub deleted: the requests whose record names went, and those whose receipt went with them."""

    requests: list[int] = field(default_factory=list)
    receipts: list[int] = field(default_factory=list)

    def line(self, store: Store) -> str:
        """One line for the command that completed the requests ('' when nothing was scrubbed)."""
        if not self.requests:
            return ""
        shown = ", ".join(f"#{r}" for r in self.requests)
        text = f"scrubbed the record names of request(s) {shown} (complete: retrained, acknowledged, purged)"
        if self.receipts:
            again = f"fedforget receipt {self.receipts[0]} --store {shlex.quote(str(store.root))}"
            text += (f"; receipt(s) {', '.join(f'#{r}' for r in self.receipts)} carried them and left receipts/: "
                     f"`{again}` issues it again without them")
        return text


def scrub_complete(store: Store) -> Scrub:
    """Delete the record names of every complete request (one ``scrub`` log entry) and the receipts that carry
    them. Reads first: with nothing complete left to scrub, nothing is written."""
    from fedforget.store.log import head_signer
    from fedforget.store.purge import complete_requests, drop_receipts_with_names
    from fedforget.store.record_commitments import scrub

    if head_signer() is None:  # only the coordinator removes record names (a run may only add rows)
        return Scrub()
    ledger = store.ledger()
    try:
        if not complete_requests(ledger):
            return Scrub()
        with ledger.transaction("scrub") as tx:
            done = complete_requests(ledger)  # again inside the write transaction: what it deletes is current
            if not done:
                ledger.log.name("update")  # nothing scrubbed: no entry
                return Scrub()
            ledger.log.name("scrub", requests=done)
            scrub(tx, done)
    finally:
        ledger.close()
    return Scrub(done, drop_receipts_with_names(store.root, done))
