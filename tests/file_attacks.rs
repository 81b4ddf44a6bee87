//! What a file can do to efatop, with the real binary (docs/security.md, "Files and crafted inputs"):
//! - a symbolic link at an output path (`--out`, `--record`, `report --plot` and its sidecar, the monitor's
//!   `--record`) is refused with one line naming the flag, exit 2, and what it points to is left as it was;
//!   one at the old predictable staging name (`FILE.save.tmp`) is never written through either;
//! - a crafted recording (a run of 200 million ranks, one 64 MiB message, more messages than the index
//!   holds, a gzip bomb) ends `efatop replay` with one line naming the cap, exit 2, never an abort, with
//!   the process held to 1 GiB of address space (`prlimit --as`): a huge allocation it tried would fail the
//!   test rather than the machine. Its peak resident size is read back and must stay below 1 GiB.

mod common;

use std::io::Write;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::Duration;

use efatop_proto::events::{ConsumerEvent, RunInfo, RunStart};
use efatop_proto::stream::{self, RECORDING_MAGIC, VERSION};
use flate2::Compression;
use flate2::write::GzEncoder;

/// What the link in each case points to: it must read the same after efatop ran.
const PRECIOUS: &[u8] = b"another file of the user's\n";

/// One line on stderr, as every efatop error starts, holding each needle; exit code 2.
fn assert_refused(run: &common::Run, needles: &[&str]) {
    assert_eq!(run.code, Some(2), "stdout {}\nstderr {}", run.stdout, run.stderr);
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {lines:?}");
    assert!(lines[0].starts_with("efatop: error: "), "{lines:?}");
    for needle in needles {
        assert!(lines[0].contains(needle), "`{needle}` missing from {lines:?}");
    }
}

/// A folder with a file the user cares about and a link to it at `name`.
fn planted(name: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().expect("dir");
    let target = dir.path().join("precious.txt");
    std::fs::write(&target, PRECIOUS).expect("target");
    let link = dir.path().join(name);
    symlink(&target, &link).expect("link");
    (dir, target, link)
}

fn assert_untouched(target: &Path, link: &Path) {
    assert_eq!(std::fs::read(target).expect("target"), PRECIOUS, "{} was written through", link.display());
    assert!(std::fs::symlink_metadata(link).expect("link").file_type().is_symlink(), "{} is still the link", link.display());
}

fn shm_run(extra: &[&str]) -> common::Run {
    let mut args = vec!["run", "--ranks", "2", "write", "--provider", "shm", "--max-size", "8K", "--no-tui"];
    args.extend_from_slice(extra);
    common::efatop(&args)
}

#[test]
fn a_link_at_out_or_record_is_refused_and_its_target_left_alone() {
    let _serial = common::serial();
    for flag in ["--out", "--record"] {
        let (_dir, target, link) = planted("run.out");
        let link_arg = link.to_str().expect("utf-8");
        let run = shm_run(&[flag, link_arg]);
        assert_refused(&run, &[flag, link_arg, "is a symbolic link"]);
        assert_untouched(&target, &link);
    }
    // A dangling link: following it would create the file it names.
    let dir = tempfile::tempdir().expect("dir");
    let link = dir.path().join("run.json");
    symlink(dir.path().join("made-through-the-link"), &link).expect("link");
    let run = shm_run(&["--out", link.to_str().expect("utf-8")]);
    assert_refused(&run, &["--out", "is a symbolic link"]);
    assert!(!dir.path().join("made-through-the-link").exists());
}

#[test]
fn links_at_staging_names_are_never_written_through_and_nothing_staged_is_left() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().expect("dir");
    let target = dir.path().join("precious.txt");
    std::fs::write(&target, PRECIOUS).expect("target");
    let out = dir.path().join("run.json");
    let record = dir.path().join("run.efarec");
    // The names the results file was staged under before, and any a guess at this one's might try.
    let stale = ["run.json.save.tmp", ".run.json.tmp", "run.json.tmp", "run.efarec.tmp", ".run.efarec.tmp"];
    for name in stale {
        symlink(&target, dir.path().join(name)).expect("link");
    }
    let run = shm_run(&["--out", out.to_str().expect("utf-8"), "--record", record.to_str().expect("utf-8")]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(std::fs::read(&target).expect("target"), PRECIOUS);
    for path in [&out, &record] {
        let meta = std::fs::symlink_metadata(path).expect("written");
        assert!(meta.is_file() && meta.len() > 0, "{} is a regular file of the run's", path.display());
    }
    let results: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).expect("results")).expect("JSON");
    assert_eq!(results["status"]["state"], "complete", "{results}");
    let mut names: Vec<String> = std::fs::read_dir(dir.path()).expect("list").map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    let mut expected: Vec<String> = ["precious.txt", "run.efarec", "run.json"].iter().chain(stale.iter()).map(ToString::to_string).collect();
    expected.sort();
    assert_eq!(names, expected, "nothing staged is left behind");
    for name in stale {
        assert_untouched(&target, &dir.path().join(name));
    }
}

#[test]
fn a_link_at_a_plot_or_its_sidecar_or_the_monitors_recording_is_refused() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("report/tests/fixtures/write-p5.json");
    for link_name in ["plot.png", "plot.png.json"] {
        let (dir, target, link) = planted(link_name);
        let png = dir.path().join("plot.png");
        let run = common::efatop(&["report", fixture.to_str().expect("utf-8"), "--plot", png.to_str().expect("utf-8")]);
        assert_refused(&run, &["--plot", link.to_str().expect("utf-8"), "is a symbolic link"]);
        assert_untouched(&target, &link);
        let names = std::fs::read_dir(dir.path()).expect("list").count();
        assert_eq!(names, 2, "neither the picture nor its sidecar was written");
    }
    let (_dir, target, link) = planted("monitor.efarec");
    let run = common::efatop(&["monitor", "--record", link.to_str().expect("utf-8"), "--once"]);
    assert_refused(&run, &["--record", "is a symbolic link"]);
    assert_untouched(&target, &link);
}

/// A recording as the recorder writes one: its line, then gzip members each holding `messages`.
struct Crafted {
    bytes: Vec<u8>,
}

impl Crafted {
    fn new() -> Self {
        Self { bytes: format!("{RECORDING_MAGIC} {VERSION}\n").into_bytes() }
    }

    /// One gzip member holding the framed messages `write` makes.
    /// Compressed as tightly as gzip goes, as a crafted file would be.
    fn member(mut self, write: impl FnOnce(&mut dyn Write)) -> Self {
        let mut member = GzEncoder::new(Vec::new(), Compression::best());
        write(&mut member);
        self.bytes.extend_from_slice(&member.finish().expect("gzip"));
        self
    }

    fn save(&self, dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, &self.bytes).expect("write");
        path
    }
}

fn event(t_us: u64, event: &ConsumerEvent) -> Vec<u8> {
    let mut frame = Vec::new();
    stream::encode_event(t_us, event, &mut frame).expect("encode");
    frame
}

/// 1 GiB: what no replay may need, as the address-space limit and the bound on peak resident size.
const GIB: u64 = 1 << 30;

/// `efatop replay FILE` (and with `--json`) under a 1 GiB address-space limit: refused with one line
/// holding `needles`, exit 2, in either mode.
fn assert_replay_refused(path: &Path, needles: &[&str]) {
    let prlimit = common::program("prlimit").expect("prlimit (util-linux, in every Debian) holds the replay to 1 GiB");
    let efatop = common::efatop_path();
    for json in [false, true] {
        let mut args = vec![format!("--as={GIB}"), "--".into(), efatop.display().to_string(), "replay".into()];
        if json {
            args.push("--json".into());
        }
        args.push(path.display().to_string());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let run = common::run_program(prlimit.to_str().expect("utf-8"), &args, Duration::from_mins(3));
        assert!(!run.stderr.contains("memory allocation"), "an allocation failed under the limit: {}", run.stderr);
        assert_refused(&run, needles);
        assert!(run.stdout.is_empty(), "nothing is played from a refused recording: {}", run.stdout);
    }
    // The largest resident size of any child this test process has waited for (prlimit execs efatop, so
    // it is efatop's): every replay here stayed below the limit.
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN).expect("getrusage");
    let peak = u64::try_from(usage.max_rss()).expect("max_rss") * 1024;
    assert!(peak < GIB, "a child's peak resident size was {} MiB", peak >> 20);
}

#[test]
fn a_recording_claiming_200_million_ranks_is_refused_naming_the_cap() {
    let dir = tempfile::tempdir().expect("dir");
    let start = RunStart { info: RunInfo { ranks: 200_000_000, ..RunInfo::default() }, ..RunStart::default() };
    let path = Crafted::new()
        .member(|w| w.write_all(&event(0, &ConsumerEvent::Run(Box::new(start)))).expect("write"))
        .save(dir.path(), "ranks.efarec");
    assert!(std::fs::metadata(&path).expect("size").len() < 2048, "a small file");
    assert_replay_refused(&path, &["ranks.efarec: recording claims 200000000 ranks; replay holds at most 65536"]);
}

#[test]
fn a_recording_holding_one_64_mib_message_is_refused_naming_the_cap() {
    let dir = tempfile::tempdir().expect("dir");
    let note = ConsumerEvent::Note("x".repeat(64 << 20));
    let frame = event(0, &note);
    let announced = frame.len() - 4;
    let path = Crafted::new().member(|w| w.write_all(&frame).expect("write")).save(dir.path(), "big.efarec");
    assert!(std::fs::metadata(&path).expect("size").len() < 256 << 10, "a small file");
    let needle = format!("recording holds a message of {announced} bytes; replay reads at most 16777216 bytes a message");
    assert_replay_refused(&path, &[&needle]);
}

#[test]
fn a_recording_of_more_tiny_messages_than_the_index_holds_is_refused_naming_the_cap() {
    let dir = tempfile::tempdir().expect("dir");
    let frame = event(0, &ConsumerEvent::Note(String::new()));
    let count = stream::MAX_RECORDING_MESSAGES + 1;
    // In members of a million messages, as a long run's recording is in many members.
    let mut crafted = Crafted::new();
    let mut left = count;
    while left > 0 {
        let here = left.min(1 << 20);
        crafted = crafted.member(|w| {
            let mut block = Vec::with_capacity(frame.len() * here);
            for _ in 0..here {
                block.extend_from_slice(&frame);
            }
            w.write_all(&block).expect("write");
        });
        left -= here;
    }
    let path = crafted.save(dir.path(), "tiny.efarec");
    assert!(std::fs::metadata(&path).expect("size").len() < 4 << 20, "a small file");
    assert_replay_refused(&path, &["tiny.efarec: recording holds more than 4194304 messages; replay indexes at most 4194304"]);
}

#[test]
fn a_gzip_bomb_is_refused_naming_the_cap() {
    let dir = tempfile::tempdir().expect("dir");
    // Valid messages (a MiB of note each) inflating past the 256 MiB a block may hold, from a few hundred KiB.
    let frame = event(0, &ConsumerEvent::Note("a".repeat(1 << 20)));
    let path = Crafted::new()
        .member(|w| {
            for _ in 0..300 {
                w.write_all(&frame).expect("write");
            }
        })
        .save(dir.path(), "bomb.efarec");
    assert!(std::fs::metadata(&path).expect("size").len() < 1 << 20, "a small file");
    assert_replay_refused(&path, &["bomb.efarec: recording holds a compressed block of more than 268435456 bytes decompressed"]);
    // Zeros: not a message at all, and still inflated no further than the cap while the reader looks for the
    // block's end.
    let zeros = vec![0_u8; 64 << 20];
    let path = Crafted::new()
        .member(|w| {
            for _ in 0..5 {
                w.write_all(&zeros).expect("write");
            }
        })
        .save(dir.path(), "zeros.efarec");
    assert_replay_refused(&path, &["zeros.efarec: recording holds a compressed block of more than 268435456 bytes decompressed"]);
}
