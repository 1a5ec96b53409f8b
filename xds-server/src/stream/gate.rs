//! The join gate's decisions, with no I/O: who gets the next permit ([`Queue`]), and when one
//! stream needs a permit, holds it, gives it back or stops being gated ([`Join`]). Time is a
//! parameter; the driver (`driver.rs`) and the permits (`permits.rs`) do the waiting.
//!
//! # What a permit covers: the server's work on a join, not the client's answer
//!
//! A permit is held while the server computes and writes a joining stream's responses, and is
//! given back as soon as the transport took them: *not* when the client acknowledges them. A
//! client that never ACKs then costs the gate the time its responses take to write, and a new
//! proxy behind 200 of them waits for 200 writes (milliseconds each), not for 200 timeouts.
//! Holding the permit until the ACK made every such client keep it for `join_timeout`: with 200
//! of them, nothing new was served for minutes.
//!
//! What the gate is for is kept: a storm's joiners are served a few at a time in arrival order
//! and each to completion, because a stream that is partway through its join (it was written
//! resources under a permit, and asks for more before it is synced: the endpoints of the
//! clusters it was just sent) waits in the [`Lane::Continuing`] lane, served before every fresh
//! joiner. Work on started joins goes first; a new join starts only when no started one has
//! work waiting, that is while the started ones wait on their clients. The server's work is thus
//! still done a few joins at a time and in arrival order, and the time clients spend reading and
//! answering is no longer lost to everyone else.
//!
//! # Bounds whatever other streams do
//!
//! - A permit is held for at most `join_timeout` (a client that stops reading blocks its write
//!   and is no longer polled; the permit's keeper frees it then, and the stream goes on
//!   ungated).
//! - A stream waits for a permit for at most `join_max_wait`; then it goes on ungated. Slow
//!   writes to clients that stop reading could otherwise still add up, one `join_timeout` per
//!   permit and per such client ahead in the queue. Set it above the time the largest storm
//!   takes to serve (a storm's tail past it is served all at once, in round-robin).
//!
//! # A stream's way through the gate
//!
//! ```text
//!            first request
//!   Fresh ──────────────────► needs a permit (fresh lane) ──► Holding ──┐
//!     │  resumes (declares                                      ▲       │ everything owed was
//!     │  what it holds)                       needs a permit    │       │ taken by the transport:
//!     └──────────────────────► Idle ──── (continuing lane if ───┘       │ permit given back
//!                               ▲        it was served under                │
//!                               │        one, else fresh) before            │
//!                               │        a response with resources          │
//!                               └──────────────────────────────────────────┘
//!   Idle or Holding ──► Open: synced (everything sent acknowledged, having been served, or
//!   having resumed), or a permit waited for longer than `join_max_wait`. Open is never gated.
//! ```

use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, Instant};

/// Which waiting streams are served first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lane {
    /// Partway through a join: served before every fresh joiner, so joins end in the order they
    /// started.
    Continuing,
    /// A new join (or a resumed stream owed resources): arrival order.
    Fresh,
}

/// Identifies a waiting stream in the [`Queue`].
pub(crate) type Ticket = u64;

/// The server-wide order of permits: `free` permits, and the streams waiting for one, in two
/// lanes served in order ([`Lane::Continuing`] first), each first come, first served. A permit
/// is never free while a stream waits.
#[derive(Debug)]
pub(crate) struct Queue {
    free: usize,
    continuing: VecDeque<Ticket>,
    fresh: VecDeque<Ticket>,
}

impl Queue {
    /// A gate of `permits` permits, all free.
    pub(crate) fn new(permits: usize) -> Queue {
        Queue { free: permits, continuing: VecDeque::new(), fresh: VecDeque::new() }
    }

    /// `ticket` asks for a permit: true if it has one at once, else it waits in `lane`.
    #[must_use]
    pub(crate) fn request(&mut self, ticket: Ticket, lane: Lane) -> bool {
        if self.free > 0 {
            self.free -= 1;
            return true;
        }
        match lane {
            Lane::Continuing => self.continuing.push_back(ticket),
            Lane::Fresh => self.fresh.push_back(ticket),
        }
        false
    }

    /// `ticket` stops waiting (its stream ended or gave up): false if it was not waiting (it
    /// was handed a permit already, which it must give back).
    #[must_use]
    pub(crate) fn cancel(&mut self, ticket: Ticket) -> bool {
        for lane in [&mut self.continuing, &mut self.fresh] {
            if let Some(i) = lane.iter().position(|&t| t == ticket) {
                lane.remove(i);
                return true;
            }
        }
        false
    }

    /// A permit is given back: the ticket it goes to, or none (it is free).
    #[must_use]
    pub(crate) fn release(&mut self) -> Option<Ticket> {
        let next = self.continuing.pop_front().or_else(|| self.fresh.pop_front());
        if next.is_none() {
            self.free += 1;
        }
        next
    }

    /// How many streams wait.
    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.continuing.len() + self.fresh.len()
    }
}

/// One stream's place in the join gate: the driver tells it what the stream does and asks it
/// when to wait for a permit and when to give one back.
///
/// Calls, in the driver's order: [`first_request`](Self::first_request) once; before writing a
/// response, [`before_write`](Self::before_write), then [`wrote`](Self::wrote); whenever
/// everything owed was taken by the transport, [`drained`](Self::drained); the core's events
/// through [`sent`](Self::sent) and [`answered`](Self::answered). When asked to wait, the driver
/// waits until [`wait_deadline`](Self::wait_deadline) and calls [`granted`](Self::granted) or,
/// past it, [`waited_too_long`](Self::waited_too_long).
#[derive(Debug)]
pub(crate) struct Join<K: Ord> {
    state: State<K>,
    max_wait: Duration,
}

#[derive(Debug)]
enum State<K: Ord> {
    /// No request yet.
    Fresh,
    /// Waiting for a permit (the driver awaits it).
    Queued { unacked: BTreeSet<K>, joined: bool },
    /// Holding a permit.
    Holding {
        /// The types with a response sent and not yet acknowledged.
        unacked: BTreeSet<K>,
        /// A response with resources was written under a permit (this one or an earlier one).
        joined: bool,
    },
    /// No permit: waiting on the client, until a response with resources is to be written.
    Idle {
        unacked: BTreeSet<K>,
        joined: bool,
        /// It resumed: once everything sent is acknowledged it is synced.
        resumed: bool,
    },
    /// Synced, gave up waiting, or the gate is off: never gated again.
    Open,
}

impl<K: Ord> Join<K> {
    /// A new stream; `gated: false` when the server has no gate.
    pub(crate) fn new(gated: bool, max_wait: Duration) -> Join<K> {
        Join { state: if gated { State::Fresh } else { State::Open }, max_wait }
    }

    /// The stream's first request: the lane to wait in before handling it, or none (it resumes,
    /// and waits only before a response with resources; or the gate is off).
    #[must_use]
    pub(crate) fn first_request(&mut self, resumes: bool) -> Option<Lane> {
        if !matches!(self.state, State::Fresh) {
            return None;
        }
        if resumes {
            self.state = State::Idle { unacked: BTreeSet::new(), joined: false, resumed: true };
            return None;
        }
        self.state = State::Queued { unacked: BTreeSet::new(), joined: false };
        Some(Lane::Fresh)
    }

    /// A response is about to be written (`resources`: it carries some): the lane to wait in
    /// first, if any. A stream served under a permit before is partway through its join.
    #[must_use]
    pub(crate) fn before_write(&mut self, resources: bool) -> Option<Lane> {
        if !resources {
            return None;
        }
        match std::mem::replace(&mut self.state, State::Open) {
            State::Idle { unacked, joined, .. } => {
                self.state = State::Queued { unacked, joined };
                Some(if joined { Lane::Continuing } else { Lane::Fresh })
            }
            state => {
                self.state = state;
                None
            }
        }
    }

    /// When a stream that started waiting at `since` stops waiting and goes on ungated.
    pub(crate) fn wait_deadline(&self, since: Instant) -> Instant {
        since + self.max_wait
    }

    /// The permit it waited for is its own.
    pub(crate) fn granted(&mut self) {
        if let State::Queued { unacked, joined } = std::mem::replace(&mut self.state, State::Open) {
            self.state = State::Holding { unacked, joined };
        }
    }

    /// It waited until [`wait_deadline`](Self::wait_deadline): it goes on ungated.
    pub(crate) fn waited_too_long(&mut self) {
        self.state = State::Open;
    }

    /// The gate went away (shut down): ungated.
    pub(crate) fn open(&mut self) {
        self.state = State::Open;
    }

    /// A response was handed to the transport.
    pub(crate) fn wrote(&mut self, resources: bool) {
        if let State::Holding { joined, .. } = &mut self.state {
            *joined |= resources;
        }
    }

    /// Everything owed was taken by the transport, and the stream now waits on its client or
    /// its cache: true if the permit is to be given back.
    #[must_use]
    pub(crate) fn drained(&mut self) -> bool {
        let (release, unacked, joined, resumed) =
            match std::mem::replace(&mut self.state, State::Open) {
                State::Holding { unacked, joined } => (true, unacked, joined, false),
                State::Idle { unacked, joined, resumed } => (false, unacked, joined, resumed),
                state => {
                    self.state = state;
                    return false;
                }
            };
        // Synced: it was served (or resumed) and every response it was sent was answered. A
        // stream served nothing with resources yet (its group has no configuration) stays
        // gated: when the configuration comes, that is its join.
        if !((joined || resumed) && unacked.is_empty()) {
            self.state = State::Idle { unacked, joined, resumed };
        }
        release
    }

    /// The core sent a response of type `key`.
    pub(crate) fn sent(&mut self, key: K) {
        if let Some(unacked) = self.unacked() {
            unacked.insert(key);
        }
    }

    /// The client answered (ACK or NACK) the response of type `key`.
    pub(crate) fn answered(&mut self, key: &K) {
        if let Some(unacked) = self.unacked() {
            unacked.remove(key);
        }
    }

    fn unacked(&mut self) -> Option<&mut BTreeSet<K>> {
        match &mut self.state {
            State::Queued { unacked, .. }
            | State::Holding { unacked, .. }
            | State::Idle { unacked, .. } => Some(unacked),
            State::Fresh | State::Open => None,
        }
    }

    /// Whether it is never gated again.
    #[cfg(test)]
    fn is_open(&self) -> bool {
        matches!(self.state, State::Open)
    }

    /// Whether it holds a permit.
    #[cfg(test)]
    fn holds(&self) -> bool {
        matches!(self.state, State::Holding { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WAIT: Duration = Duration::from_secs(10);

    fn gated() -> Join<&'static str> {
        Join::new(true, WAIT)
    }

    #[test]
    fn the_queue_serves_started_joins_before_fresh_ones_each_in_arrival_order() {
        let mut q = Queue::new(1);
        assert!(q.request(1, Lane::Fresh));
        assert!(!q.request(2, Lane::Fresh));
        assert!(!q.request(3, Lane::Fresh));
        assert!(!q.request(4, Lane::Continuing));
        assert!(!q.request(5, Lane::Continuing));
        assert_eq!(q.waiting(), 4);
        let order: Vec<_> = std::iter::from_fn(|| q.release()).collect();
        assert_eq!(order, [4, 5, 2, 3]);
        // The last release found no one: the permit is free again.
        assert!(q.request(6, Lane::Fresh));
        assert!(!q.request(7, Lane::Fresh));
    }

    #[test]
    fn a_cancelled_waiter_leaves_the_queue_and_one_already_served_must_give_back() {
        let mut q = Queue::new(1);
        assert!(q.request(1, Lane::Fresh));
        assert!(!q.request(2, Lane::Fresh));
        assert!(!q.request(3, Lane::Continuing));
        assert!(q.cancel(2));
        assert!(q.cancel(3));
        assert!(!q.cancel(2));
        assert_eq!(q.release(), None);
        assert!(q.request(4, Lane::Fresh));
        assert!(!q.request(5, Lane::Fresh));
        assert_eq!(q.release(), Some(5));
        // 5 was handed the permit: it is no longer waiting, so cancelling finds nothing.
        assert!(!q.cancel(5));
    }

    #[test]
    fn a_joiner_that_never_acks_gives_its_permit_back_once_its_response_is_written() {
        let mut j = gated();
        assert_eq!(j.first_request(false), Some(Lane::Fresh));
        j.granted();
        assert!(j.holds());
        assert_eq!(j.before_write(true), None, "it holds a permit already");
        j.sent("cds");
        j.wrote(true);
        // Written, not acknowledged: the permit goes back at once, the join is not over.
        assert!(j.drained());
        assert!(!j.holds() && !j.is_open());
        // Nothing more to write while the client says nothing.
        assert!(!j.drained());
    }

    #[test]
    fn a_join_goes_on_in_the_continuing_lane_and_ends_when_everything_is_acknowledged() {
        let mut j = gated();
        assert_eq!(j.first_request(false), Some(Lane::Fresh));
        j.granted();
        j.sent("cds");
        j.wrote(true);
        assert!(j.drained());
        // The client asks for the endpoints of its clusters before it ACKs them (as Envoy does).
        assert_eq!(j.before_write(true), Some(Lane::Continuing));
        j.granted();
        j.sent("eds");
        j.wrote(true);
        j.answered(&"cds");
        assert!(j.drained());
        assert!(!j.is_open());
        j.answered(&"eds");
        assert!(!j.drained(), "no permit left to give back");
        assert!(j.is_open(), "synced: never gated again");
        assert_eq!(j.before_write(true), None);
    }

    #[test]
    fn a_joiner_owed_nothing_waits_again_in_the_fresh_lane_when_the_configuration_comes() {
        let mut j = gated();
        assert_eq!(j.first_request(false), Some(Lane::Fresh));
        j.granted();
        // Its group has no configuration: an empty answer, acknowledged.
        assert_eq!(j.before_write(false), None);
        j.sent("cds");
        j.wrote(false);
        j.answered(&"cds");
        assert!(j.drained());
        assert!(!j.is_open(), "its join has not happened yet");
        assert_eq!(j.before_write(true), Some(Lane::Fresh));
    }

    #[test]
    fn a_resuming_stream_takes_no_permit_until_it_is_owed_resources() {
        let mut j = gated();
        assert_eq!(j.first_request(true), None);
        assert_eq!(j.before_write(false), None);
        j.sent("cds");
        j.wrote(false);
        assert!(!j.drained());
        j.answered(&"cds");
        assert!(!j.drained());
        assert!(j.is_open(), "it held everything: synced once it acknowledged");

        let mut stale = gated();
        assert_eq!(stale.first_request(true), None);
        assert_eq!(stale.before_write(true), Some(Lane::Fresh), "owed resources: it queues");
    }

    #[test]
    fn a_stream_stops_waiting_after_the_longest_wait_and_goes_on_ungated() {
        let start = Instant::now();
        let mut j = gated();
        assert_eq!(j.first_request(false), Some(Lane::Fresh));
        assert_eq!(j.wait_deadline(start), start + WAIT);
        j.waited_too_long();
        assert!(j.is_open());
        assert_eq!(j.before_write(true), None);
        assert!(!j.drained());
    }

    #[test]
    fn without_a_gate_nothing_waits() {
        let mut j: Join<&str> = Join::new(false, WAIT);
        assert_eq!(j.first_request(false), None);
        assert_eq!(j.before_write(true), None);
        assert!(!j.drained());
    }
}
