//! Deployments beyond one server: Redis Cluster (the harness's clusters,
//! and lock-core on them), Redis Sentinel (the harness's sets, and
//! lock-core following a failover), replica acknowledgement, and what a
//! client pointed at one cluster node does; fenced writes and elections
//! on a cluster (`fenced_cluster`).

mod support;

/// The suites, one module per file in `topology/`.
mod topology {
    mod cluster;
    mod cluster_harness;
    mod deployments;
    mod fair_cluster;
    mod fenced_cluster;
    mod replica_ack;
    mod sentinel;
    mod sentinel_harness;
}
