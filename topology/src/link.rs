//! How two devices are connected, in the terms of `nvidia-smi topo -m`, and how that is read off hwloc's
//! tree of bridges.

use efatop_proto::topology::Link;

/// One step from a PCI device up hwloc's tree: the PCI bridges and host bridge above it, ending at the
/// CPU-side object the I/O tree hangs from (a Package, a NUMA group or the Machine).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Hop {
    /// A PCI-to-PCI bridge: a switch's upstream or downstream port, or a root port.
    PciBridge(u64),
    /// A PCIe host bridge (root complex).
    HostBridge(u64),
    /// The first non-I/O ancestor, with the NUMA nodes it covers. Paths stop here: everything above is
    /// CPU topology, and devices that meet only there are told apart by NUMA node alone.
    Cpu { id: u64, numa_nodes: Vec<u32> },
}

impl Hop {
    fn id(&self) -> u64 {
        match self {
            Hop::PciBridge(id) | Hop::HostBridge(id) | Hop::Cpu { id, .. } => *id,
        }
    }
}

/// The PCIe relation between two devices given their paths (nearest hop first).
///
/// A switch shows in hwloc as an upstream-port bridge with one downstream-port bridge per device behind
/// it, so "at most one switch" means: the paths meet at a bridge, and neither device has more than one
/// bridge between itself and that meeting point (its own downstream port).
pub(crate) fn pcie_link(a: &[Hop], b: &[Hop]) -> Link {
    for (ia, hop) in a.iter().enumerate() {
        if matches!(hop, Hop::Cpu { .. }) {
            break;
        }
        let Some(ib) = b.iter().position(|other| other.id() == hop.id()) else { continue };
        return match hop {
            Hop::PciBridge(_) => {
                let below = |path: &[Hop]| path.iter().filter(|h| matches!(h, Hop::PciBridge(_))).count();
                if below(&a[..ia]).max(below(&b[..ib])) <= 1 {
                    Link::Pix
                } else {
                    Link::Pxb
                }
            }
            Hop::HostBridge(_) => Link::Phb,
            Hop::Cpu { .. } => unreachable!("the loop stops at the first CPU hop"),
        };
    }
    // Different host bridges: same NUMA node or not.
    if numa_of(a) == numa_of(b) {
        Link::Node
    } else {
        Link::Sys
    }
}

fn numa_of(path: &[Hop]) -> Option<&[u32]> {
    path.iter().find_map(|hop| match hop {
        Hop::Cpu { numa_nodes, .. } => Some(numa_nodes.as_slice()),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu(id: u64, node: u32) -> Hop {
        Hop::Cpu { id, numa_nodes: vec![node] }
    }

    #[test]
    fn one_switch_is_pix() {
        // GPU and NIC each behind a downstream port (2, 3) of the switch whose upstream port is 1.
        let gpu = [Hop::PciBridge(2), Hop::PciBridge(1), Hop::HostBridge(9), cpu(100, 0)];
        let nic = [Hop::PciBridge(3), Hop::PciBridge(1), Hop::HostBridge(9), cpu(100, 0)];
        assert_eq!(pcie_link(&gpu, &nic), Link::Pix);
        // Devices straight on the bridge's bus (p4d's layout).
        let a = [Hop::PciBridge(1), Hop::HostBridge(9), cpu(100, 0)];
        assert_eq!(pcie_link(&a, &a.clone()), Link::Pix);
    }

    #[test]
    fn nested_switches_are_pxb() {
        // NIC behind a second switch (5 up, 6 down) hanging off downstream port 3 of the first.
        let gpu = [Hop::PciBridge(2), Hop::PciBridge(1), Hop::HostBridge(9), cpu(100, 0)];
        let upper = [Hop::PciBridge(3), Hop::PciBridge(1), Hop::HostBridge(9), cpu(100, 0)];
        let nic: Vec<Hop> = [Hop::PciBridge(6), Hop::PciBridge(5)].into_iter().chain(upper).collect();
        assert_eq!(pcie_link(&gpu, &nic), Link::Pxb);
    }

    #[test]
    fn host_bridge_node_and_sys() {
        let root_port_1 = [Hop::PciBridge(2), Hop::HostBridge(9), cpu(100, 0)];
        let root_port_2 = [Hop::PciBridge(3), Hop::HostBridge(9), cpu(100, 0)];
        assert_eq!(pcie_link(&root_port_1, &root_port_2), Link::Phb);
        let other_host_bridge = [Hop::PciBridge(4), Hop::HostBridge(10), cpu(100, 0)];
        assert_eq!(pcie_link(&root_port_1, &other_host_bridge), Link::Node);
        // Different packages on the same NUMA node are still NODE; a different node is SYS.
        let other_package = [Hop::HostBridge(11), cpu(101, 0)];
        assert_eq!(pcie_link(&root_port_1, &other_package), Link::Node);
        let other_node = [Hop::HostBridge(12), cpu(102, 1)];
        assert_eq!(pcie_link(&root_port_1, &other_node), Link::Sys);
    }
}
