//! What each key does to the dashboard's view.

use super::selection::{move_channel, move_pair, move_rank, PairEnd};
use crate::state::{Action, DashboardState, Key, Panel};
use crate::view::View;

/// Applies `key` to `view` (drawn over `state`, which no key changes) and says whether the binary
/// should quit.
///
/// - once the run has finished, every key quits (the final tables have been seen);
/// - with the help overlay open, `Esc` and `?` close it, `q` quits, and other keys are ignored so
///   nothing changes behind the overlay;
/// - `q` or `Esc` quits; `Tab` and `BackTab` cycle the focused panel; `Up` and `Down` select a rank,
///   `Left` and `Right` one of its channels (clamped at the ends) — with the pairs heatmap focused, they
///   move the selected pair's sender and receiver instead; `p` freezes or unfreezes the view;
///   `t` shows or hides the topology view; `?` opens the help.
/// - a run drawn as a fleet takes its keys first: `Up`/`Down` select a host, `Enter` drills into its gauges
///   and `Esc` comes back, `/` finds a host by name (the view's [`FleetView`](crate::view::FleetView)).
pub fn handle_key(view: &mut View, state: &DashboardState, key: Key) -> Action {
    if state.finished {
        return Action::Quit;
    }
    if view.show_help {
        return match key {
            Key::Char('q') => Action::Quit,
            Key::Esc | Key::Char('?') => {
                view.show_help = false;
                Action::None
            }
            _ => Action::None,
        };
    }
    // Large runs: the fleet view's keys (host selection, Enter, `/`, Esc out of a host) come first.
    if super::fleet::handle_key(view, state, key) {
        return Action::None;
    }
    let pairs = view.focus == Panel::Pairs;
    match key {
        Key::Char('q') | Key::Esc => return Action::Quit,
        Key::Char('?') => view.show_help = true,
        Key::Char('p') => view.frozen = !view.frozen,
        Key::Char('t') => view.show_topology = !view.show_topology,
        Key::Tab => view.focus = cycle(state.panel_order(), view.focus, true),
        Key::BackTab => view.focus = cycle(state.panel_order(), view.focus, false),
        Key::Up if pairs => move_pair(view, state, PairEnd::Sender, false),
        Key::Down if pairs => move_pair(view, state, PairEnd::Sender, true),
        Key::Left if pairs => move_pair(view, state, PairEnd::Receiver, false),
        Key::Right if pairs => move_pair(view, state, PairEnd::Receiver, true),
        Key::Up => move_rank(view, state, false),
        Key::Down => move_rank(view, state, true),
        Key::Left => move_channel(view, state, false),
        Key::Right => move_channel(view, state, true),
        Key::Enter | Key::Char(_) => {}
    }
    Action::None
}

fn cycle(order: &[Panel], focus: Panel, forward: bool) -> Panel {
    let count = order.len();
    let position = order.iter().position(|&panel| panel == focus).unwrap_or(0);
    let next = if forward { (position + 1) % count } else { (position + count - 1) % count };
    order[next]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dashboard::sample::{sample_state, sample_view};
    use crate::state::{ChannelView, PairMatrixView, PeerView};

    /// The data and its view, as a session holds them.
    struct Shown {
        state: DashboardState,
        view: View,
    }

    impl Shown {
        fn of(state: DashboardState) -> Self {
            let view = View::of(&state);
            Self { state, view }
        }

        fn key(&mut self, key: Key) -> Action {
            handle_key(&mut self.view, &self.state, key)
        }
    }

    fn sample() -> Shown {
        Shown { state: sample_state(), view: sample_view() }
    }

    #[test]
    fn t_toggles_the_topology_view() {
        let mut shown = Shown::of(DashboardState::default());
        assert_eq!(shown.key(Key::Char('t')), Action::None);
        assert!(shown.view.show_topology);
        shown.key(Key::Char('t'));
        assert!(!shown.view.show_topology);
    }

    #[test]
    fn q_and_esc_quit() {
        let mut shown = Shown::of(DashboardState::default());
        assert_eq!(shown.key(Key::Char('q')), Action::Quit);
        assert_eq!(shown.key(Key::Esc), Action::Quit);
    }

    #[test]
    fn other_keys_do_not_quit() {
        let mut shown = sample();
        for key in [Key::Enter, Key::Char('x'), Key::Up, Key::Tab] {
            assert_eq!(shown.key(key), Action::None, "{key:?}");
        }
    }

    #[test]
    fn question_mark_toggles_help_and_esc_only_closes_it() {
        let mut shown = Shown::of(DashboardState::default());
        assert_eq!(shown.key(Key::Char('?')), Action::None);
        assert!(shown.view.show_help);
        assert_eq!(shown.key(Key::Char('?')), Action::None);
        assert!(!shown.view.show_help);

        shown.view.show_help = true;
        assert_eq!(shown.key(Key::Esc), Action::None);
        assert!(!shown.view.show_help);
    }

    #[test]
    fn help_open_ignores_other_keys_but_q_still_quits() {
        let mut shown = sample();
        shown.view.show_help = true;
        let before = shown.view.clone();
        for key in [Key::Tab, Key::Down, Key::Right, Key::Char('p'), Key::Enter] {
            assert_eq!(shown.key(key), Action::None);
        }
        assert_eq!(shown.view, before);
        assert_eq!(shown.key(Key::Char('q')), Action::Quit);
    }

    #[test]
    fn any_key_quits_once_finished() {
        for key in [Key::Enter, Key::Char('x'), Key::Up, Key::Tab, Key::Char('?'), Key::Char('p')] {
            let state = DashboardState { finished: true, ..DashboardState::default() };
            let mut view = View { show_help: key == Key::Up, ..View::of(&state) };
            assert_eq!(handle_key(&mut view, &state, key), Action::Quit, "{key:?}");
        }
    }

    #[test]
    fn tab_and_backtab_cycle_focus_through_every_panel() {
        let mut shown = Shown::of(DashboardState::default());
        let mut seen = vec![shown.view.focus];
        for _ in 1..Panel::ORDER.len() {
            shown.key(Key::Tab);
            seen.push(shown.view.focus);
        }
        assert_eq!(seen, Panel::ORDER);
        shown.key(Key::Tab);
        assert_eq!(shown.view.focus, Panel::ORDER[0]);
        shown.key(Key::BackTab);
        assert_eq!(shown.view.focus, Panel::ORDER[Panel::ORDER.len() - 1]);
        shown.key(Key::BackTab);
        assert_eq!(shown.view.focus, Panel::ORDER[Panel::ORDER.len() - 2]);
    }

    #[test]
    fn p_toggles_freeze() {
        let mut shown = Shown::of(DashboardState::default());
        shown.key(Key::Char('p'));
        assert!(shown.view.frozen);
        shown.key(Key::Char('p'));
        assert!(!shown.view.frozen);
    }

    #[test]
    fn up_and_down_move_the_rank_and_clamp() {
        let mut shown = sample();
        shown.view.selected_rank = 0;
        shown.key(Key::Up);
        assert_eq!(shown.view.selected_rank, 0);
        for expected in [1, 2, 3, 3] {
            shown.key(Key::Down);
            assert_eq!(shown.view.selected_rank, expected);
        }
        shown.key(Key::Up);
        assert_eq!(shown.view.selected_rank, 2);
    }

    #[test]
    fn ranks_come_from_peers_or_channels() {
        let channel = |rank, channel| ChannelView { rank, channel, ..ChannelView::default() };
        let mut shown = Shown::of(DashboardState {
            channels: vec![channel(0, 0), channel(4, 0)],
            peers: vec![PeerView { rank: 2, ..PeerView::default() }],
            ..DashboardState::default()
        });
        shown.key(Key::Down);
        assert_eq!(shown.view.selected_rank, 2);
        shown.key(Key::Down);
        assert_eq!(shown.view.selected_rank, 4);
        shown.key(Key::Down);
        assert_eq!(shown.view.selected_rank, 4);
    }

    #[test]
    fn left_and_right_move_within_the_ranks_channels_and_clamp() {
        let mut shown = sample();
        shown.view.selected_rank = 1;
        shown.view.selected_channel = 0;
        shown.key(Key::Left);
        assert_eq!(shown.view.selected_channel, 0);
        for expected in [1, 2, 3, 3] {
            shown.key(Key::Right);
            assert_eq!(shown.view.selected_channel, expected);
        }
        shown.key(Key::Left);
        assert_eq!(shown.view.selected_channel, 2);
    }

    #[test]
    fn changing_rank_keeps_the_channel_when_it_exists_else_clamps() {
        let channel = |rank, channel| ChannelView { rank, channel, ..ChannelView::default() };
        let mut shown = Shown::of(DashboardState {
            channels: vec![channel(0, 0), channel(0, 1), channel(0, 2), channel(1, 0), channel(2, 0), channel(2, 2)],
            ..DashboardState::default()
        });
        shown.view.selected_channel = 2;
        shown.key(Key::Down);
        assert_eq!((shown.view.selected_rank, shown.view.selected_channel), (1, 0));
        shown.view.selected_channel = 2;
        shown.key(Key::Down);
        assert_eq!((shown.view.selected_rank, shown.view.selected_channel), (2, 2));
        shown.key(Key::Right);
        assert_eq!(shown.view.selected_channel, 2);
    }

    #[test]
    fn alltoall_runs_cycle_through_the_heatmap_too() {
        let mut shown = Shown::of(DashboardState { pairs: Some(PairMatrixView::new(4)), ..DashboardState::default() });
        assert_eq!(shown.view.focus, Panel::Pairs, "an all-to-all's view opens on the heatmap");
        let mut seen = vec![shown.view.focus];
        for _ in 1..Panel::ALLTOALL_ORDER.len() {
            shown.key(Key::Tab);
            seen.push(shown.view.focus);
        }
        assert_eq!(seen, Panel::ALLTOALL_ORDER);
        shown.key(Key::Tab);
        assert_eq!(shown.view.focus, Panel::Pairs);
        shown.key(Key::BackTab);
        assert_eq!(shown.view.focus, Panel::Log);
    }

    #[test]
    fn arrows_move_the_selected_pair_when_the_heatmap_is_focused_and_clamp() {
        let mut shown = Shown::of(DashboardState { pairs: Some(PairMatrixView::new(3)), ..DashboardState::default() });
        shown.view.focus = Panel::Pairs;
        let selected = |shown: &Shown| shown.state.pairs.as_ref().map(|_| (shown.view.selected_sender, shown.view.selected_receiver));
        assert_eq!(selected(&shown), Some((0, 1)));
        for key in [Key::Down, Key::Down, Key::Down, Key::Left, Key::Left] {
            shown.key(key);
        }
        assert_eq!(selected(&shown), Some((2, 0)));
        for key in [Key::Right, Key::Right, Key::Right, Key::Up] {
            shown.key(key);
        }
        assert_eq!(selected(&shown), Some((1, 2)));
        assert_eq!((shown.view.selected_rank, shown.view.selected_channel), (0, 0), "rank selection untouched");

        shown.view.focus = Panel::Gauges;
        shown.key(Key::Up);
        assert_eq!(selected(&shown), Some((1, 2)), "only the focused heatmap takes the arrows");
    }

    #[test]
    fn arrows_on_an_empty_dashboard_change_nothing() {
        let mut shown = Shown::of(DashboardState::default());
        for key in [Key::Up, Key::Down, Key::Left, Key::Right] {
            assert_eq!(shown.key(key), Action::None);
        }
        assert_eq!(shown.state, DashboardState::default());
        assert_eq!(shown.view, View::of(&DashboardState::default()));
    }
}
