"""A class whose adapters all left the ensemble (instant forgetting) is scored from its prototype on the
logits' own scale, so it can still win when the sample is closest to its prototype."""

from __future__ import annotations

import numpy as np

from fedforget.methods.safe.serve import UNSCORED, mix_scores, prototype_logits

NAN = np.nan


def test_a_class_without_adapters_gets_its_prototype_score_mapped_onto_the_logit_scale():
    ensemble = np.array([[4.0, -2.0, NAN, 0.0]])
    proto = np.array([[0.9, 0.1, 0.95, 0.5]])
    filled = prototype_logits(ensemble, proto)
    have = [0, 1, 3]
    e, c = ensemble[0, have], proto[0, have]
    assert np.array_equal(filled[0, have], e)
    slope = e.std() / c.std()
    assert filled[0, 2] == e.mean() + slope * (0.95 - c.mean())
    assert filled[0, 2] > filled[0, 0]  # closest prototype, highest logit


def test_the_closest_prototype_wins_after_its_adapters_dropped_while_plain_lambda_proto_would_not():
    lam = 0.05
    ensemble = np.array([[3.0, -3.0, NAN, -1.0]])
    proto = np.array([[0.6, 0.1, 0.97, 0.3]])
    assert mix_scores(ensemble, proto, lam).argmax() == 2
    unscaled = np.where(np.isnan(ensemble), lam * proto, (1 - lam) * ensemble + lam * proto)
    assert unscaled.argmax() == 0  # negative control: the former mixing left class 2 on the cosine scale


def test_nothing_changes_while_every_class_has_an_adapter_and_an_empty_class_never_wins():
    ensemble = np.array([[1.0, 2.0, -1.0], [0.5, -0.5, 0.0]])
    proto = np.array([[0.2, 0.4, 0.1], [0.3, 0.2, 0.1]])
    assert np.array_equal(prototype_logits(ensemble, proto), ensemble)
    gone = mix_scores(np.array([[1.0, NAN, NAN]]), np.array([[0.2, 0.9, NAN]]), 0.1)
    assert gone[0, 2] == UNSCORED and np.isfinite(gone[0, 1])


def test_with_every_adapter_gone_the_prototypes_alone_decide():
    proto = np.array([[0.2, 0.8, 0.5]])
    scores = mix_scores(np.full((1, 3), NAN), proto, 0.3)
    assert np.array_equal(scores, 0.3 * proto)
