//! The per-peer connection cap ([`TransportConfig::max_connections_per_peer`]): how many
//! connections each peer holds open, and how often refusals are logged.
//!
//! Sans-IO: [`PeerCounts`] is told of opens and closes and answers whether a connection may
//! stay; [`Refusals`] takes the time as a parameter. [`PeerSlot`] is the only part that
//! touches shared state: the count it took, given back when its connection is dropped (on
//! whatever task that happens).
//!
//! [`TransportConfig::max_connections_per_peer`]: super::TransportConfig::max_connections_per_peer

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use xds_core::TokenBucket;

use crate::status::lock;

/// Whom a connection counts against: an IPv4 address, or the /64 prefix of an IPv6 address.
///
/// A /64 is what one IPv6 host is usually given (SLAAC, privacy addresses): a host can pick
/// any of its 2^64 addresses for each connection, so counting per address would not bound it.
/// The cost is that hosts sharing a /64 share a cap. An IPv4-mapped address (`::ffff:a.b.c.d`,
/// what a dual-stack `[::]` listener sees of an IPv4 client) counts as its IPv4 address:
/// otherwise every IPv4 client of such a listener would fall in the one /64 `::/64`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum PeerKey {
    /// An IPv4 address.
    V4(u32),
    /// The first 64 bits of an IPv6 address.
    V6Prefix(u64),
}

impl From<IpAddr> for PeerKey {
    fn from(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => PeerKey::V4(v4.to_bits()),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => PeerKey::V4(v4.to_bits()),
                None => PeerKey::V6Prefix((v6.to_bits() >> 64) as u64),
            },
        }
    }
}

/// Connections open per peer, against a cap.
///
/// A peer has an entry only while it holds a connection (its entry goes when its count drops
/// to 0), so the map never holds more entries than connections are open: at most the
/// listener's `max_connections`, whatever the number of addresses that ever connected.
///
/// Call [`handle_open`](Self::handle_open) when a connection is accepted and, if it was let
/// in, [`handle_close`](Self::handle_close) once when it closes.
#[derive(Debug)]
pub(crate) struct PeerCounts {
    max_per_peer: usize,
    open: HashMap<PeerKey, usize>,
}

impl PeerCounts {
    /// No connection open; each peer may hold `max_per_peer` (0 lets nobody in).
    pub(crate) fn new(max_per_peer: usize) -> Self {
        PeerCounts { max_per_peer, open: HashMap::new() }
    }

    /// A connection from `peer` was accepted: counted if the peer holds fewer than its cap
    /// (`true`), else left uncounted (`false`, close it).
    #[must_use]
    pub(crate) fn handle_open(&mut self, peer: PeerKey) -> bool {
        let open = self.open.entry(peer).or_default();
        if *open < self.max_per_peer {
            *open += 1;
            return true;
        }
        if *open == 0 {
            // A cap of 0 must not leave an empty entry behind.
            self.open.remove(&peer);
        }
        false
    }

    /// A counted connection of `peer` closed.
    pub(crate) fn handle_close(&mut self, peer: PeerKey) {
        if let Some(open) = self.open.get_mut(&peer) {
            *open -= 1;
            if *open == 0 {
                self.open.remove(&peer);
            }
        }
    }

    /// The connections `peer` holds.
    #[cfg(test)]
    fn open(&self, peer: PeerKey) -> usize {
        self.open.get(&peer).copied().unwrap_or(0)
    }

    /// The peers holding at least one connection.
    pub(crate) fn peers(&self) -> usize {
        self.open.len()
    }
}

/// A connection's place under its peer's cap, given back when it is dropped (the connection
/// closed, or its handshake failed).
#[derive(Debug)]
pub(crate) struct PeerSlot {
    counts: Arc<Mutex<PeerCounts>>,
    peer: PeerKey,
}

impl PeerSlot {
    /// Counts a connection from `ip` in `counts`; `None` if its peer is at the cap.
    pub(crate) fn take(counts: &Arc<Mutex<PeerCounts>>, ip: IpAddr) -> Option<PeerSlot> {
        let peer = PeerKey::from(ip);
        lock(counts).handle_open(peer).then(|| PeerSlot { counts: counts.clone(), peer })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        lock(&self.counts).handle_close(self.peer);
    }
}

/// Connections refused for their peer's cap: a peer that keeps reconnecting would otherwise
/// write a log line per attempt, so a line is written at most once a second and says how many
/// were refused since the last one.
#[derive(Debug)]
pub(crate) struct Refusals {
    unlogged: u64,
    lines: TokenBucket,
}

impl Refusals {
    pub(crate) fn new(now: Instant) -> Self {
        Refusals { unlogged: 0, lines: TokenBucket::new(1, 1, now) }
    }

    /// A connection was refused at `now`: the number of refusals to log now (this one and
    /// those not logged before), or `None` to log nothing yet.
    #[must_use]
    pub(crate) fn handle_refusal(&mut self, now: Instant) -> Option<u64> {
        self.unlogged += 1;
        self.lines.take(now).then(|| std::mem::take(&mut self.unlogged))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};
    use std::time::Duration;

    fn key(ip: &str) -> PeerKey {
        PeerKey::from(ip.parse::<IpAddr>().expect("an address"))
    }

    #[test]
    fn a_peer_holds_at_most_its_cap_and_gets_a_place_back_when_one_closes() {
        let mut counts = PeerCounts::new(2);
        let (a, b) = (key("10.0.0.1"), key("10.0.0.2"));
        assert!(counts.handle_open(a) && counts.handle_open(a));
        assert!(!counts.handle_open(a), "a third connection past the cap of 2");
        assert_eq!(counts.open(a), 2, "a refused connection is not counted");
        assert!(counts.handle_open(b), "another peer has its own cap");
        counts.handle_close(a);
        assert!(counts.handle_open(a), "a place came back");
        assert!(!counts.handle_open(a));
    }

    #[test]
    fn a_peer_whose_connections_all_closed_leaves_no_entry() {
        let mut counts = PeerCounts::new(3);
        for i in 0..1000u32 {
            let peer = PeerKey::from(IpAddr::V4(Ipv4Addr::from_bits(i)));
            assert!(counts.handle_open(peer));
            counts.handle_close(peer);
        }
        assert_eq!(counts.peers(), 0, "1,000 peers came and went");
        let a = key("10.0.0.1");
        assert!(counts.handle_open(a) && counts.handle_open(a));
        counts.handle_close(a);
        assert_eq!(counts.peers(), 1);
        counts.handle_close(a);
        assert_eq!(counts.peers(), 0);
        // A close without an open (never done by a PeerSlot) changes nothing.
        counts.handle_close(a);
        assert_eq!((counts.peers(), counts.open(a)), (0, 0));
    }

    #[test]
    fn a_cap_of_0_lets_nobody_in_and_keeps_no_entry() {
        let mut counts = PeerCounts::new(0);
        assert!(!counts.handle_open(key("10.0.0.1")));
        assert_eq!(counts.peers(), 0);
    }

    #[test]
    fn an_ipv6_host_is_its_64_prefix_and_a_mapped_ipv4_address_is_the_ipv4_address() {
        assert_eq!(key("2001:db8:1:2::1"), key("2001:db8:1:2:ffff:eeee:dddd:cccc"));
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
        assert_eq!(key("::ffff:192.0.2.7"), key("192.0.2.7"));
        assert_ne!(key("::ffff:192.0.2.7"), key("::ffff:192.0.2.8"), "not all in ::/64");
        assert_ne!(key("::1"), key("0.0.0.1"));
        assert_eq!(
            PeerKey::from(IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 7, 1, 2, 3, 4))),
            PeerKey::V6Prefix(0x2001_0db8_0000_0007)
        );
    }

    #[test]
    fn slots_give_their_place_back_when_dropped() {
        let counts = Arc::new(Mutex::new(PeerCounts::new(1)));
        let ip: IpAddr = "10.0.0.1".parse().expect("an address");
        let slot = PeerSlot::take(&counts, ip).expect("the first connection");
        assert!(PeerSlot::take(&counts, ip).is_none(), "past the cap of 1");
        drop(slot);
        assert_eq!(lock(&counts).peers(), 0);
        assert!(PeerSlot::take(&counts, ip).is_some());
    }

    #[test]
    fn refusals_are_logged_at_most_once_a_second_with_the_count_since_the_last_line() {
        let t0 = Instant::now();
        let mut refusals = Refusals::new(t0);
        assert_eq!(refusals.handle_refusal(t0), Some(1));
        for _ in 0..999 {
            assert_eq!(refusals.handle_refusal(t0 + Duration::from_millis(500)), None);
        }
        assert_eq!(refusals.handle_refusal(t0 + Duration::from_secs(1)), Some(1000));
        assert_eq!(refusals.handle_refusal(t0 + Duration::from_millis(1500)), None);
    }
}
