//! cargo-fuzz target `core_sotw`: see [`xds_fuzz::core_sotw`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| xds_fuzz::core_sotw(data));
