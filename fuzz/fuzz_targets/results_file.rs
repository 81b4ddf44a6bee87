//! Bytes as `efatop report` and `efatop compare` read a results file. The reader answers with results or an
//! error, never a panic; what it accepts keeps its promises (every measurement under a listed configuration,
//! found by configuration and size, square pair matrices), renders as the seed-format table, and, saved
//! again, reads back.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let Ok(results) = efatop_report::load::parse(bytes) else { return };
    for measurement in &results.measurements {
        assert!(results.configs.contains(&measurement.config), "accepted an unlisted configuration");
        assert_eq!(results.find(&measurement.config, measurement.size), Some(measurement), "find is ambiguous");
    }
    for matrix in &results.pair_matrices {
        assert!(matrix.gbps.iter().all(|row| row.len() == matrix.gbps.len()), "accepted a ragged pair matrix");
    }
    let _ = efatop_report::text::render_table(&results);
    let saved = serde_json::to_vec_pretty(&results).expect("accepted results serialize");
    if let Err(err) = efatop_report::load::parse(&saved) {
        panic!("accepted results, saved again, do not read back: {err}");
    }
});
