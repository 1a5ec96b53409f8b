//! cargo-fuzz target `core_delta`: see [`xds_fuzz::core_delta`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| xds_fuzz::core_delta(data));
