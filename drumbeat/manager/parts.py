"""How a manager's parts are built and wired to each other, in one place: first what they
share (:class:`Shared`: the stores opened at the live checkpoint's commits, the budgets,
the scheduler, the counters), then the parts that drive it (:class:`Parts`).

The manager binds the fields of both to attributes of its own once, at its start: its
loop and its per-URL paths look each part up as before, and no part is built anywhere
else (a part's hooks into another, like ``Dispatcher.on_page``, are set here too)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drumbeat.checkpoint import Checkpoints
from drumbeat.frontier.politeness import PolitenessScheduler
from drumbeat.frontier.scope import Scope
from drumbeat.frontier.star import Star, irlbot_budget
from drumbeat.manager.admission import Admission
from drumbeat.manager.checkpointer import Checkpointer
from drumbeat.manager.controls import Controls
from drumbeat.manager.dispatch import EARLY_BELOW_S, Dispatcher
from drumbeat.manager.gate import RobotsGate, robots_admitter
from drumbeat.manager.journal import DIR_NAME as JOURNAL_DIR
from drumbeat.manager.journal import Journal
from drumbeat.manager.pricing import Pricing
from drumbeat.manager.revisiting import Revisiting, journal_visit
from drumbeat.manager.state import LoopState
from drumbeat.manager.stores import Drops, Stores
from drumbeat.manager.tuning import LoopTuning
from drumbeat.queue.base import Inbox, ManagerQueue
from drumbeat.runtime.pace import Pace
from drumbeat.settings import Settings
from drumbeat.stats import History
from drumbeat.store.crawllog import CrawlLog


@dataclass(frozen=True, slots=True)
class Shared:
    """What the manager's parts share: the settings, the stores opened at the live
    checkpoint's commits (if any) and the state every part reads or counts into."""

    settings: Settings
    tuning: LoopTuning
    clock: Callable[[], float]
    state_dir: Path
    checkpoints: Checkpoints
    resume_from: Path | None  # the live checkpoint the stores were opened at
    saved_frontier: Mapping[str, Any] | None  # its frontier state (CheckpointMeta.frontier)
    counters: Counter[str]
    # Seconds spent per stage of the manager's loop, for `drumbeat bench throughput`.
    stage_s: defaultdict[str, float]
    star: Star
    scheduler: PolitenessScheduler
    state: LoopState
    pricing: Pricing
    drops: Drops
    stores: Stores
    started: float  # the clock once the stores are open: the run's start
    # The crawl's history for the dashboard (drumbeat.stats.History), sampled about
    # once a second by the loop and saved with each checkpoint.
    history: History
    # The operator's pause, speed, blocks and checkpoint requests (drumbeat.web).
    controls: Controls
    # Scope rules beyond settings.scope; their caps' counts resume with the checkpoint.
    scope: Scope

    @classmethod
    def open(
        cls,
        s: Settings,
        t: LoopTuning,
        crawl_log: CrawlLog,
        state_dir: Path,
        *,
        clock: Callable[[], float],
        wake: Callable[[], None],
        wake_from_thread: Callable[[], None],
    ) -> Shared:
        """Open the stores at the live checkpoint in ``state_dir`` (or new ones) and build
        what the parts share; ``wake``: wakes the manager's loop (an operator's change),
        ``wake_from_thread`` from another thread (a URL-seen round has merged)."""
        checkpoints = Checkpoints(state_dir)
        resume_from = checkpoints.current()
        meta = None if resume_from is None else checkpoints.read_meta(resume_from)
        counters: Counter[str] = Counter()
        star = _star(s)
        scheduler = _scheduler(s)
        state = LoopState(
            placing=Pace(t.place_share, t.place_budget_s),
            routing=Pace(t.route_share, t.route_budget_s),
        )
        pricing = Pricing(s, star, cache_entries=t.pld_cache_entries)
        drops = Drops(crawl_log, counters)
        stores = Stores.open(
            s,
            meta,
            clock=clock,
            on_indegree=star.observe,
            rebudget=pricing.places,
            budgets_of=pricing.budgets_by_hash,
            admit_for=lambda robots: robots_admitter(robots, drops.drop),
            on_seen_round=wake_from_thread,
        )
        started = clock()
        controls = Controls(state_dir, on_change=wake)
        scope = Scope(s, clock=clock)
        if scope.caps is not None and resume_from is not None:
            scope.caps.load(resume_from)
        return cls(
            settings=s,
            tuning=t,
            clock=clock,
            state_dir=state_dir,
            checkpoints=checkpoints,
            resume_from=resume_from,
            saved_frontier=None if meta is None else meta.frontier,
            counters=counters,
            stage_s=defaultdict(float),
            star=star,
            scheduler=scheduler,
            state=state,
            pricing=pricing,
            drops=drops,
            stores=stores,
            started=started,
            history=History(),
            controls=controls,
            scope=scope,
        )


@dataclass(frozen=True, slots=True)
class Parts:
    """The parts that drive the stores: the robots gate, dispatch, the revisits (none
    without Settings.revisit), admission, the journal (none without Settings.journal)
    and the checkpointer."""

    gate: RobotsGate
    dispatch: Dispatcher
    revisiting: Revisiting | None
    admission: Admission
    journal: Journal | None
    checkpointer: Checkpointer

    @classmethod
    def build(
        cls,
        sh: Shared,
        queue: ManagerQueue,
        crawl_log: CrawlLog,
        *,
        inbox: Inbox | None,
        durables: list[Callable[[], None]],
        journal_syncs: list[Callable[[], None]],
        wake: Callable[[], None],
    ) -> Parts:
        """Build the parts over ``sh`` and hook them to each other; ``inbox``: a cluster
        manager's links from other partitions; ``durables``: flushed and fsynced before
        each checkpoint, ``journal_syncs`` before each journal commit; ``wake``: wakes
        the manager's loop (a DNS answer)."""
        s, t, counters, state = sh.settings, sh.tuning, sh.counters, sh.state
        stores, pricing, scheduler = sh.stores, sh.pricing, sh.scheduler
        gate = RobotsGate(
            s, t, stores, pricing, scheduler, sh.star, state, sh.drops, counters, wake=wake
        )
        dispatch = Dispatcher(
            s, queue, scheduler, gate, state, sh.drops, counters, sh.controls, sh.scope
        )
        revisiting = _revisiting(sh, gate, dispatch)
        admission = Admission(
            s,
            t,
            stores,
            pricing,
            scheduler,
            gate,
            state,
            counters,
            sh.stage_s,
            started=sh.started,
            scope=sh.scope,
        )
        if stores.beast.order.focused:  # a focused crawl: scores order the links
            dispatch.on_focus = admission.focus_links
        journal = _journal(sh, queue, crawl_log, inbox, journal_syncs, revisiting is not None)
        checkpointer = Checkpointer(
            s,
            t,
            sh.checkpoints,
            sh.state_dir,
            queue=queue,
            durables=durables,
            crawl_log=crawl_log,
            stores=stores,
            gate=gate,
            admission=admission,
            pricing=pricing,
            dispatch=dispatch,
            scheduler=scheduler,
            star=sh.star,
            counters=counters,
            clock=sh.clock,
            started=sh.started,
            journal=journal,
            inbox=inbox,
            history=sh.history,
            revisiting=revisiting,
        )
        return cls(gate, dispatch, revisiting, admission, journal, checkpointer)


def _revisiting(sh: Shared, gate: RobotsGate, dispatch: Dispatcher) -> Revisiting | None:
    """Revisits (Settings.revisit), hooked to the pages dispatched and the URLs dropped:
    none at all without them, not even a call a page."""
    if not sh.settings.revisit:
        return None
    beast, pricing = sh.stores.beast, sh.pricing

    def place(records: list[bytes]) -> None:
        """Due revisits into BEAST, rationed by their PLDs' STAR budgets as new URLs are
        (manager.revisiting); not counted as URLs admitted."""
        beast.place_many(records, *pricing.places(records))

    saved = (sh.saved_frontier or {}).get("revisits")
    revisiting = Revisiting(
        sh.settings,
        sh.state_dir,
        saved,
        gate,
        sh.counters,
        place=place,
        in_flight=lambda: dispatch.limit,
    )
    dispatch.on_page = revisiting.on_item
    sh.drops.on_drop = revisiting.on_drop
    return revisiting


def _journal(
    sh: Shared,
    queue: ManagerQueue,
    crawl_log: CrawlLog,
    inbox: Inbox | None,
    syncs: list[Callable[[], None]],
    revisits: bool,
) -> Journal | None:
    """The write-ahead journal (Settings.journal), which records each fetch's visit for
    the revisits' history when there are revisits."""
    if not sh.settings.journal:
        return None
    journal = Journal(
        sh.state_dir / JOURNAL_DIR,
        commit_s=sh.settings.journal_commit_s,
        queue=queue,
        crawl_log=crawl_log,
        syncs=syncs,
        inbox=inbox,
        stage_s=sh.stage_s,
        links_apart=not sh.stores.beast.order.observes_links,
    )
    if revisits:
        journal.visit_of = journal_visit
    return journal


def _star(s: Settings) -> Star:
    """STAR with the settings' budget function (IRLbot §6)."""
    return Star(
        budget=irlbot_budget(s.budget_default, s.budget_max, s.budget_indegree_floor),
        indegree_floor=s.budget_indegree_floor,
        table_size=s.budget_table_plds,
    )


def _scheduler(s: Settings) -> PolitenessScheduler:
    return PolitenessScheduler(
        host_delay_s=s.host_delay_s,
        ip_delay_s=s.ip_delay_s,
        host_delay_min_s=s.host_delay_min_s,
        ip_delay_min_s=s.ip_delay_min_s,
        default_budget=s.budget_default,
        host_connections=s.host_connections,
        early_s=EARLY_BELOW_S,
        pipeline=s.host_pipeline,
    )
