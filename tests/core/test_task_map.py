"""The engine's task map against a plain dict, the reference it must behave as (in order too)."""
import pickle

from hypothesis import given, strategies as st

from core.task_map import TaskMap

keys = st.text(min_size=0, max_size=6)


@given(st.lists(st.tuples(keys, st.integers()), max_size=60))
def test_a_sequence_of_sets_gives_the_dict_of_the_same_sequence(pairs):
    """Every prefix: the same items in the same order as a dict updated the same way (a new
    key last, a known key in its place), and every earlier map unchanged."""
    reference, m, history = {}, TaskMap(), []
    for k, v in pairs:
        history.append((m, dict(reference)))
        m = m.set(k, v)
        reference[k] = v
        assert list(m.items()) == list(reference.items())
        assert len(m) == len(reference) and all(key in m for key in reference)
        assert [m.key_at(i) for i in range(len(m))] == list(reference)
    for old, expected in history:
        assert list(old.items()) == list(expected.items())
        assert [old.key_at(i) for i in range(len(old))] == list(expected)


@given(st.lists(st.tuples(keys, st.integers()), max_size=30))
def test_built_at_once_equals_built_by_sets_and_survives_pickle(pairs):
    by_sets = TaskMap()
    for k, v in pairs:
        by_sets = by_sets.set(k, v)
    at_once = TaskMap(pairs)
    assert list(at_once.items()) == list(by_sets.items()) == list(dict(pairs).items())
    assert at_once == dict(pairs)
    again = pickle.loads(pickle.dumps(at_once))
    assert list(again.items()) == list(at_once.items())
    assert list(again.set("new", 0)) == list(at_once) + ([] if "new" in at_once else ["new"])


def test_missing_keys_raise_and_get_defaults():
    m = TaskMap([("a", 1)])
    for index in (-1, 1):
        try:
            m.key_at(index)
        except IndexError:
            pass
        else:
            raise AssertionError("a position outside the map must raise IndexError")
    assert m.get("b") is None and m.get("b", 2) == 2
    try:
        m["b"]
    except KeyError:
        pass
    else:
        raise AssertionError("a missing key must raise KeyError")


def test_many_sets_fold_the_overlay_and_keep_the_dicts_order():
    """Thousands of sets of new and known keys (the overlay folded into the base many times):
    the same items, order and length as a dict, and a map taken halfway unchanged by the rest."""
    import random
    from core.task_map import MIN_OVERLAY
    rng = random.Random(0)
    reference, m = {}, TaskMap()
    halfway = None
    for i in range(5000):
        k = f"t{rng.randrange(1500)}"
        m = m.set(k, i)
        reference[k] = i
        if i == 2500:
            halfway, halfway_items = m, list(reference.items())
    assert list(m.items()) == list(reference.items()) and len(m) == len(reference)
    assert [m.key_at(i) for i in range(len(m))] == list(reference)
    assert list(halfway.items()) == halfway_items
    assert [halfway.key_at(i) for i in range(len(halfway))] == [k for k, _ in halfway_items]
    assert len(m._overlay) <= MIN_OVERLAY + int(len(m._base) ** 0.5)
