//! The view of a source with no data yet.

use xds_core::View;
use xds_proto::EncodedResource;

/// An empty view that is not ready: streams reading it are owed nothing until data arrives.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Unready;

impl View for Unready {
    type Resource = EncodedResource;

    fn is_ready(&self) -> bool {
        false
    }

    fn revision(&self) -> u64 {
        0
    }

    fn version(&self) -> xds_core::Text {
        xds_core::Text::new()
    }

    fn get(&self, _: &str) -> Option<EncodedResource> {
        None
    }

    fn for_each(&self, _: &mut dyn FnMut(&EncodedResource)) {}
}
