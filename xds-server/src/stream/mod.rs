//! The stream loop shared by ADS and the per-type services, SotW and delta: the I/O around the
//! core's [`xds_core::Stream`].

mod driver;
mod gate;
mod permits;
mod protocol;
mod report;
mod woken;

pub(crate) use driver::ResponseStream;
pub(crate) use driver::open;
pub(crate) use permits::Permits;
pub(crate) use protocol::WireProtocol;
