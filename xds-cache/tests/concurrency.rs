//! Caches under concurrent writers and many watching streams: no lost signal, no slow-down from a
//! stream that stopped reading. Every wait is bounded: a lost signal fails, it does not hang.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

mod util;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use util::*;
use xds_cache::{LinearCache, Snapshot, SnapshotCache, Variant};
use xds_proto::pb::envoy::config::cluster::v3::Cluster;

const WRITERS: usize = 4;
const NAMES_PER_WRITER: usize = 25;
const OPS_PER_WRITER: usize = 1500;
const BOUND: Duration = Duration::from_secs(60);

type Held = BTreeMap<String, String>;

/// A small deterministic PRNG (xorshift64*), one per writer.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn owned_name(writer: usize, k: usize) -> String {
    format!("w{writer}-{k:02}")
}

/// What every writer leaves behind: its even names at version "final", its odd names deleted.
/// "final" is never written before a writer's last phase, so a watcher holding exactly this has
/// seen the end.
fn final_content(writers: impl Iterator<Item = usize>) -> Held {
    writers
        .flat_map(|w| (0..NAMES_PER_WRITER).step_by(2).map(move |k| owned_name(w, k)))
        .map(|name| {
            let version = enc(&cluster(&name, "final")).version().to_owned();
            (name, version)
        })
        .collect()
}

/// A stream's loop: read, poll, ACK until nothing is owed; stop at `expected`; else wait for the
/// signal (and only for it: a lost signal leaves the stream waiting, and the test times out).
async fn converge(mut client: DeltaClient, expected: Arc<Held>) -> Held {
    let _ = client.request(&[], &[]);
    let mut held = Held::new();
    loop {
        while let Some(r) = client.poll() {
            apply_delta(&mut held, &r);
            let _ = client.ack(&r);
        }
        if held == *expected {
            return held;
        }
        client.signal.raised().await;
    }
}

async fn join_all<T>(tasks: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_lost_signal_with_linear_writers_and_50_delta_watchers() {
    let cache = LinearCache::of::<Cluster>();
    let expected = Arc::new(final_content(0..WRITERS));
    let watchers: Vec<_> = (0..50)
        .map(|i| {
            let client = DeltaClient::open(&cache, &node(&format!("n{i}")), CDS);
            tokio::spawn(converge(client, expected.clone()))
        })
        .collect();

    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let cache = cache.clone();
            thread::spawn(move || {
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (w as u64 + 1));
                for op in 0..OPS_PER_WRITER {
                    let name = owned_name(w, rng.below(NAMES_PER_WRITER));
                    if rng.below(10) < 7 {
                        cache.upsert(&cluster(&name, &format!("{op}"))).unwrap();
                    } else {
                        cache.delete(&name);
                    }
                }
                for k in 0..NAMES_PER_WRITER {
                    if k % 2 == 0 {
                        cache.upsert(&cluster(&owned_name(w, k), "final")).unwrap();
                    } else {
                        cache.delete(&owned_name(w, k));
                    }
                }
            })
        })
        .collect();

    let results = tokio::time::timeout(BOUND, join_all(watchers))
        .await
        .expect("every watcher reaches the final content (a lost signal would hang one)");
    for w in writers {
        w.join().unwrap();
    }
    assert_eq!(versions(&cache.resources()), *expected);
    assert_eq!(results.len(), 50);
    for held in results {
        assert_eq!(held, *expected);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_lost_signal_with_set_snapshot_writers_and_48_delta_watchers() {
    let cache = SnapshotCache::by_node_id();
    // Writer w owns group "g{w}"; 12 watchers per group, opened before any snapshot exists.
    let watchers: Vec<_> = (0..48)
        .map(|i| {
            let w = i % WRITERS;
            let client = DeltaClient::open(&cache, &node(&format!("g{w}")), CDS);
            tokio::spawn(converge(client, Arc::new(final_content(w..w + 1))))
        })
        .collect();

    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let cache = cache.clone();
            thread::spawn(move || {
                let group = format!("g{w}");
                let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ (w as u64 + 7));
                let mut b = Snapshot::builder();
                for op in 0..OPS_PER_WRITER / 5 {
                    for _ in 0..3 {
                        let name = owned_name(w, rng.below(NAMES_PER_WRITER));
                        if rng.below(10) < 7 {
                            b.add(&cluster(&name, &format!("{op}"))).unwrap();
                        } else {
                            b.remove(&url(CDS), &name);
                        }
                    }
                    cache.set_snapshot(&group, b.build_unchecked());
                }
                for k in 0..NAMES_PER_WRITER {
                    if k % 2 == 0 {
                        b.add(&cluster(&owned_name(w, k), "final")).unwrap();
                    } else {
                        b.remove(&url(CDS), &owned_name(w, k));
                    }
                }
                cache.set_snapshot(&group, b.build_unchecked());
            })
        })
        .collect();

    let results = tokio::time::timeout(BOUND, join_all(watchers))
        .await
        .expect("every watcher reaches its group's final content");
    for w in writers {
        w.join().unwrap();
    }
    for (i, held) in results.into_iter().enumerate() {
        let group = format!("g{}", i % WRITERS);
        let served = cache.snapshot(&group).unwrap();
        assert_eq!(held, versions(served.resources(&url(CDS))), "{group}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_watcher_does_not_delay_100_live_ones() {
    let cache = LinearCache::of::<Cluster>();
    cache.upsert(&cluster("x", "0")).unwrap();
    // Registered, never awaited, never read.
    let (_dead_watch, dead_signal) =
        open(&cache, &node("dead"), &url(CDS), Variant::Delta).unwrap();

    let seen: Vec<Arc<AtomicU32>> = (0..100).map(|_| Arc::new(AtomicU32::new(0))).collect();
    let live: Vec<_> = seen
        .iter()
        .enumerate()
        .map(|(i, seen)| {
            let seen = seen.clone();
            let mut client = DeltaClient::open(&cache, &node(&format!("n{i}")), CDS);
            tokio::spawn(async move {
                let _ = client.request(&["x"], &[]);
                loop {
                    while let Some(r) = client.poll() {
                        for e in &r.resources {
                            if let xds_core::DeltaResource::Present { resource, .. } = e {
                                let c: Cluster = resource.decode().unwrap();
                                seen.store(c.alt_stat_name.parse().unwrap(), Ordering::Release);
                            }
                        }
                        let _ = client.ack(&r);
                    }
                    client.signal.raised().await;
                }
            })
        })
        .collect();

    let started = Instant::now();
    for generation in 1..=50u32 {
        cache.upsert(&cluster("x", &generation.to_string())).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while seen.iter().any(|s| s.load(Ordering::Acquire) != generation) {
            assert!(
                Instant::now() < deadline,
                "generation {generation} reached every live watcher"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    let elapsed = started.elapsed();
    for task in live {
        task.abort();
    }
    assert!(elapsed < Duration::from_secs(30), "50 updates took {elapsed:?}");
    // Fifty raises while nobody waited are one pending wake-up: nothing queued per update.
    assert!(take_raised(&dead_signal));
    assert!(!take_raised(&dead_signal));
}

#[test]
fn a_dead_watch_costs_one_signal_per_update_not_more_over_time() {
    let cache = LinearCache::of::<Cluster>();
    let (_dead_watch, _dead_signal) =
        open(&cache, &node("dead"), &url(CDS), Variant::Sotw).unwrap();
    let time = |from: usize, n: usize| {
        let start = Instant::now();
        for i in from..from + n {
            cache.upsert(&cluster("x", &i.to_string())).unwrap();
        }
        start.elapsed()
    };
    let early = time(0, 2_000);
    let _ = time(2_000, 20_000);
    let late = time(22_000, 2_000);
    assert!(late < early * 5 + Duration::from_millis(50), "early {early:?}, late {late:?}");
    assert_eq!(cache.len(), 1);
}

// ---- races between a group's last watch going away and its use ----

const RACES: usize = 20_000;

#[test]
fn a_first_set_snapshot_racing_the_last_watch_drop_is_not_lost() {
    let cache = SnapshotCache::by_node_id();
    // A stream of the current group comes and goes, again and again, while it gets its first
    // snapshot.
    let current = Arc::new(AtomicUsize::new(0));
    let churn = {
        let (cache, current) = (cache.clone(), current.clone());
        thread::spawn(move || {
            loop {
                let i = current.load(Ordering::Acquire);
                if i == RACES {
                    return;
                }
                drop(open(&cache, &node(&format!("g{i}")), &url(CDS), Variant::Sotw).unwrap());
            }
        })
    };
    let mut lost = Vec::new();
    for i in 0..RACES {
        let group = format!("g{i}");
        thread::yield_now();
        cache.set_snapshot(
            &group,
            Snapshot::builder().add(&cluster("a", "1")).unwrap().build_unchecked(),
        );
        // A group with a snapshot is never forgotten, so this is a lost update.
        if cache.snapshot(&group).is_none() {
            lost.push(group);
        }
        current.store(i + 1, Ordering::Release);
    }
    churn.join().unwrap();
    assert!(
        lost.is_empty(),
        "set_snapshot lost for {} groups, e.g. {:?}",
        lost.len(),
        lost.first()
    );
}

#[test]
fn a_watch_opened_while_its_group_is_forgotten_still_gets_snapshots() {
    let cache = SnapshotCache::by_node_id();
    let barrier = Arc::new(Barrier::new(2));
    let dropper = {
        let (cache, barrier) = (cache.clone(), barrier.clone());
        thread::spawn(move || {
            for i in 0..RACES {
                let watch =
                    open(&cache, &node(&format!("g{i}")), &url(CDS), Variant::Sotw).unwrap();
                barrier.wait();
                drop(watch);
                barrier.wait();
            }
        })
    };
    let mut orphaned = Vec::new();
    for i in 0..RACES {
        let group = format!("g{i}");
        barrier.wait();
        let mut client = SotwClient::open(&cache, &node(&group), CDS);
        barrier.wait();
        let _ = client.subscribe(&[], "");
        cache.set_snapshot(
            &group,
            Snapshot::builder().add(&cluster("a", "1")).unwrap().build_unchecked(),
        );
        if client.poll().is_none() {
            orphaned.push(group);
        }
    }
    dropper.join().unwrap();
    assert!(
        orphaned.is_empty(),
        "{} watches never saw their group's snapshot, e.g. {:?}",
        orphaned.len(),
        orphaned.first()
    );
}
