//! Bytes as `efatop replay FILE` reads a recording (the line, gzip members, framed stream messages): the
//! reader answers with a recording or one line, never a panic, and within its caps (the fuzzer runs it
//! under `-rss_limit_mb`); what it accepts plays back exactly the events its index counted.

#![no_main]

use std::io::Write;

use efatop_proto::recording;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let mut file = tempfile::NamedTempFile::new().expect("a scratch file");
    file.write_all(bytes).expect("write the input");
    let Ok(recording) = recording::read(file.path()) else { return };
    let played = recording.cursor().count();
    assert_eq!(played, recording.len(), "the index and the playback disagree");
    for index in 0..recording.len() {
        assert!(recording.time(index).is_some());
    }
});
