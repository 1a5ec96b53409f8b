//! cargo-fuzz target `rest_body`: see [`xds_fuzz::rest_body`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| xds_fuzz::rest_body(data));
