//! How many connections each port keeps open. Every connection is a file descriptor: without
//! caps, a peer opening connections faster than they time out takes every descriptor of the
//! process, and then no port accepts and no configuration file can be read. So every port has
//! a cap, the caps add up to less than the open-file limit with a reserve for everything else,
//! and each port has a cap per peer so that one peer never holds a whole port (the probes of
//! the admin port, say).
//!
//! [`plan`] is the arithmetic (the limit is a parameter); [`open_file_limit`] reads the limit,
//! raising it to the hard limit first.

use std::fmt;

use xds_server::transport::{TransportConfig, fd_limit, raise_fd_limit};

use crate::cli::Args;

/// Descriptors kept out of the connection budget, at the least: standard streams, the runtime's
/// own, the listeners, file watches, configuration and `--write-dir` files, etcd connections
/// (one per endpoint), and the connection each listener accepts and closes at once when its
/// peer is at the cap.
const MIN_RESERVE: usize = 64;

/// On larger limits, a sixteenth of the limit is kept instead, whichever is more.
const RESERVE_SHARE: usize = 16;

/// The admin port's cap when none is given, unless a quarter of the budget is less: probes and
/// operators need a few connections, the xDS ports the rest.
const ADMIN_DEFAULT: usize = 64;

/// The limit planned for where it cannot be read (no `RLIMIT_NOFILE`).
const ASSUMED_LIMIT: u64 = 1024;

/// One port's caps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PortCaps {
    /// Connections open at once.
    pub(crate) total: usize,
    /// Connections one peer holds open at once (an IPv4 address, an IPv6 /64).
    pub(crate) per_peer: usize,
}

impl PortCaps {
    /// A port's caps: `total`, and `per_peer` (at most `total`) or a quarter of it.
    fn new(total: usize, per_peer: Option<usize>) -> Self {
        let per_peer = per_peer.map_or((total / 4).max(1), |n| n.min(total));
        PortCaps { total, per_peer }
    }

    /// `config` with these caps.
    pub(crate) fn apply(self, config: TransportConfig) -> TransportConfig {
        config.max_connections(Some(self.total)).max_connections_per_peer(Some(self.per_peer))
    }
}

/// Every port's caps, and the limit they were planned within.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ConnectionCaps {
    pub(crate) grpc: PortCaps,
    pub(crate) rest: PortCaps,
    pub(crate) admin: PortCaps,
    /// The open-file limit.
    pub(crate) limit: usize,
    /// The descriptors kept out of the connection budget.
    pub(crate) reserve: usize,
}

impl fmt::Display for ConnectionCaps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ports = [("gRPC", self.grpc), ("REST", self.rest), ("admin", self.admin)];
        for (i, (port, caps)) in ports.into_iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}{port} {} ({} per peer)", caps.total, caps.per_peer)?;
        }
        write!(f, "; open-file limit {}, {} kept for files and listeners", self.limit, self.reserve)
    }
}

/// Why the caps cannot be planned.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CapsError {
    /// The caps given add up to more than the limit leaves for connections.
    #[error(
        "the connection caps given add up to {given}, but the open-file limit of {limit} leaves \
         {budget} for connections ({reserve} are kept for files, etcd and the listeners): lower \
         --max-connections, --rest-max-connections or --admin-max-connections, or raise the \
         limit (ulimit -n)"
    )]
    OverBudget {
        /// The sum of the caps given.
        given: usize,
        /// The open-file limit.
        limit: usize,
        /// The descriptors kept.
        reserve: usize,
        /// What is left for connections.
        budget: usize,
    },
    /// What the limit leaves (after the caps given) is no connection for a port.
    #[error(
        "the open-file limit of {limit} leaves no connection for the {port} port ({reserve} are \
         kept for files, etcd and the listeners, {given} go to the caps given): raise the limit \
         (ulimit -n)"
    )]
    NoRoom {
        /// The port.
        port: &'static str,
        /// The open-file limit.
        limit: usize,
        /// The descriptors kept.
        reserve: usize,
        /// The sum of the caps given.
        given: usize,
    },
}

/// Every port's caps within the open-file limit `fd_limit`: the caps given by `args`, and for
/// the others a share of the budget (the limit less the reserve) that the given ones leave.
/// The admin port gets 64 or a quarter of the budget, whichever is less; gRPC three quarters
/// of the rest and REST one quarter (gRPC or REST alone, all of it). A per-peer cap defaults
/// to a quarter of its port's cap.
///
/// # Errors
///
/// The caps given add up to more than the budget, or a port would get none.
pub(crate) fn plan(args: &Args, fd_limit: u64) -> Result<ConnectionCaps, CapsError> {
    let limit = usize::try_from(fd_limit).unwrap_or(usize::MAX);
    let reserve = (limit / RESERVE_SHARE).max(MIN_RESERVE);
    let budget = limit.saturating_sub(reserve);
    let given = [args.max_connections, args.rest_max_connections, args.admin_max_connections]
        .into_iter()
        .flatten()
        .fold(0usize, usize::saturating_add);
    if given > budget {
        return Err(CapsError::OverBudget { given, limit, reserve, budget });
    }
    let mut left = budget - given;
    let admin = args.admin_max_connections.unwrap_or_else(|| {
        let admin = ADMIN_DEFAULT.min(budget / 4).min(left);
        left -= admin;
        admin
    });
    let (grpc, rest) = match (args.max_connections, args.rest_max_connections) {
        (Some(grpc), Some(rest)) => (grpc, rest),
        (Some(grpc), None) => (grpc, left),
        (None, Some(rest)) => (left, rest),
        (None, None) => (left - left / 4, left / 4),
    };
    for (port, total) in [("gRPC", grpc), ("REST", rest), ("admin", admin)] {
        if total == 0 {
            return Err(CapsError::NoRoom { port, limit, reserve, given });
        }
    }
    Ok(ConnectionCaps {
        grpc: PortCaps::new(grpc, args.max_connections_per_peer),
        rest: PortCaps::new(rest, args.rest_max_connections_per_peer),
        admin: PortCaps::new(admin, args.admin_max_connections_per_peer),
        limit,
        reserve,
    })
}

/// The process's open-file limit, raised to its hard limit first (logged): the caps are planned
/// within it.
pub(crate) fn open_file_limit() -> u64 {
    let before = match fd_limit() {
        Ok(limit) => limit,
        Err(error) => {
            tracing::warn!(%error, assumed = ASSUMED_LIMIT, "cannot read the open-file limit");
            return ASSUMED_LIMIT;
        }
    };
    match raise_fd_limit() {
        Ok(now) => {
            if now > before.soft {
                tracing::info!(from = before.soft, to = now, "raised the open-file limit");
            }
            now
        }
        Err(error) => {
            tracing::warn!(%error, limit = before.soft, "cannot raise the open-file limit");
            before.soft
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(flags: &[&str]) -> Args {
        Args::try_parse_from(std::iter::once("xds-file-server").chain(flags.iter().copied()))
            .expect("the flags parse")
    }

    fn caps(total: usize, per_peer: usize) -> PortCaps {
        PortCaps { total, per_peer }
    }

    #[test]
    fn the_defaults_share_the_limit_less_the_reserve() {
        let at = |limit| plan(&args(&[]), limit).expect("plans");
        let low = at(256);
        assert_eq!((low.limit, low.reserve), (256, 64));
        assert_eq!((low.grpc, low.rest, low.admin), (caps(108, 27), caps(36, 9), caps(48, 12)));
        let usual = at(1024);
        assert_eq!(
            (usual.grpc, usual.rest, usual.admin),
            (caps(672, 168), caps(224, 56), caps(64, 16))
        );
        // Caps and reserve add up to the limit, at every size.
        for limit in [80, 256, 1024, 4096, 65_536, 1 << 20] {
            let c = at(limit);
            let sum = c.grpc.total + c.rest.total + c.admin.total + c.reserve;
            assert_eq!(sum as u64, limit, "{c}");
            assert!(c.reserve >= 64 && c.reserve >= c.limit / 16, "{c}");
        }
    }

    #[test]
    fn caps_given_are_kept_and_the_others_share_what_they_leave() {
        let c = plan(&args(&["--max-connections", "500"]), 1024).expect("plans");
        assert_eq!((c.grpc, c.rest, c.admin), (caps(500, 125), caps(396, 99), caps(64, 16)));
        let c =
            plan(&args(&["--admin-max-connections", "8", "--rest-max-connections", "10"]), 1024)
                .expect("plans");
        assert_eq!((c.grpc, c.rest, c.admin), (caps(942, 235), caps(10, 2), caps(8, 2)));
        // A per-peer cap is at most its port's; at its port's, a peer may hold the whole port.
        let c = plan(
            &args(&["--admin-max-connections-per-peer", "1000", "--max-connections-per-peer", "3"]),
            1024,
        )
        .expect("plans");
        assert_eq!((c.admin.per_peer, c.grpc.per_peer), (64, 3));
        assert_eq!(
            plan(&args(&["--admin-max-connections", "2"]), 1024).expect("plans").admin.per_peer,
            1
        );
    }

    #[test]
    fn caps_that_do_not_fit_the_limit_are_refused_with_the_numbers() {
        let error =
            plan(&args(&["--max-connections", "900", "--rest-max-connections", "100"]), 1024)
                .expect_err("1,000 connections do not fit in 960");
        assert_eq!(
            error,
            CapsError::OverBudget { given: 1000, limit: 1024, reserve: 64, budget: 960 }
        );
        assert!(error.to_string().contains("ulimit -n"), "{error}");
        let error = plan(&args(&["--max-connections", "960"]), 1024).expect_err("no room for REST");
        assert_eq!(error, CapsError::NoRoom { port: "REST", limit: 1024, reserve: 64, given: 960 });
        let error = plan(&args(&[]), 64).expect_err("nothing left past the reserve");
        assert!(matches!(error, CapsError::NoRoom { .. }), "{error}");
    }

    #[test]
    fn a_cap_of_0_is_refused_by_name() {
        for flag in [
            "--max-connections",
            "--max-connections-per-peer",
            "--rest-max-connections",
            "--rest-max-connections-per-peer",
            "--admin-max-connections",
            "--admin-max-connections-per-peer",
        ] {
            let error = Args::try_parse_from(["xds-file-server", flag, "0"]).expect_err(flag);
            let text = error.to_string();
            assert!(text.contains(flag) && text.contains("at least 1"), "{text}");
        }
    }

    #[test]
    fn the_caps_read_as_one_line() {
        let c = plan(&args(&[]), 256).expect("plans");
        assert_eq!(
            c.to_string(),
            "gRPC 108 (27 per peer), REST 36 (9 per peer), admin 48 (12 per peer); open-file \
             limit 256, 64 kept for files and listeners"
        );
    }
}
