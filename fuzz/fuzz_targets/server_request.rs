//! cargo-fuzz target `server_request`: see [`xds_fuzz::server_request`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| xds_fuzz::server_request(data));
