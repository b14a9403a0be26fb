"""How the stream's family was chosen on every data set, and what each family would have given.

The suites (``benchmarks.multilevel``, ``benchmarks.robustness``) record for every seed the
learner's :meth:`core.LifelongLearner.family_margins` and, with ``--family-scan``, each
family's held-out error (:meth:`core.LifelongLearner.with_task_family`, everything learned the
same). This module reads their JSON and recomputes the choice for other thresholds ``z`` than
the learner's (:func:`core.evidence.selection_threshold`), with the suites' own criteria: which
data sets a threshold decides, and over which range of ``z`` every choice is the same.

    python -m benchmarks.family_choice multilevel.json robustness.json --z 0,0.5,1,1.5,2
"""
from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

import numpy as np


def family_report(model, error: Callable[[Any], float] | None = None) -> dict[str, Any] | None:
    """``model.family_margins()`` (``None`` for a learner without a stream choice) and, given
    ``error`` (a learned model -> its held-out error), every family's error when forced."""
    try:
        report = model.family_margins()
    except (AttributeError, ValueError):
        return None
    if error is not None:
        report["errors"] = {f: float(error(model.with_task_family(f))) for f in report["margins"] or
                            [report["family"]]}
    return report


def chosen(report: dict[str, Any], z: float) -> str:
    """The family :func:`core.evidence.prequential_family` picks from the recorded margins with
    threshold ``z``: the non-reference family furthest ahead by more than ``z`` standard errors,
    else the default."""
    ahead = {f: m["lead"] for f, m in report["margins"].items()
             if f not in report["references"] and m["lead"] > max(z * m["se"], 0.0)}
    return max(ahead, key=ahead.get) if ahead else report["default"]


def _geometric_mean(values) -> float:
    return float(np.exp(np.mean(np.log(np.asarray(values, dtype=float)))))


def multilevel_ratios(result: dict[str, Any], z: float) -> dict[str, dict[str, float]]:
    """Per data set, the learner's ratios to the best baseline, per-task and pooled (geometric
    means over seeds, as the suite's table) had the family been chosen with threshold ``z``."""
    out = {}
    for name, entry in result["datasets"].items():
        ratios: dict[str, list[float]] = {"best": [], "per_task": [], "pooled": []}
        for seed in entry["seeds"].values():
            report = seed["learner"].get("family_choice")
            if not report or "errors" not in report:
                break
            err = report["errors"][chosen(report, z)]
            base = {b: seed["baselines"][b]["error"] for b in ("per_task", "pooled", "mixed")}
            ratios["best"].append(err / min(base.values()))
            ratios["per_task"].append(err / base["per_task"])
            ratios["pooled"].append(err / base["pooled"])
        else:
            out[name] = {k: _geometric_mean(v) for k, v in ratios.items()}
    return out


def robustness_ratios(result: dict[str, Any], z: float, model: str = "FCL3") -> dict[str, float]:
    """Per family of streams, ``model``'s ratio to tuned per-task learning (geometric mean over
    seeds) had the stream's family been chosen with threshold ``z``."""
    out = {}
    for name, entry in result["families"].items():
        ratios = []
        for seed in entry["seeds"].values():
            report = (seed["models"].get(model) or {}).get("family_choice")
            if not report or "errors" not in report:
                break
            ratios.append(report["errors"][chosen(report, z)])
        else:
            out[name] = _geometric_mean(ratios)
    return out


def z_table(multilevel: dict | None, robustness: dict | None, zs: list[float]) -> str:
    """A markdown table: for every ``z``, each criterion of the two suites and the data sets
    that fail it."""
    from .robustness import CRITERIA, _families

    tags = {name: fam.tags for name, fam in _families().items()}
    lines = ["| z | multilevel: worst / best (set) | fails | robustness: " +
             " | ".join(label for _, label, _, _, _ in CRITERIA) + " |",
             "|---|---|---|" + "---|" * len(CRITERIA)]
    for z in zs:
        cells = [f"{z:g}"]
        if multilevel:
            r = multilevel_ratios(multilevel, z)
            worst = max(r, key=lambda n: r[n]["best"])
            fails = [n for n, v in r.items() if v["best"] > 1.02 or v["per_task"] > 1.0 or v["pooled"] > 1.0]
            cells += [f"{r[worst]['best']:.3f} ({worst})", ", ".join(fails) or "none"]
        else:
            cells += ["", ""]
        if robustness:
            r2 = robustness_ratios(robustness, z)
            for _, _, stat, select, threshold in CRITERIA:
                vals = [v for n, v in r2.items() if n in tags and select(tags[n])]
                value = (max(vals) if stat == "max" else float(np.median(vals))) if vals else float("nan")
                cells.append(f"{value:.3f}{'' if value <= threshold else ' (fails)'}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.family_choice", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+", help="JSON of benchmarks.multilevel and/or benchmarks.robustness "
                    "run with --family-scan")
    ap.add_argument("--z", default="0,0.25,0.5,0.75,1,1.25,1.5,2", help="comma-separated thresholds")
    ap.add_argument("--json", dest="json_out", help="write every threshold's ratios per data set here")
    ap.add_argument("--quiet", action="store_true", help="print no table (only the file written)")
    args = ap.parse_args(argv)
    results = [json.load(open(p)) for p in args.results]
    multilevel = next((r for r in results if r.get("suite") == "multilevel"), None)
    robustness = next((r for r in results if "families" in r), None)
    zs = [float(z) for z in args.z.split(",")]
    if not args.quiet:
        print(z_table(multilevel, robustness, zs))
    if args.json_out:
        out = {str(z): {"multilevel": multilevel_ratios(multilevel, z) if multilevel else None,
                        "robustness": robustness_ratios(robustness, z) if robustness else None} for z in zs}
        with open(args.json_out, "w") as fh:
            json.dump(out, fh, indent=1)
        print(f"wrote {args.json_out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
