"""Markdown tables and the task-order figure from the JSON of ``python -m benchmarks.paper``::

    python -m benchmarks.paper_report docs/results/table2_{disjoint,parkinson,school,landmine}.json
           [--order-plot docs/figures/task_order.png] [--json tables.json] [--quiet]

Prints Table 2 (mean ± s.e. per model and data set), the paired tests of FCL3-Rand against
every other model (t-test and Wilcoxon p-values, the runs FCL3-Rand wins) and, for runs with
``--orders``, the task-order table (each order variant against its family's random order).
``--json`` writes the same figures per data set (means, standard errors, tests).
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .common import matplotlib_pyplot
from .paper import MODELS, ORDER_MODELS, _p, finish, save_figure

#: The orders of the task-order figure, left to right, and the models that show them.
ORDERS = {"Rand": ("FCL3-Rand", "ELLA-Rand"), "OneByOne": ("FCL3-OneByOne", "ELLA-OneByOne"),
          "Adversarial": ("FCL3-Adversarial", "ELLA-Adversarial"), "Info": (None, "ELLA-Info")}


def _digits(summary: dict[str, Any]) -> int:
    return 3 if summary["metric"] == "rmse" and max(e["mean"] for e in summary["models"].values()) < 20 else 2


def _cell(summary: dict[str, Any], model: str) -> str:
    e = summary["models"].get(model)
    if e is None:
        return "–"
    n = _digits(summary)
    return f"{e['mean']:.{n}f} ± {e['se']:.{n}f}"


def _title(summary: dict[str, Any]) -> str:
    return f"{summary['dataset'].capitalize()} {'RMSE' if summary['metric'] == 'rmse' else 'AUC %'}"


def table2(summaries: list[dict[str, Any]]) -> str:
    models = [m for m in MODELS if m not in ORDER_MODELS and any(m in s["models"] for s in summaries)]
    lines = ["| model | " + " | ".join(_title(s) for s in summaries) + " |", "|---" * (len(summaries) + 1) + "|"]
    for m in models:
        lines.append(f"| {m} | " + " | ".join(_cell(s, m) for s in summaries) + " |")
    return "\n".join(lines)


def p_values(summaries: list[dict[str, Any]]) -> str:
    ref = summaries[0]["significance"]["reference"]
    models = [m for m in MODELS if m not in ORDER_MODELS and m != ref
              and any(m in s["models"] for s in summaries)]
    lines = [f"| {ref} against | " + " | ".join(_title(s).split()[0] for s in summaries) + " |",
             "|---" * (len(summaries) + 1) + "|"]
    for m in models:
        cells = []
        for s in summaries:
            t = (s.get("significance") or {}).get("tests", {}).get(m)
            cells.append("–" if t is None else f"{_p(t['t_p'])} / {_p(t['wilcoxon_p'])} ({t['wins']}/{t['n']})")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def order_table(summaries: list[dict[str, Any]]) -> str:
    lines = ["| data set | model | Rand | OneByOne | Adversarial | Info |", "|---|---|---|---|---|---|"]
    for s in summaries:
        for family in ("FCL3", "ELLA"):
            cells = []
            for order, pair in ORDERS.items():
                m = pair[0] if family == "FCL3" else pair[1]
                if m is None or m not in s["models"]:
                    cells.append("–")
                    continue
                t = s.get("order_tests", {}).get(f"{m} vs {family}-Rand")
                cells.append(_cell(s, m) + ("" if t is None else f" (p {_p(t['t_p'])} / {_p(t['wilcoxon_p'])})"))
            lines.append(f"| {_title(s)} | {family} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def order_plot(summaries: list[dict[str, Any]], path: str) -> str:
    """One panel per data set: FCL3's and ELLA's test error per task order (mean ± s.e.)."""
    plt = matplotlib_pyplot()
    fig, axes = plt.subplots(1, len(summaries), figsize=(3.6 * len(summaries), 3.6), squeeze=False)
    for ax, s in zip(axes[0], summaries):
        for k, (family, color, shift) in enumerate((("FCL3", "C3", -0.08), ("ELLA", "C0", 0.08))):
            xs, ms, ses = [], [], []
            for i, pair in enumerate(ORDERS.values()):
                m = pair[k]
                if m is not None and m in s["models"]:
                    xs.append(i + shift)
                    ms.append(s["models"][m]["mean"])
                    ses.append(s["models"][m]["se"])
            ax.errorbar(xs, ms, yerr=ses, fmt="o", color=color, capsize=3, label=family)
        ax.set_xticks(range(len(ORDERS)))
        ax.set_xticklabels(list(ORDERS), fontsize=8)
        ax.set_title(f"{s['dataset']} ({s['runs']} runs)", fontsize=10)
        ax.set_ylabel("test RMSE" if s["metric"] == "rmse" else "test AUC %")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle("Task order: FCL3 and ELLA, same splits and tuning per run (mean ± s.e.; "
                 "RMSE lower is better, AUC higher)", fontsize=10)
    return save_figure(plt, fig, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.paper_report", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+", help="JSON files of python -m benchmarks.paper")
    ap.add_argument("--order-plot", help="write the task-order figure here (PNG)")
    ap.add_argument("--json", dest="json_out", help="write each data set's means, standard errors and tests here")
    ap.add_argument("--quiet", action="store_true", help="print no tables (only the files written)")
    args = ap.parse_args(argv)
    summaries = []
    for path in args.results:
        with open(path) as fh:
            summaries.append(json.load(fh))
    if not all(s.get("significance") for s in summaries):
        print("error: every JSON must come from a run with FCL3-Rand (the tests' reference)", file=sys.stderr)
        return 2
    runs = sorted({s["runs"] for s in summaries})
    report = [f"Table 2 ({', '.join(map(str, runs))} runs, mean ± s.e.):\n\n{table2(summaries)}\n",
              f"Paired tests, p-values t-test / Wilcoxon (runs {summaries[0]['significance']['reference']} wins):"
              f"\n\n{p_values(summaries)}\n"]
    if any(s.get("order_tests") for s in summaries):
        report.append(f"Task order (p: against the family's Rand, t-test / Wilcoxon):\n\n{order_table(summaries)}")
    tables = [{"dataset": s["dataset"], "metric": s["metric"], "runs": s["runs"],
               "models": {m: {"mean": e["mean"], "se": e["se"]} for m, e in s["models"].items()},
               "significance": s["significance"], "order_tests": s.get("order_tests", {})} for s in summaries]
    return finish(tables, "" if args.quiet else "\n".join(report), args.json_out,
                  args.order_plot and (lambda: [order_plot(summaries, args.order_plot)]))

if __name__ == "__main__":
    raise SystemExit(main())
