"""The chaos soak: a town under concurrent load and kill -9, checked against its own history.

``benchmarks/soak.py`` is the entry point; the parts live here:

* :mod:`soak.build`      the town: three rigs (one a read-only beads export) and random items;
* :mod:`soak.polecat`    the polecat program the executor launches (it writes who it is and when);
* :mod:`soak.workers`    slinger, tracker and controller loops (each a process of its own);
* :mod:`soak.history`    the append-only history logs every process keeps;
* :mod:`soak.supervisor` starts, samples, kills (the chaos), restarts and stops everything;
* :mod:`soak.invariants` the checks made from the history and the files after the run.
"""
