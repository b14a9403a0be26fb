"""Experiment and benchmark tools, run from a checkout: ``python -m benchmarks.<name> --help``.

* :mod:`benchmarks.paper`: the paper's Table 2 protocol (tuning, tables, plots);
* :mod:`benchmarks.speed`: single-update time against the number of tasks learned;
* :mod:`benchmarks.service`: the HTTP service against the bare engine (PostgreSQL + Redis);
* :mod:`benchmarks.loadtest`: the load and soak test (several uvicorn processes);
* :mod:`benchmarks.datasets`: the data sets (the synthetic Disjoint generator, the real loaders);
* :mod:`benchmarks.launcher`: the uvicorn launcher shared with the tests;
* :mod:`benchmarks.common`: helpers shared by the above.

Nothing in ``core`` or ``service`` imports this package, and it is not installed with them:
its extra dependencies come with ``pip install -e ".[bench]"``.
"""
