//! What rank 0's session hears from the run, on one channel: the collector's telemetry batches and the
//! experiment's own events (steps, measurements, notes, the end). The type lives in `efatop-proto`
//! ([`efatop_proto::events`]), serializable, so that viewers (`efatop attach`) and recordings
//! (`efatop replay`) fold the very same events.

pub use efatop_proto::events::{ConsumerEvent, RunInfo, RunStart};
