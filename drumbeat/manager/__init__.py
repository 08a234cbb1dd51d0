"""The crawl manager: owns all crawl state and decides what is fetched when.

The flow of a URL (IRLbot Fig. 2; ARCHITECTURE.md):

    links -> normalize -> scope -> URL-seen (DRUM) -> STAR budget -> BEAST queues (disk)
      -> robots check (RAM LRU, else RobotsCache DRUM) -- no rules yet --> QR (disk)
         |                                                 origin -> RobotsRequested (DRUM)
         |                                                 new -> robots-to-fetch queue (disk)
         v allowed                                         -> DNS + robots.txt -> QR replay
      politeness scheduler (RAM, host and IP heaps) -> FetchItems in Tasks for the fetchers

URLs enter RAM only as fast as they are fetched: BEAST is read when the scheduler holds
fewer than ``frontier_ram_urls`` URLs, so RAM stays bounded whatever the disk queues hold.

Everything the manager knows is saved by periodic checkpoints (see ``checkpoint.py``): the
DRUMs' and disk queues' commits, plus the URLs held in RAM. Items handed to fetchers but not
reported by checkpoint time are saved as queued, so a crash loses no URL. The fetches
completed after it are in the write-ahead journal (``journal.py``), replayed on top of it
at a restart: only pages in flight or done in the last group commit are fetched again.

The parts, each with one job (Scrapy's engine composes a scheduler and a downloader the
same way):

- ``stores.Stores``: every disk structure, opened once at the live checkpoint's commits
  into one frozen object; ``stores.Drops`` records the URLs given up on.
- ``pricing.Pricing``: what a URL's scheme://authority tells (PLD, STAR budget, BEAST's
  host key, origin, host), and the seeds.
- ``admission.Admission``: URL-seen -> STAR -> BEAST (and the PLD graph's steps).
- ``gate.RobotsGate``: BEAST and QR -> robots rules -> the politeness scheduler; robots.txt
  work and DNS of new hosts; ``gate.robots_admitter`` is BEAST's robots filter.
- ``dispatch.Dispatcher``: ready hosts -> tasks for the fetchers; results back to hosts.
- ``checkpointer.Checkpointer``: commits and checkpoint files, and the presync before;
  at a restart, the live checkpoint loaded back and the journal replayed on top.
- ``journal.Journal``: group commits of completed fetches between checkpoints.
- ``parts``: builds them and wires them to each other (``parts.Shared``: what they
  share; ``parts.Parts``: the parts that drive it).
- ``core.Manager``: holds them and drives them in turns (take new URLs, feed, dispatch,
  collect, checkpoint); ``state.LoopState`` is what they share of the loop's state, and
  ``tuning.LoopTuning`` the loop's tuning.

Per-URL paths bind what they use to attributes or locals of their part, so a part adds no
lookup per URL over the single class it came from.
"""

from drumbeat.frontier.star import pld_hash
from drumbeat.manager.core import Manager, ManagerStats
from drumbeat.manager.stores import beast_host_cap
from drumbeat.manager.tuning import TUNING, LoopTuning

__all__ = ["TUNING", "LoopTuning", "Manager", "ManagerStats", "beast_host_cap", "pld_hash"]
