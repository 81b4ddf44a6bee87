//! `efatop attach` on the TUI loop on `TestBackend`: a served run's stream, message by message as the
//! viewer's reader thread hands them over, asserted on the screen.

use std::sync::mpsc::{self, Sender};

use efatop_proto::stream::StreamMessage;
use efatop_ui::state::Key;

use super::{Attached, Incoming, KEYS};
use efatop_proto::events::ConsumerEvent;
use efatop_ui::tui::scripted::Scripted;
use crate::viewer::Viewer;
use crate::viewer::script::{measured, ms, start, step, telemetry};

fn attached() -> (Sender<Incoming>, Scripted<Viewer, Attached>) {
    let (send, incoming) = mpsc::channel();
    (send, Scripted::new(Viewer::new(&KEYS), Attached::new("hosta:7070", incoming), 120, 40))
}

fn event(at_ms: u64, event: ConsumerEvent) -> Incoming {
    Incoming::Message(StreamMessage::Event { t_us: at_ms * 1000, event })
}

#[test]
fn attach_shows_a_served_run_as_its_stream_arrives_and_its_cut() {
    let (stream, mut tui) = attached();
    assert_eq!(tui.frame(ms(0)), None);
    assert!(tui.screen().contains("attached to hosta:7070"), "waiting for the run:\n{}", tui.screen());
    stream.send(event(0, start())).unwrap();
    stream.send(event(100, step(4096))).unwrap();
    for seq in 1..=4 {
        stream.send(event(100 * seq + 50, telemetry(seq, 40.0))).unwrap();
    }
    assert_eq!(tui.frame(ms(500)), None);
    insta::assert_snapshot!("attach_mid_run_120x40", tui.screen());
    assert!(tui.row("r0 c0 shm0").contains("40.0 Gbps"), "{}", tui.screen());
    assert!(tui.row("SinglePin 4K").contains("0/2"), "{}", tui.screen());
    // Batches this viewer lost are said on the progress line.
    stream.send(Incoming::Message(StreamMessage::Dropped { total: 3 })).unwrap();
    assert_eq!(tui.frame(ms(600)), None);
    assert!(tui.screen().contains("attached to hosta:7070: 3 batches lost here"), "{}", tui.screen());
    // Keys act on the view: a rank selected, the help open (with the viewer's key) and closed again.
    assert_eq!(tui.key(Key::Down, ms(700)), None);
    assert!(tui.row("r1 c0 shm1").contains('▶'), "{}", tui.screen());
    assert_eq!(tui.key(Key::Char('?'), ms(800)), None);
    assert!(tui.screen().contains("viewer: leave (the run goes on)"), "{}", tui.screen());
    assert_eq!(tui.key(Key::Esc, ms(900)), None, "Esc closes the help, and leaves only after");
    assert!(!tui.screen().contains("viewer: leave"), "{}", tui.screen());
    // The stream is cut before the run ends: the run is shown failed, and any key leaves.
    stream.send(event(500, measured(4096, 38.5))).unwrap();
    stream.send(Incoming::End(Some("connection reset by peer".into()))).unwrap();
    assert_eq!(tui.frame(ms(1000)), None);
    let cut = tui.screen();
    assert!(cut.contains("the stream from hosta:7070 ended before the run did (connection reset by peer)"), "{cut}");
    assert!(tui.row("   4K   1024").contains("38.50"), "{cut}");
    assert!(cut.contains("Press any key to exit"), "{cut}");
    assert_eq!(tui.key(Key::Char('x'), ms(1100)), Some(()));
    assert_eq!(tui.tui.watched.as_ref().map(|watched| watched.tally.exit_code()), Some(1));
}

#[test]
fn attach_q_leaves_before_the_run_starts_and_while_it_goes_on() {
    let (_stream, mut tui) = attached();
    assert_eq!(tui.frame(ms(0)), None);
    assert_eq!(tui.key(Key::Char('q'), ms(100)), Some(()));
    assert!(tui.tui.watched.is_none(), "nothing seen");
    let (stream, mut tui) = attached();
    stream.send(event(0, start())).unwrap();
    stream.send(event(200, ConsumerEvent::Finished { error: None })).unwrap();
    assert_eq!(tui.frame(ms(0)), None);
    assert!(tui.screen().contains("run complete: press any key"), "{}", tui.screen());
    stream.send(Incoming::End(None)).unwrap();
    assert_eq!(tui.frame(ms(100)), None, "the stream closing after the run's end changes nothing");
    assert!(!tui.screen().contains("ended before the run did"), "{}", tui.screen());
    assert_eq!(tui.tui.watched.as_ref().map(|watched| watched.tally.exit_code()), Some(0));
    assert_eq!(tui.key(Key::Char('q'), ms(200)), Some(()));
}
