"""Ray's own multi-node test cluster (``ray.cluster_utils.Cluster``): two simulated nodes of one
CPU each on this machine, started once per test session and shared by every Ray test (the
``ray_cluster`` fixture of tests/conftest.py). A test that stops it (the stopped-cluster test)
leaves it to the next user to start again (:meth:`SharedCluster.address`).
"""

from __future__ import annotations

import contextlib


class SharedCluster:
    """The session's two-node cluster, started on first use and again after a test stopped it."""

    def __init__(self) -> None:
        self.cluster = None

    def _alive(self) -> bool:
        import ray

        if self.cluster is None or not ray.is_initialized():
            return False
        with contextlib.suppress(Exception):
            return len([n for n in ray.nodes() if n.get("Alive")]) == 2
        return False

    def address(self) -> str:
        """The running cluster's address (started now when it is not running), this process joined."""
        import ray
        from ray.cluster_utils import Cluster

        if not self._alive():
            self.stop()
            self.cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
            self.cluster.add_node(num_cpus=1)
            ray.init(address=self.cluster.address, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
            self.cluster.wait_for_nodes()
        return self.cluster.address

    def kill(self) -> None:
        """Stop every node at once, as a crash or ``ray stop`` would (the driver stays connected)."""
        for node in [*self.cluster.worker_nodes, self.cluster.head_node]:
            node.kill_all_processes(check_alive=False, allow_graceful=False)

    def stop(self) -> None:
        """Leave and shut the cluster down (whatever state it is in)."""
        import ray

        with contextlib.suppress(Exception):
            ray.shutdown()
        if self.cluster is not None:
            with contextlib.suppress(Exception):
                self.cluster.shutdown()
        self.cluster = None
