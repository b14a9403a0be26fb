"""core.state.copy_meta: the copy of a learner's JSON-able meta that its state export makes,
against copy.deepcopy on arbitrary JSON trees."""
import copy

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import core
from core.state import copy_meta

from .helpers import basis_tasks

LEAVES = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5)
TREES = st.recursive(LEAVES, lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=4), inner,
                                                                                            max_size=5),
                     max_leaves=40)


def containers(value):
    """Every dict and list of a tree, outermost first."""
    if isinstance(value, dict):
        yield value
        for v in value.values():
            yield from containers(v)
    elif isinstance(value, list):
        yield value
        for v in value:
            yield from containers(v)


@given(TREES)
def test_copy_meta_is_a_deep_copy(tree):
    copied = copy_meta(tree)
    assert copied == copy.deepcopy(tree)
    # no dict or list of the copy is one of the original's: changing the copy leaves it alone
    originals = {id(c) for c in containers(tree)}
    assert not originals & {id(c) for c in containers(copied)}


def test_copy_meta_copies_what_is_not_json():
    arr = np.arange(3.0)
    meta = {"a": arr, "t": (1, [2.0]), "x": np.float64(1.5)}
    copied = copy_meta(meta)
    assert copied["a"] is not arr and np.array_equal(copied["a"], arr)
    copied["t"][1].append(3.0)
    assert meta["t"] == (1, [2.0])
    assert copied["x"] == 1.5


def test_exported_meta_does_not_alias_the_learner():
    learner = core.FCL3(kind="regression")
    for tid, X, y in basis_tasks(n_tasks=4) * 2:
        learner.learn(tid, X, y)
    before = copy.deepcopy(learner.get_state())
    state = learner.get_state()
    exported = [c for meta in (state.meta, *(t["meta"] for t in state.tasks.values())) for c in containers(meta)]
    assert sum(isinstance(c, list) and len(c) > 1 for c in exported) > 10  # the evidence curves among them
    for c in exported:  # emptied, every dict and list
        c.clear()
    after = learner.get_state()
    assert after.meta == before.meta
    assert all(after.tasks[t]["meta"] == before.tasks[t]["meta"] for t in before.tasks)
