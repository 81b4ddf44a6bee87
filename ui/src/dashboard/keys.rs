//! What each key does to the dashboard.

use super::selection::{move_channel, move_pair, move_rank, PairEnd};
use crate::state::{Action, DashboardState, Key, Panel};

/// Applies `key` to `state` and says whether the binary should quit.
///
/// - once the run has finished, every key quits (the final tables have been seen);
/// - with the help overlay open, `Esc` and `?` close it, `q` quits, and other keys are ignored so
///   nothing changes behind the overlay;
/// - `q` or `Esc` quits; `Tab` and `BackTab` cycle the focused panel; `Up` and `Down` select a rank,
///   `Left` and `Right` one of its channels (clamped at the ends) — with the pairs heatmap focused, they
///   move the selected pair's sender and receiver instead; `p` freezes or unfreezes the view;
///   `t` shows or hides the topology view; `?` opens the help.
pub fn handle_key(state: &mut DashboardState, key: Key) -> Action {
    if state.finished {
        return Action::Quit;
    }
    if state.show_help {
        return match key {
            Key::Char('q') => Action::Quit,
            Key::Esc | Key::Char('?') => {
                state.show_help = false;
                Action::None
            }
            _ => Action::None,
        };
    }
    // Large runs: the fleet view's keys (host selection, Enter, `/`, Esc out of a host) come first.
    if super::fleet::handle_key(state, key) {
        return Action::None;
    }
    match key {
        Key::Char('q') | Key::Esc => return Action::Quit,
        Key::Char('?') => state.show_help = true,
        Key::Char('p') => state.frozen = !state.frozen,
        Key::Char('t') => state.show_topology = !state.show_topology,
        Key::Tab => state.focus = cycle(state.panel_order(), state.focus, true),
        Key::BackTab => state.focus = cycle(state.panel_order(), state.focus, false),
        Key::Up if state.focus == Panel::Pairs => move_pair(state, PairEnd::Sender, false),
        Key::Down if state.focus == Panel::Pairs => move_pair(state, PairEnd::Sender, true),
        Key::Left if state.focus == Panel::Pairs => move_pair(state, PairEnd::Receiver, false),
        Key::Right if state.focus == Panel::Pairs => move_pair(state, PairEnd::Receiver, true),
        Key::Up => move_rank(state, false),
        Key::Down => move_rank(state, true),
        Key::Left => move_channel(state, false),
        Key::Right => move_channel(state, true),
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
    use crate::dashboard::sample::sample_state;
    use crate::state::{ChannelView, PairMatrixView, PeerView};

    #[test]
    fn t_toggles_the_topology_view() {
        let mut state = DashboardState::default();
        assert_eq!(handle_key(&mut state, Key::Char('t')), Action::None);
        assert!(state.show_topology);
        handle_key(&mut state, Key::Char('t'));
        assert!(!state.show_topology);
    }

    #[test]
    fn q_and_esc_quit() {
        let mut state = DashboardState::default();
        assert_eq!(handle_key(&mut state, Key::Char('q')), Action::Quit);
        assert_eq!(handle_key(&mut state, Key::Esc), Action::Quit);
    }

    #[test]
    fn other_keys_do_not_quit() {
        let mut state = sample_state();
        for key in [Key::Enter, Key::Char('x'), Key::Up, Key::Tab] {
            assert_eq!(handle_key(&mut state, key), Action::None, "{key:?}");
        }
    }

    #[test]
    fn question_mark_toggles_help_and_esc_only_closes_it() {
        let mut state = DashboardState::default();
        assert_eq!(handle_key(&mut state, Key::Char('?')), Action::None);
        assert!(state.show_help);
        assert_eq!(handle_key(&mut state, Key::Char('?')), Action::None);
        assert!(!state.show_help);

        state.show_help = true;
        assert_eq!(handle_key(&mut state, Key::Esc), Action::None);
        assert!(!state.show_help);
    }

    #[test]
    fn help_open_ignores_other_keys_but_q_still_quits() {
        let mut state = sample_state();
        state.show_help = true;
        let before = state.clone();
        for key in [Key::Tab, Key::Down, Key::Right, Key::Char('p'), Key::Enter] {
            assert_eq!(handle_key(&mut state, key), Action::None);
        }
        assert_eq!(state, before);
        assert_eq!(handle_key(&mut state, Key::Char('q')), Action::Quit);
    }

    #[test]
    fn any_key_quits_once_finished() {
        for key in [Key::Enter, Key::Char('x'), Key::Up, Key::Tab, Key::Char('?'), Key::Char('p')] {
            let mut state = DashboardState { finished: true, show_help: key == Key::Up, ..DashboardState::default() };
            assert_eq!(handle_key(&mut state, key), Action::Quit, "{key:?}");
        }
    }

    #[test]
    fn tab_and_backtab_cycle_focus_through_every_panel() {
        let mut state = DashboardState::default();
        let mut seen = vec![state.focus];
        for _ in 1..Panel::ORDER.len() {
            handle_key(&mut state, Key::Tab);
            seen.push(state.focus);
        }
        assert_eq!(seen, Panel::ORDER);
        handle_key(&mut state, Key::Tab);
        assert_eq!(state.focus, Panel::ORDER[0]);
        handle_key(&mut state, Key::BackTab);
        assert_eq!(state.focus, Panel::ORDER[Panel::ORDER.len() - 1]);
        handle_key(&mut state, Key::BackTab);
        assert_eq!(state.focus, Panel::ORDER[Panel::ORDER.len() - 2]);
    }

    #[test]
    fn p_toggles_freeze() {
        let mut state = DashboardState::default();
        handle_key(&mut state, Key::Char('p'));
        assert!(state.frozen);
        handle_key(&mut state, Key::Char('p'));
        assert!(!state.frozen);
    }

    #[test]
    fn up_and_down_move_the_rank_and_clamp() {
        let mut state = sample_state();
        state.selected_rank = 0;
        handle_key(&mut state, Key::Up);
        assert_eq!(state.selected_rank, 0);
        for expected in [1, 2, 3, 3] {
            handle_key(&mut state, Key::Down);
            assert_eq!(state.selected_rank, expected);
        }
        handle_key(&mut state, Key::Up);
        assert_eq!(state.selected_rank, 2);
    }

    #[test]
    fn ranks_come_from_peers_or_channels() {
        let channel = |rank, channel| ChannelView { rank, channel, ..ChannelView::default() };
        let mut state = DashboardState {
            channels: vec![channel(0, 0), channel(4, 0)],
            peers: vec![PeerView { rank: 2, ..PeerView::default() }],
            ..DashboardState::default()
        };
        handle_key(&mut state, Key::Down);
        assert_eq!(state.selected_rank, 2);
        handle_key(&mut state, Key::Down);
        assert_eq!(state.selected_rank, 4);
        handle_key(&mut state, Key::Down);
        assert_eq!(state.selected_rank, 4);
    }

    #[test]
    fn left_and_right_move_within_the_ranks_channels_and_clamp() {
        let mut state = sample_state();
        state.selected_rank = 1;
        state.selected_channel = 0;
        handle_key(&mut state, Key::Left);
        assert_eq!(state.selected_channel, 0);
        for expected in [1, 2, 3, 3] {
            handle_key(&mut state, Key::Right);
            assert_eq!(state.selected_channel, expected);
        }
        handle_key(&mut state, Key::Left);
        assert_eq!(state.selected_channel, 2);
    }

    #[test]
    fn changing_rank_keeps_the_channel_when_it_exists_else_clamps() {
        let channel = |rank, channel| ChannelView { rank, channel, ..ChannelView::default() };
        let mut state = DashboardState {
            channels: vec![channel(0, 0), channel(0, 1), channel(0, 2), channel(1, 0), channel(2, 0), channel(2, 2)],
            selected_channel: 2,
            ..DashboardState::default()
        };
        handle_key(&mut state, Key::Down);
        assert_eq!((state.selected_rank, state.selected_channel), (1, 0));
        state.selected_channel = 2;
        handle_key(&mut state, Key::Down);
        assert_eq!((state.selected_rank, state.selected_channel), (2, 2));
        handle_key(&mut state, Key::Right);
        assert_eq!(state.selected_channel, 2);
    }

    #[test]
    fn alltoall_runs_cycle_through_the_heatmap_too() {
        let mut state = DashboardState { pairs: Some(PairMatrixView::new(4)), focus: Panel::Pairs, ..DashboardState::default() };
        let mut seen = vec![state.focus];
        for _ in 1..Panel::ALLTOALL_ORDER.len() {
            handle_key(&mut state, Key::Tab);
            seen.push(state.focus);
        }
        assert_eq!(seen, Panel::ALLTOALL_ORDER);
        handle_key(&mut state, Key::Tab);
        assert_eq!(state.focus, Panel::Pairs);
        handle_key(&mut state, Key::BackTab);
        assert_eq!(state.focus, Panel::Log);
    }

    #[test]
    fn arrows_move_the_selected_pair_when_the_heatmap_is_focused_and_clamp() {
        let mut state = DashboardState { pairs: Some(PairMatrixView::new(3)), focus: Panel::Pairs, ..DashboardState::default() };
        let selected = |state: &DashboardState| state.pairs.as_ref().map(|p| (p.selected_sender, p.selected_receiver));
        assert_eq!(selected(&state), Some((0, 1)));
        for key in [Key::Down, Key::Down, Key::Down, Key::Left, Key::Left] {
            handle_key(&mut state, key);
        }
        assert_eq!(selected(&state), Some((2, 0)));
        for key in [Key::Right, Key::Right, Key::Right, Key::Up] {
            handle_key(&mut state, key);
        }
        assert_eq!(selected(&state), Some((1, 2)));
        assert_eq!((state.selected_rank, state.selected_channel), (0, 0), "rank selection untouched");

        state.focus = Panel::Gauges;
        handle_key(&mut state, Key::Up);
        assert_eq!(selected(&state), Some((1, 2)), "only the focused heatmap takes the arrows");
    }

    #[test]
    fn arrows_on_an_empty_dashboard_change_nothing() {
        let mut state = DashboardState::default();
        for key in [Key::Up, Key::Down, Key::Left, Key::Right] {
            assert_eq!(handle_key(&mut state, key), Action::None);
        }
        assert_eq!(state, DashboardState::default());
    }
}
