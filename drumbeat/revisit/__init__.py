"""Revisits: keeping a crawled collection fresh (survey §5; Cho & Garcia-Molina).

A crawl with revisits fetches a URL again at a rate chosen for how often it changes. The
parts, each pure and driven by a ``clock`` where it keeps time:

* :mod:`.estimate`: a URL's Poisson change rate from what its visits saw (changed or not,
  at irregular intervals: Cho & Garcia-Molina, "Estimating frequency of change", TOIT
  2003), with pseudo-counts from its site's pooled rate while it has few visits.
* :mod:`.optimal`: the revisit frequencies that maximise the collection's average
  freshness for a revisit bandwidth (Cho & Garcia-Molina, "Synchronizing a database to
  improve freshness", SIGMOD 2000): a common Lagrange multiplier ``mu``; the optimal
  frequency rises then falls with the change rate, and pages that change too fast get none.
* :mod:`.policy`: the threshold rule: each URL's next interval from its own estimate and
  ``mu``, which is re-solved now and then from a hash sample of the URLs (bounded RAM),
  never by touching every URL.
* :mod:`.duequeue`: the due-time queue on disk (a hierarchical timing wheel of
  :class:`~drumbeat.frontier.diskqueue.DiskQueue` segments; RAM fixed by its slot count).
* :mod:`.history`: each fetched URL's compact history (last fetch, payload digest,
  validators, visits, changes seen and the intervals they took), a DRUM keyed by the URL's
  fingerprint whose merge folds visits in.
* :mod:`.revisits`: the three put together for the manager: record a fetch (200 or
  304), plan the next visits, hand out the due ones with their validators.

Floor: crawl logic, above ``frontier`` (it reuses the disk queue) and below the roles.
"""
