//! Small control planes built on the library, as a user would write them.
//!
//! - [`inventory`]: a `Cache` over an inventory of your own (the `custom-cache` binary serves it).
//! - `linear-endpoints` (a binary): a programmatic control plane over a `LinearCache`.

pub mod inventory;
