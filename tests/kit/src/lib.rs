//! What the binary's end-to-end tests (`tests/*.rs`) read back from efatop's `--json` lines, in a crate of
//! its own so that it is compiled once. Reading a line as its type instantiates the whole tagged
//! [`Line`]'s deserializer (every kind's data, generic over the reader) in the crate that calls it: in
//! `tests/common`, that was once in each of the 13 test binaries that read lines, about 20 s of compiling
//! each on the 2-core CI machine (docs/testing.md). Here it is compiled once, and the tests call it.

use efatop_proto::output::{Line, Untyped};
use serde_json::Value;

/// A `--json` line of any command, as the printers write it (`check`'s data read as the check's report).
pub type JsonLine = Line<efatop_health::Report>;

/// One `--json` line, read as its type.
#[inline(never)]
pub fn parse_line(line: &str) -> serde_json::Result<JsonLine> {
    JsonLine::parse(line)
}

/// One `--json` line with every kind's data left as JSON (`check`'s report and `watch`'s lines too).
#[inline(never)]
pub fn parse_untyped(line: &str) -> serde_json::Result<Line> {
    Line::<Value, Value>::parse(line)
}

/// Every line of `stdout`, each parsed into a [`JsonLine`]; a line that is not one fails the test.
#[inline(never)]
pub fn json_lines(stdout: &str) -> Vec<JsonLine> {
    stdout.lines().map(|line| parse_line(line).unwrap_or_else(|err| panic!("not a --json line ({err}): {line}"))).collect()
}

/// The lines of `stdout` that are `--json` lines, skipping any other (a run cut short may leave half a
/// line, and stdout may carry a launcher's text).
#[inline(never)]
pub fn json_lines_among(stdout: &str) -> Vec<JsonLine> {
    stdout.lines().filter_map(|line| parse_line(line).ok()).collect()
}

/// The report of `efatop check --json`'s one line, as JSON (tests read its fields by name); a line of
/// another type fails the test.
#[inline(never)]
pub fn report_of(line: &str) -> Value {
    match parse_line(line) {
        Ok(JsonLine::Check(report)) => serde_json::to_value(&*report).expect("a report serializes"),
        other => panic!("not a check line ({other:?}): {line}"),
    }
}

/// `efatop monitor --json`'s line: the node's rank when several are shown, and its read as JSON (tests
/// read its fields by name); a line of another type fails the test.
#[inline(never)]
pub fn snapshot_of(line: &str) -> (Option<u32>, Value) {
    match parse_line(line) {
        Ok(JsonLine::Snapshot { rank, data }) => (rank, serde_json::to_value(&*data).expect("a node read serializes")),
        other => panic!("not a snapshot line ({other:?}): {line}"),
    }
}

/// The data of `stdout`'s `--json` lines of type `kind`, each read as its type and given back as JSON
/// (tests read its fields by name); lines that are not `--json` lines are skipped.
#[inline(never)]
pub fn data_of(stdout: &str, kind: &str) -> Vec<Value> {
    json_lines_among(stdout).iter().filter(|line| line.kind() == kind).map(data_value).collect()
}

/// A line's data as JSON.
#[inline(never)]
pub fn data_value(line: &JsonLine) -> Value {
    let value = serde_json::to_value(line).expect("a line serializes");
    serde::Deserialize::deserialize(value).map(|untyped: Untyped| untyped.data).expect("a line's envelope")
}

/// The kind of a `--json` line (`"run"`, `"sample"`, ...), if it is one.
#[inline(never)]
pub fn kind_of(line: &str) -> Option<&'static str> {
    parse_line(line).ok().map(|line| line.kind())
}
