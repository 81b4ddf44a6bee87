//! `--record FILE` and `efatop replay FILE`: the recording's writer and reader live in
//! [`efatop_proto::recording`] (beside the stream they share, and where the fuzz target reaches them).

pub use efatop_proto::recording::{Cursor, NotARecording, Recorder, Recording, read};
