from fedforget.core.seeds import SEED_BITS, derive_seed, derive_seed32


def test_same_tuple_gives_same_seed():
    assert derive_seed(1, "fedavg", "global", 3, 0, "train") == derive_seed(1, "fedavg", "global", 3, 0, "train")


def test_any_changed_part_changes_the_seed():
    base = (1, "fedavg", "global", 3, 0, "train")
    seeds = {derive_seed(*base)}
    for i in range(len(base)):
        changed = list(base)
        changed[i] = "other" if isinstance(base[i], str) else base[i] + 1
        seeds.add(derive_seed(*changed))
    assert len(seeds) == len(base) + 1


def test_int_and_str_parts_are_distinct():
    assert derive_seed(1) != derive_seed("1")


def test_seeds_fit_their_bit_width():
    for i in range(200):
        assert 0 <= derive_seed(i) < 2**SEED_BITS
        assert 0 <= derive_seed32(i) < 2**32
