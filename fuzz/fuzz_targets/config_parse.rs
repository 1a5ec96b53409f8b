//! cargo-fuzz target `config_parse`: see [`xds_fuzz::config_parse`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| xds_fuzz::config_parse(data));
