"""benchmarks.family_choice: the choice recomputed from recorded margins at other thresholds."""
from benchmarks.family_choice import chosen, family_report, multilevel_ratios
from core import FCL3


def _report(lead, se, family="population"):
    return {"family": family, "default": "population", "references": ["population", "ridge"], "threshold": 1.03,
            "margins": {"population": {"lead": 0.0, "se": 0.0}, "ridge": {"lead": 5.0, "se": 1.0},
                        "mixture": {"lead": lead, "se": se}},
            "errors": {"population": 1.0, "ridge": 1.2, "mixture": 0.9}}


def test_a_family_is_chosen_only_beyond_the_threshold_and_never_a_reference_by_its_lead():
    assert chosen(_report(1.5, 1.0), 1.03) == "mixture"
    assert chosen(_report(1.0, 1.0), 1.03) == "population"
    assert chosen(_report(-0.1, 1.0), 0.0) == "population"  # behind: never
    assert chosen(_report(0.1, 1.0), 0.0) == "mixture"


def test_the_multilevel_ratios_follow_the_recomputed_choice():
    seed = {"learner": {"family_choice": _report(1.5, 1.0)},
            "baselines": {"per_task": {"error": 1.5}, "pooled": {"error": 1.0}, "mixed": {"error": 0.9}}}
    result = {"datasets": {"s": {"seeds": {"0": seed}}}}
    assert multilevel_ratios(result, 2.0)["s"]["best"] == 1.0 / 0.9
    assert multilevel_ratios(result, 1.0)["s"]["best"] == 0.9 / 0.9


def test_the_report_of_a_learner_is_its_margins_and_each_familys_error():
    import numpy as np

    rng = np.random.default_rng(0)
    m = FCL3()
    for t in range(8):
        m.learn(f"t{t}", rng.normal(size=(5, 2)), rng.normal(size=5))
    report = family_report(m, lambda model: float(len(model.task_family())))
    assert report["family"] == m.task_family()
    assert report["errors"] == {f: float(len(f)) for f in report["margins"]} or list(report["errors"]) == [m.task_family()]
    assert family_report(FCL3(task_models="paper")) is None
