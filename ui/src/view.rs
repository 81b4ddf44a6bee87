//! What the user looks at, apart from what there is to see (tokio-console's `View` beside its `State`;
//! bottom's widget states beside its data). Keys change a [`View`], never the [`DashboardState`] it is
//! drawn over; the run's data changes the state, never the view. The widgets draw `(&DashboardState,
//! &View)`, so a frozen copy of the data is drawn under the live view.

use crate::state::{DashboardState, Panel};

/// The dashboard's view: the focused panel, the selections, the overlays and whether the data drawn is
/// a frozen copy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[allow(clippy::struct_excessive_bools)] // independent view toggles, each flipped by its own key
pub struct View {
    /// `p`: what is drawn is a copy of the data, kept still while the run goes on (the session keeps
    /// the copy; the view only says so).
    pub frozen: bool,
    pub show_help: bool,
    /// `t`: the topology view (hosts, ranks, GPUs, NICs in use) replaces the panels.
    pub show_topology: bool,
    pub focus: Panel,
    /// Selection in the gauges and peers panels.
    pub selected_rank: usize,
    pub selected_channel: usize,
    /// All-to-all runs: the selected pair, in ranks (arrow keys move it while the pairs panel has the
    /// focus).
    pub selected_sender: usize,
    pub selected_receiver: usize,
    /// Large runs: the fleet view's selected host, `/` search and host drilled into.
    pub fleet: FleetView,
    /// Keys the session adds to the help overlay (a viewer's, a replay's playback keys).
    pub extra_keys: &'static [(&'static str, &'static str)],
}

impl View {
    /// The view a run's dashboard opens on: the first panel of its Tab order focused (the heatmap of an
    /// all-to-all run), the first rank's first channel and the pair r0→r1 selected.
    pub fn of(state: &DashboardState) -> Self {
        let ranks = state.pairs.as_ref().map_or(0, crate::state::PairMatrixView::ranks);
        Self {
            focus: state.panel_order().first().copied().unwrap_or_default(),
            selected_receiver: usize::from(ranks > 1),
            ..Self::default()
        }
    }
}

/// What the user looks at in the fleet view, apart from the fleet model ([`Fleet`](crate::state::fleet::Fleet),
/// kept with the data): the selected host, a host name being typed after `/`, and the host drilled into.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FleetView {
    /// The selected host (index into [`Fleet::hosts`](crate::state::fleet::Fleet::hosts)); `None`: the
    /// worst host, whichever it is now.
    pub selected: Option<usize>,
    /// `/`: the host name typed so far; each key jumps to the first host it names.
    pub search: Option<String>,
    /// Enter: the host whose channel gauges are shown instead of the fleet (Esc comes back).
    pub drilled: Option<usize>,
}
