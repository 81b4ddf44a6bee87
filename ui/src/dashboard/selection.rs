//! Which rank and channel are selected, and how the arrow keys move that selection. The view stores
//! plain numbers; these helpers keep them pointing at ranks and channels the data has.

use crate::state::DashboardState;
use crate::view::View;

/// Every rank the dashboard knows of, from the peers and from the channels, ascending.
pub(super) fn ranks(state: &DashboardState) -> Vec<usize> {
    let mut ranks: Vec<usize> =
        state.peers.iter().map(|peer| peer.rank).chain(state.channels.iter().map(|view| view.rank)).collect();
    ranks.sort_unstable();
    ranks.dedup();
    ranks
}

/// The channel numbers `rank` reports, ascending.
pub(super) fn channels_of(state: &DashboardState, rank: usize) -> Vec<usize> {
    let mut channels: Vec<usize> =
        state.channels.iter().filter(|view| view.rank == rank).map(|view| view.channel).collect();
    channels.sort_unstable();
    channels.dedup();
    channels
}

/// One step through `values` from `current`, clamped at both ends. A `current` that is not in `values`
/// moves to its nearest neighbour in the direction of the step.
fn step_through(values: &[usize], current: usize, forward: bool) -> Option<usize> {
    let last = values.len().checked_sub(1)?;
    let position = values.partition_point(|&value| value < current);
    let present = values.get(position) == Some(&current);
    let target = match (present, forward) {
        (true, true) => (position + 1).min(last),
        (false, true) => position.min(last),
        (_, false) => position.saturating_sub(1),
    };
    values.get(target).copied()
}

pub(super) fn move_rank(view: &mut View, state: &DashboardState, forward: bool) {
    let Some(rank) = step_through(&ranks(state), view.selected_rank, forward) else { return };
    view.selected_rank = rank;
    // Keep the channel number when the new rank has it, so moving down a column of equal channels
    // stays in that column; otherwise take the closest one below.
    let channels = channels_of(state, rank);
    if !channels.is_empty() && !channels.contains(&view.selected_channel) {
        let below = channels.partition_point(|&channel| channel < view.selected_channel);
        view.selected_channel = channels[below.saturating_sub(1).min(channels.len() - 1)];
    }
}

pub(super) fn move_channel(view: &mut View, state: &DashboardState, forward: bool) {
    let channels = channels_of(state, view.selected_rank);
    if let Some(channel) = step_through(&channels, view.selected_channel, forward) {
        view.selected_channel = channel;
    }
}

/// Which end of the selected pair an arrow key moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PairEnd {
    Sender,
    Receiver,
}

/// Moves the selected pair's sender (↑↓) or receiver (←→) by one rank, clamped to the ranks of the
/// run's pair matrix (a run without one leaves the pair where it is).
pub(super) fn move_pair(view: &mut View, state: &DashboardState, end: PairEnd, forward: bool) {
    let Some(pairs) = &state.pairs else { return };
    let last = pairs.ranks().saturating_sub(1);
    let rank = match end {
        PairEnd::Sender => &mut view.selected_sender,
        PairEnd::Receiver => &mut view.selected_receiver,
    };
    *rank = if forward { (*rank + 1).min(last) } else { rank.saturating_sub(1).min(last) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_clamp_and_snap_to_neighbours() {
        let values = [0, 2, 5];
        assert_eq!(step_through(&values, 0, false), Some(0));
        assert_eq!(step_through(&values, 0, true), Some(2));
        assert_eq!(step_through(&values, 5, true), Some(5));
        assert_eq!(step_through(&values, 3, true), Some(5));
        assert_eq!(step_through(&values, 3, false), Some(2));
        assert_eq!(step_through(&values, 9, true), Some(5));
        assert_eq!(step_through(&[], 0, true), None);
    }
}
