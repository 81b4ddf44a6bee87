//! `efatop replay` on the TUI loop on `TestBackend`: a recording played back, with its playback keys
//! (space pauses, `]` and `[` step on and back, `+` speeds up), asserted on the screen.

use efatop_proto::stream;
use efatop_ui::state::Key;

use super::{KEYS, Playback};
use efatop_proto::events::ConsumerEvent;
use efatop_proto::recording::{self, Recorder, Recording};
use efatop_ui::tui::scripted::Scripted;
use crate::viewer::Viewer;
use crate::viewer::script::{self, ms};

/// The scripted run, recorded as `--record` writes it and read back as `efatop replay` reads it (the
/// events stay in the file until the playback reaches them).
fn recorded(dir: &tempfile::TempDir) -> Recording {
    let path = dir.path().join("run.efarec");
    let mut recorder = Recorder::start(&path, efatop_files::create_for_appending(&path).expect("create")).expect("start");
    let mut frame = Vec::new();
    for (at, event) in script::recording() {
        frame.clear();
        let t_us = u64::try_from(at.as_micros()).expect("time");
        stream::encode_event(t_us, &event, &mut frame).expect("encode");
        recorder.add(&frame, !matches!(event, ConsumerEvent::Telemetry(_)));
    }
    drop(recorder);
    recording::read(&path).expect("read")
}

fn replay(recording: &Recording) -> Scripted<Viewer, Playback<'_>> {
    Scripted::new(Viewer::new(&KEYS), Playback::new(recording, 1.0), 120, 40)
}

#[test]
fn replay_plays_pauses_and_steps_on_and_back_through_a_recording() {
    let dir = tempfile::tempdir().expect("dir");
    let recording = recorded(&dir);
    assert_eq!(recording.len(), script::recording().len(), "every event indexed");
    let mut tui = replay(&recording);
    assert_eq!(tui.frame(ms(0)), None);
    assert!(tui.screen().contains("replay 1x playing, step 0/2"), "{}", tui.screen());
    // Space pauses: the playback clock stops, however long the session goes on.
    assert_eq!(tui.key(Key::Char(' '), ms(50)), None);
    assert_eq!(tui.frame(ms(5000)), None);
    let paused = tui.screen();
    assert!(paused.contains("replay 1x PAUSED, step 0/2"), "{paused}");
    assert!(!paused.contains("SinglePin 4K"), "{paused}");
    // `]`: on to the first step, then the second, each with everything before it.
    assert_eq!(tui.key(Key::Char(']'), ms(5100)), None);
    assert!(tui.screen().contains("PAUSED, step 1/2"), "{}", tui.screen());
    assert!(tui.row("SinglePin 4K").contains("0/2"), "{}", tui.screen());
    assert_eq!(tui.key(Key::Char(']'), ms(5200)), None);
    insta::assert_snapshot!("replay_second_step_paused_120x40", tui.screen());
    assert!(tui.screen().contains("PAUSED, step 2/2"), "{}", tui.screen());
    assert!(tui.row("SinglePin 8K").contains("1/2"), "{}", tui.screen());
    assert!(tui.screen().contains("SinglePin 4K: 38.50 Gbps, data verified"), "{}", tui.screen());
    assert!(tui.row("r1 c0 shm1").contains("40.0 Gbps"), "{}", tui.screen());
    // The view is the user's: a rank selected, then `[` back to the first step, which tells the run
    // again from its start: the 4K result is not in yet, and rank 1 stays selected.
    assert_eq!(tui.key(Key::Down, ms(5300)), None);
    assert!(tui.row("r1 c0 shm1").contains('▶'), "{}", tui.screen());
    assert_eq!(tui.key(Key::Char('['), ms(5400)), None);
    let back = tui.screen();
    assert!(back.contains("PAUSED, step 1/2"), "{back}");
    assert!(!back.contains("SinglePin 4K: 38.50 Gbps"), "{back}");
    assert!(tui.row("r1 c0 shm1").contains('▶'), "{back}");
    // The help lists the playback keys.
    assert_eq!(tui.key(Key::Char('?'), ms(5500)), None);
    assert!(tui.screen().contains("replay: pause / play"), "{}", tui.screen());
    assert_eq!(tui.key(Key::Char('?'), ms(5500)), None);
    // Space plays on, `+` twice as fast; the recording plays to its end.
    assert_eq!(tui.key(Key::Char(' '), ms(5600)), None);
    assert_eq!(tui.key(Key::Char('+'), ms(5600)), None);
    assert!(tui.screen().contains("replay 2x playing, step 1/2"), "{}", tui.screen());
    assert_eq!(tui.frame(ms(6200)), None);
    let done = tui.screen();
    assert!(done.contains("replay 2x end, step 2/2"), "{done}");
    assert!(done.contains("run complete: press any key"), "{done}");
    assert!(tui.row("   8K   2048").contains("89.50"), "{done}");
    // Any key leaves the finished run; the run's exit code is the viewer's.
    assert_eq!(tui.key(Key::Char('x'), ms(6300)), Some(()));
    assert_eq!(tui.tui.watched.as_ref().map(|watched| watched.tally.exit_code()), Some(0));
}

#[test]
fn replay_q_leaves_mid_run() {
    let dir = tempfile::tempdir().expect("dir");
    let recording = recorded(&dir);
    let mut tui = replay(&recording);
    assert_eq!(tui.frame(ms(300)), None);
    assert!(tui.row("SinglePin 4K").contains("0/2"), "{}", tui.screen());
    assert_eq!(tui.key(Key::Char('q'), ms(350)), Some(()));
}
