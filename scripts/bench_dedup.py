"""Micro-benchmarks of duplicate detection (drumbeat.store.dedup, drumbeat.parse.simhash).

    flock /work/wt/bench.lock python3 scripts/bench_dedup.py [--keys 1000000,10000000]

Prints, for docs/dedup-bench.txt and docs/benchmarks.md ("Duplicates"):

1. the payload index: pages per second through a fetcher's path (a batch of 50
   looked up in one read transaction, the new ones then added in one write
   transaction), on an index already holding N keys, and its file size;
2. the near-duplicate tables: look-ups (misses and planted hits) and inserts per second
   with N fingerprints stored (bulk-loaded), the process's anonymous and file-backed
   resident memory;
3. the per-page CPU of simhash against find_references on simweb pages, in alternated
   passes;
4. precision and recall of near-duplicate marks on simweb's planted copies, pages in a
   seeded random order through the fetcher's path (find_references(text=True),
   simhash, ContentIndex.near).
"""

from __future__ import annotations

import argparse
import platform
import random
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from drumbeat.parse.links import find_references
from drumbeat.parse.simhash import simhash, simhashes
from drumbeat.simweb import SimWebConfig, SimWebModel
from drumbeat.simweb.render import Renderer
from drumbeat.store.dedup import ContentIndex, table_masks

BATCH = 50


def _rss() -> tuple[int, int]:
    """(anonymous, file-backed) resident bytes of this process."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(("RssAnon:", "RssFile:")):
            key, value = line.split(":")
            fields[key] = int(value.split()[0]) * 1024
    return fields.get("RssAnon", 0), fields.get("RssFile", 0)


def _digests(start: int, n: int) -> list[str]:
    return [
        f"sha1:{i * 0x9E3779B97F4A7C15 % (1 << 64):016X}ABCDEFGHIJKLMNOP"
        for i in range(start, start + n)
    ]


def bench_payloads(work: Path, keys: int) -> None:
    path = work / f"payload-{keys}"
    date = "2026-11-27T17:00:00.123456Z"
    with ContentIndex(path, max_bytes=1 << 36) as index:
        started = time.perf_counter()
        for start in range(0, keys, 1000):
            index.add_payloads(
                [(d, f"http://h{start}.test/p/{start}", date) for d in _digests(start, 1000)]
            )
        load_s = time.perf_counter() - started
        rng = random.Random(1)
        batches = 400
        started = time.process_time()
        for _ in range(batches):
            new = rng.randrange(keys, 1 << 40)
            old = [rng.randrange(keys) for _ in range(BATCH // 5)]
            entries = [(d, "http://x.test/", date) for d in _digests(new, BATCH - len(old))]
            entries += [(_digests(i, 1)[0], "http://y.test/", date) for i in old]
            # The fetcher's path: look up the batch, then record the new payloads.
            found = index.find_payloads([digest for digest, _, _ in entries])
            index.add_payloads([e for e, f in zip(entries, found) if f is None])
        cpu = time.process_time() - started
        anon, file_ = _rss()
        size = index.stats().file_bytes
    print(
        f"payload index, {keys:>11,} keys: loaded at {keys / load_s:,.0f} inserts/s; "
        f"{batches * BATCH / cpu:,.0f} look-ups+inserts/s in batches of {BATCH} "
        f"(1 in 5 a copy), {cpu / (batches * BATCH) * 1e6:.1f} µs CPU a page; "
        f"file {size / keys:.0f} B/key; RSS anon {anon >> 20} MiB, file {file_ >> 20} MiB"
    )
    shutil.rmtree(path)


def bench_near(work: Path, n: int) -> None:
    import lmdb

    path = work / f"near-{n}"
    rng = np.random.default_rng(2)
    prints = rng.integers(0, 1 << 63, size=n, dtype=np.uint64) * np.uint64(2) + rng.integers(
        0, 2, size=n, dtype=np.uint64
    )
    masks = table_masks(4, 3)
    started = time.perf_counter()
    # Bulk load, in the format ContentIndex writes (see drumbeat.store.dedup).
    with ContentIndex(path, max_bytes=1 << 36):
        pass
    env = lmdb.open(
        str(path), map_size=1 << 36, max_dbs=4, sync=False, metasync=False, writemap=True
    )
    near, near_url = env.open_db(b"near"), env.open_db(b"near_url")
    with env.begin(write=True) as txn:
        for t, mask in enumerate(masks):
            keys = prints & np.uint64(mask)
            order = np.argsort(keys, kind="stable")
            sorted_keys, sorted_prints = keys[order], prints[order]
            bounds = np.flatnonzero(np.diff(sorted_keys)) + 1
            starts = np.concatenate(([0], bounds))
            ends = np.concatenate((bounds, [n]))
            for s, e in zip(starts.tolist(), ends.tolist()):
                key = bytes((t,)) + int(sorted_keys[s]).to_bytes(8, "big")
                txn.put(key, sorted_prints[s:e].astype("<u8").tobytes(), db=near, append=False)
        cursor = txn.cursor(db=near_url)
        big_endian = np.sort(prints).astype(">u8")
        cursor.putmulti(
            ((big_endian[i : i + 1].tobytes(), b"http://h.test/%d" % i) for i in range(n)),
            append=True,
        )
    env.close()
    load_s = time.perf_counter() - started
    picks = prints[rng.integers(0, n, size=5000)].tolist()
    del prints, keys, order, sorted_keys, sorted_prints, bounds, starts, ends, big_endian
    anon_before, _ = _rss()
    with ContentIndex(path, max_bytes=1 << 36) as index:
        queries = rng.integers(0, 1 << 63, size=20_000, dtype=np.uint64).tolist()
        started = time.process_time()
        for i in range(0, len(queries), BATCH):
            index.near([(q, "http://q.test/") for q in queries[i : i + BATCH]])
        miss_cpu = (time.process_time() - started) / len(queries)
        # Planted: stored fingerprints with 3 bits flipped.
        planted = []
        for p in picks:
            for bit in random.Random(p).sample(range(64), 3):
                p ^= 1 << bit
            planted.append(p)
        started = time.process_time()
        hits = 0
        for i in range(0, len(planted), BATCH):
            hits += sum(
                r is not None
                for r in index.near([(q, "http://q.test/") for q in planted[i : i + BATCH]])
            )
        hit_cpu = (time.process_time() - started) / len(planted)
        anon, file_ = _rss()
        size = index.stats().file_bytes
    print(
        f"near tables (4 x 16 bits), {n:>11,} fingerprints (bulk-loaded in {load_s:.0f} s): "
        f"{1 / miss_cpu:,.0f} look-ups+inserts/s of new pages ({miss_cpu * 1e6:.1f} µs CPU), "
        f"{1 / hit_cpu:,.0f} look-ups/s of near copies ({hits}/{len(planted)} found); "
        f"file {size / n:.0f} B/fingerprint; RSS anon +{(anon - anon_before) >> 20} MiB "
        f"while querying, file {file_ >> 20} MiB"
    )
    shutil.rmtree(path)


def _simweb_pages(config: SimWebConfig) -> list[tuple[str, bytes]]:
    model = SimWebModel(config)
    render = Renderer(model)
    pages = []
    for host in model.hosts:
        for path in model.paths(host.name):
            page = model.page(host.name, path)
            if page.kind == "html" and page.status == 200:
                pages.append((page.url, render.body(page)))
    return pages


def bench_simhash_cost() -> None:
    pages = _simweb_pages(SimWebConfig(hosts=40, pages_per_host=12))
    texts = [find_references(body, url, text=True).text or "" for url, body in pages]
    batch = 32
    print(f"CPU a page ({len(pages)} simweb pages of ~20 KB), alternated passes:")
    for _ in range(4):
        times = []
        for step in (
            lambda: [find_references(body, url) for url, body in pages],
            lambda: [find_references(body, url, text=True) for url, body in pages],
            lambda: [simhash(text) for text in texts],
            lambda: [simhashes(texts[i : i + batch]) for i in range(0, len(texts), batch)],
        ):
            started = time.process_time()
            step()
            times.append((time.process_time() - started) / len(pages) * 1e6)
        refs, with_text, one, batched = times
        print(
            f"  find_references {refs:6.1f} µs, with text {with_text:6.1f} µs; simhash page "
            f"by page {one:6.1f} µs, in batches of {batch} {batched:6.1f} µs"
        )


def bench_precision(work: Path) -> None:
    config = SimWebConfig(seed=5, hosts=60, pages_per_host=10, duplicate_articles=5)
    model = SimWebModel(config)
    pages = _simweb_pages(config)
    random.Random(3).shuffle(pages)
    fetched = {url for url, _ in pages}
    marks: dict[str, str] = {}
    with ContentIndex(work / "precision", max_bytes=1 << 30) as index:
        entries = []
        for url, body in pages:
            fingerprint = simhash(find_references(body, url, text=True).text or "")
            if fingerprint is not None:
                entries.append((fingerprint, url))
        for (_, url), earlier in zip(entries, index.near(entries)):
            if earlier is not None:
                marks[url] = earlier

    def article(url: str) -> str | None:
        host, _, path = url.split("://", 1)[1].partition("/")
        return model.page(host.split(":")[0], "/" + path).article

    correct = sum(article(u) is not None and article(u) == article(e) for u, e in marks.items())
    # Marks expected: in each article, every page after the first of its distinct
    # contents... the exact copy is a revisit in a crawl, so only the near copy's pair
    # counts: one mark per article (near copy against the original or copy, or back).
    articles: dict[str, set[str]] = {}
    for url in fetched:
        a = article(url)
        if a is not None:
            articles.setdefault(a, set()).add(url)
    found = 0
    for urls in articles.values():
        near = [u for u in urls if u.endswith("-print.html")]
        same = urls - set(near)
        pair = any(
            (u in near and marks.get(u) in same) or (u in same and marks.get(u) in near)
            for u in urls
        )
        found += pair
    exact = sum(
        1
        for u, e in marks.items()
        if article(u) == article(e) and not (u.endswith("-print.html") or e.endswith("-print.html"))
    )
    print(
        f"near-duplicate marks on simweb ({len(pages)} HTML pages, {len(articles)} articles "
        f"planted as original + exact copy + near copy): {len(marks)} marks, "
        f"precision {correct / max(1, len(marks)):.3f}; recall of the near pairs "
        f"{found / len(articles):.3f} ({found}/{len(articles)}); exact pairs marked "
        f"{exact} (revisits in a crawl)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", default="1000000,10000000", help="index sizes, comma-separated")
    parser.add_argument("--skip", default="", help="parts to skip: payload,near,cost,precision")
    args = parser.parse_args()
    sizes = [int(k) for k in args.keys.split(",")]
    skip = set(args.skip.split(","))
    cpu = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.startswith("model name")
        ),
        platform.processor(),
    )
    print(f"# scripts/bench_dedup.py on {cpu}, Python {platform.python_version()}")
    with tempfile.TemporaryDirectory(prefix="bench-dedup-") as tmp:
        work = Path(tmp)
        if "cost" not in skip:
            bench_simhash_cost()
        if "precision" not in skip:
            bench_precision(work)
        for n in sizes:
            if "payload" not in skip:
                bench_payloads(work, n)
            if "near" not in skip:
                bench_near(work, n)


if __name__ == "__main__":
    main()
