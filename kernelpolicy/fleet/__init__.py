"""A fleet's inventory and what a policy change does to it (``kernelpolicy diff``).

A front end, beside the bridge and the labels: it reads inventories (platform snapshots, the
Node objects of ``kubectl get nodes -o json``, live daemons) and compares two policy sets over
them with the engine and the bridge, per class of identical nodes.
"""

from __future__ import annotations

from kernelpolicy.fleet.daemons import daemon_addresses, load_daemons
from kernelpolicy.fleet.diff import Change, ClassDiff, FleetDiff, RolloutSteps, diff_fleet
from kernelpolicy.fleet.inventory import Inventory, Node, load_inventory, platform_from_labels

__all__ = [
    "Change",
    "ClassDiff",
    "FleetDiff",
    "Inventory",
    "Node",
    "RolloutSteps",
    "daemon_addresses",
    "diff_fleet",
    "load_daemons",
    "load_inventory",
    "platform_from_labels",
]
