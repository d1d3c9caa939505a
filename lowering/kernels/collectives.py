"""NumPy kernels. Collective ops over replicas/partitions: all_reduce, all_gather, all_to_all, reduce_scatter, collective_permute, collective_broadcast, replica_id, partition_id."""

from __future__ import annotations
