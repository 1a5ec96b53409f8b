//! The stream loop shared by ADS and the per-type services, SotW and delta.

mod driver;
mod protocol;
mod rate;

pub(crate) use driver::ResponseStream;
pub(crate) use driver::open;
pub(crate) use protocol::{Delta, Protocol, Sotw};
